"""`tir db`: manage the tuning-record database and the shared JSON Lines logs.

    tir db export [--db PATH] [--device D] [--out DIR] [--best-only]   db -> DIR/<device>.jsonl
    tir db import FILE... [--db PATH]                                  JSON Lines -> db
    tir db merge A.jsonl B.jsonl... -o OUT.jsonl [--base O.jsonl]      logs -> one sorted log
    tir db top [--db PATH] [--device D] [--workload SUBSTR] [-n 10]    best record per workload
    tir db prune [--db PATH] [--device D] [--keep N] [--errors]        drop slow / failed records
    tir db stats [--db PATH]                                           counts and size
    tir db push [--db PATH] --to URL [--device D]                      local db -> server
    tir db pull --from URL [--db PATH] [--device D]                    server -> local db

``--db`` defaults to ``autotune.database.default_path()`` (``$TIR_CACHE_DIR/tuning.db``). Every
``--db``, ``--to`` and ``--from`` takes a SQLite file path or a PostgreSQL URL
(``postgresql://user@host:5432/dbname``; the password from the URL or libpq's PGPASSWORD /
~/.pgpass, never shown in messages): a team shares one server, ``tir tune --db URL`` writes
to it directly, and ``push`` / ``pull`` move records between it and a local file (upserts
by record id: pushing twice adds nothing; the counts say new / replaced / skipped).

Bad input (a missing file, a malformed JSON line, an unknown device, a URL of another scheme,
a server that does not answer) is one line on stderr naming the file (and line) or option,
exit status 2.

Logs as a git merge driver: every exported or merged log is sorted and de-duplicated, so two
branches that both added records merge as a plain union. Tell git once per clone::

    git config merge.tirlog.name "tensorir tuning-log union"
    git config merge.tirlog.driver "tir db merge --base %O %A %B -o %A"

and in ``.gitattributes``::

    tuning_logs/*.jsonl merge=tirlog

Git passes the common ancestor (%O), ours (%A) and theirs (%B); the merged log replaces %A
and the driver always succeeds (no conflict markers). Records present in the ancestor but
deleted on one side (``tir db prune`` then export) stay deleted; where both sides changed one
record, the later measurement wins. Without ``--base`` the merge is a plain union.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from tensorir.errors import InputError


def add_db_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `tir db` and its subcommands on the `tir` subparsers object."""
    p = subparsers.add_parser(
        "db",
        help="tuning records: export / import / merge / top / prune / stats / push / pull",
        description="Manage the tuning database (a SQLite file, or a PostgreSQL server given as "
        "postgresql://user@host/dbname) and the shared JSON Lines logs. push / pull copy records "
        "between a local file and a server.",
    )
    sub = p.add_subparsers(
        dest="db_command", required=True, metavar="{export,import,merge,top,prune,stats,push,pull}"
    )

    def db_arg(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--db",
            metavar="PATH",
            help="tuning database: a SQLite file or a postgresql:// URL (default: $TIR_CACHE_DIR/tuning.db)",
        )

    q = sub.add_parser("export", help="write sorted JSON Lines logs DIR/<device>.jsonl")
    db_arg(q)
    q.add_argument("--device", help="only this device (default: every device in the database)")
    q.add_argument("--out", default="tuning_logs", metavar="DIR", help="output folder (default: tuning_logs)")
    q.add_argument("--best-only", action="store_true", help="only the best record of each workload")
    q.set_defaults(func=cmd_export)

    q = sub.add_parser("import", help="import JSON Lines logs into the database")
    q.add_argument("files", nargs="+", metavar="FILE", help="JSON Lines tuning logs")
    db_arg(q)
    q.set_defaults(func=cmd_import)

    q = sub.add_parser("merge", help="merge JSON Lines logs into one sorted, de-duplicated log")
    q.add_argument("files", nargs="+", metavar="FILE", help="JSON Lines tuning logs")
    q.add_argument("-o", "--output", required=True, metavar="OUT", help="merged log (may be an input)")
    q.add_argument(
        "--base", metavar="FILE", help="common ancestor (git %%O): its deleted records stay deleted"
    )
    q.set_defaults(func=cmd_merge)

    q = sub.add_parser("top", help="best record per workload, slowest workloads first")
    db_arg(q)
    q.add_argument("--device", help="only this device")
    q.add_argument("--workload", metavar="SUBSTR", help="only workload keys containing SUBSTR")
    q.add_argument("-n", type=int, default=10, help="rows to show (default 10; 0: all)")
    q.set_defaults(func=cmd_top)

    q = sub.add_parser("prune", help="keep the N best records per workload and/or drop error records")
    db_arg(q)
    q.add_argument("--device", help="only this device (default: every device)")
    q.add_argument("--keep", type=int, metavar="N", help="keep the N best successful records per workload")
    q.add_argument("--errors", action="store_true", help="delete failed-measurement records")
    q.set_defaults(func=cmd_prune)

    q = sub.add_parser("stats", help="records, workloads, devices, errors and size of the database")
    db_arg(q)
    q.set_defaults(func=cmd_stats)

    q = sub.add_parser("push", help="copy the records of --db (a local file) to --to (a PostgreSQL server)")
    db_arg(q)
    q.add_argument("--to", required=True, metavar="URL", help="where to: postgresql://user@host/dbname")
    q.add_argument("--device", help="only this device (default: every device)")
    q.set_defaults(func=cmd_push)

    q = sub.add_parser("pull", help="copy the records of --from (a PostgreSQL server) into --db (a file)")
    q.add_argument(
        "--from", dest="source", required=True, metavar="URL", help="postgresql://user@host/dbname"
    )
    db_arg(q)
    q.add_argument("--device", help="only this device (default: every device)")
    q.set_defaults(func=cmd_pull)
    return p


# -- helpers ---------------------------------------------------------------------------------


def _open_db(path: str | None, create: bool = False, option: str = "--db"):
    from autotune.db_open import open_database

    return open_database(path, create=create, option=option)


def _load(path: str) -> list[dict]:
    from autotune.database import load_jsonl

    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file")
    if p.is_dir():
        raise InputError(f"{path}: is a folder, not a JSON Lines file")
    try:
        return load_jsonl(p)
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file") from None
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or e}") from None


def _check_device(db: Any, device: str | None) -> list[str]:
    devices = db.devices()
    if device is None:
        return devices
    if device not in devices:
        known = ", ".join(devices) or "none"
        raise InputError(f"--device {device!r}: no records for it in {db.path} (devices: {known})")
    return [device]


def _short(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    head = (width - 3) * 2 // 3
    return text[:head] + "..." + text[len(text) - (width - 3 - head) :]


def _config_summary(config: Any, width: int = 40) -> str:
    if isinstance(config, dict):
        parts = [
            f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in sorted(config.items()) if k != "flops"
        ]
        text = " ".join(parts)
    else:
        text = json.dumps(config, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 3] + "..."


def _flops(record: dict) -> float | None:
    flops = record.get("flops")
    if flops is None and isinstance(record.get("config"), dict):
        flops = record["config"].get("flops")
    try:
        flops = float(flops) if flops is not None else None
    except (TypeError, ValueError):
        return None
    return flops if flops is not None and math.isfinite(flops) and flops > 0 else None


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def fmt(r: list[str]) -> str:
        cells = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return "\n".join(fmt(r) for r in [header, *rows])


def _human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


# -- subcommands -----------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    with _open_db(args.db) as db:
        devices = _check_device(db, args.device)
        if not devices:
            print(f"no records in {db.path}: nothing written")
            return 0
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise InputError(f"--out {args.out}: not a folder")
        for device in devices:
            if Path(device).name != device or device.startswith("."):
                raise InputError(f"device {device!r}: not usable as a file name under --out")
        total = 0
        for device in devices:
            path = out / f"{device}.jsonl"
            n = db.export_jsonl(path, device=device, best_only=args.best_only)
            total += n
            print(f"wrote {n} records to {path}")
        if len(devices) > 1:
            print(f"{total} records in {len(devices)} files")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    loaded = [(f, _load(f)) for f in args.files]  # every file is checked before anything is written
    with _open_db(args.db, create=True) as db:
        total = {"new": 0, "replaced": 0, "skipped": 0}
        for f, rows in loaded:
            counts = db.import_rows(rows)
            for k, v in counts.items():
                total[k] += v
            print(f"{f}: {counts['new']} new, {counts['replaced']} replaced, {counts['skipped']} skipped")
        if len(loaded) > 1:
            print(f"total: {total['new']} new, {total['replaced']} replaced, {total['skipped']} skipped")
        print(f"{db.path}: {len(db)} records")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from autotune.database import merge_rows, write_jsonl

    logs = [_load(f) for f in args.files]
    base = _load(args.base) if args.base is not None else None
    rows = merge_rows(logs, base)
    out = Path(args.output)
    if out.is_dir():
        raise InputError(f"-o {args.output}: is a folder")
    n = write_jsonl(out, rows)
    read = sum(len(log) for log in logs)
    print(f"merged {len(logs)} files ({read} lines) into {out}: {n} records")
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    if args.n < 0:
        raise InputError(f"-n {args.n}: must be 0 or more")
    with _open_db(args.db) as db:
        _check_device(db, args.device)
        best = db.best_records(args.device)
        counts = db.record_counts(args.device)
    if args.workload:
        best = [r for r in best if args.workload in r["workload_key"]]
    if not best:
        print("no successful records" + (f" matching {args.workload!r}" if args.workload else ""))
        return 0
    best.sort(key=lambda r: (-r["mean_cost"], r["workload_key"], r["device"]))
    shown = best[: args.n] if args.n else best
    rows = []
    for r in shown:
        flops = _flops(r)
        rows.append(
            [
                _short(r["workload_key"], 40),
                r["device"],
                f"{r['mean_cost'] * 1e3:.3f}",
                f"{flops / r['mean_cost'] / 1e9:.1f}" if flops and r["mean_cost"] > 0 else "",
                _config_summary(r["config"]),
                str(counts.get((r["workload_key"], r["device"]), 0)),
            ]
        )
    print(_table(["workload", "device", "best ms", "GFLOP/s", "config", "records"], rows, {2, 3, 5}))
    if len(shown) < len(best):
        print(f"({len(shown)} of {len(best)} workloads; -n 0 shows all)")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    if args.keep is None and not args.errors:
        raise InputError("prune: give --keep N and/or --errors")
    if args.keep is not None and args.keep < 1:
        raise InputError(f"--keep {args.keep}: must be 1 or more")
    with _open_db(args.db) as db:
        devices = _check_device(db, args.device)
        total = 0
        for device in devices:
            n = db.prune(device, keep_top=args.keep, drop_errors=args.errors)
            total += n
            print(f"{device}: deleted {n} records")
        print(f"deleted {total} records, {len(db)} left in {db.path}")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _open_db(args.db) as db:
        st = db.stats()
        rows = [
            ["database", f"{db.path} ({_human_size(db.size_bytes())})"],
            ["records", str(st["count"])],
            ["workloads", str(db.workload_count())],
            ["devices", str(len(st["devices"]))],
            ["errors", str(st["errors"])],
        ]
        per_device = [
            [
                f"  {d}",
                f"{v['count']} records, {db.workload_count(d)} workloads, {v['errors']} errors",
            ]
            for d, v in st["devices"].items()
        ]
    print(_table(["", ""], rows + per_device, set()).split("\n", 1)[1])
    return 0


def _copy(source: tuple[str | None, str], dest: tuple[str | None, str], device: str | None) -> int:
    """Copy the records of ``device`` (default all) between two databases, each given as
    (spec, option); the destination is created if missing, the source must exist."""
    with _open_db(source[0], option=source[1]) as src:
        _check_device(src, device)
        rows = src.rows(device)
        with _open_db(dest[0], create=True, option=dest[1]) as dst:
            counts = dst.import_rows(rows)
            print(
                f"{src.path} -> {dst.path}: {len(rows)} records, {counts['new']} new, "
                f"{counts['replaced']} replaced, {counts['skipped']} skipped"
            )
            print(f"{dst.path}: {len(dst)} records")
    return 0


def cmd_push(args: argparse.Namespace) -> int:
    return _copy((args.db, "--db"), (args.to, "--to"), args.device)


def cmd_pull(args: argparse.Namespace) -> int:
    return _copy((args.source, "--from"), (args.db, "--db"), args.device)
