"""`tir tune`: measure candidate kernels of a model on a device and keep the best.

    tir tune model.onnx --device host --trials 400 --time-budget 20m [--db PATH] [--plot curve.png]
    tir tune model.onnx --device cortex-a76 --adb SERIAL      # a phone through adb
    tir tune model.onnx --device adreno640 --rpc phone:9190   # a phone running `tir rpc serve`
    tir tune model.onnx --ray auto                            # builds and runs on a Ray cluster

The devices (`--device`) are tensorir/devices.py's TUNING_DEVICES: the target each compiles
for and how it is measured (in process, on the local OpenCL device, or only on the device
itself: then through --rpc or --adb).

Tasks come from the model exactly as `tir compile` optimizes it; every measurement goes to
the tuning database as it finishes, so an interrupted run (Ctrl-C, kill -9) loses nothing
and the same command resumes it (`--trials` is the total, records already there count).
The next `tir compile` picks the best record per workload from the same database.

With `--ray auto|ADDRESS` the candidates are built as Ray tasks on the cluster's CPUs and
measured by device actors on the nodes that offer the device's resource
(`ray start --resources '{"tir-device:<device key>": 1}'`): autotune/ray_measure.py.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensorir.devices import TuningDevice, get_tuning_device, tuning_device_names
from tensorir.errors import InputError

# of --time-budget, the most the model-level search may take (graph_tune: it stops trying
# segments and convs past it); the kernels get what is left of the budget
MODEL_LEVEL_SHARE = 0.5
# and at most what the kernel tuner leaves for the in-model check after it: the check's own
# estimate (model_check.check_seconds, from one build and a few runs of the model before the
# kernels start; PicoDet at 800 x 608 1.5-2.2 minutes), the check cut to fit where that is more
CHECK_SHARE = 0.25


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def parse_duration(text: str) -> float:
    """'90', '90s', '20m', '1.5h' -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m:
        raise InputError(f"--time-budget {text!r}: expected a duration like 90s, 20m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def tuning_device(target: str, threads: int = 0) -> str:
    """The device key the records are kept under (autotune/device_keys.py): this CPU's
    arch-cpu-ISA, or the OpenCL profile and the local device's name; `-tN` when the kernels
    were timed with N threads (a 1-thread deployment wants 1-thread records)."""
    from autotune.device_keys import device_key
    from autotune.records import local_gpu_name
    from tensorir.target import get_target

    t = get_target(target)
    return device_key(t, threads, local_gpu_name(t))


def migrate_legacy_host(db) -> None:
    """Re-key records kept under the word `host` (before device keys) as this machine's CPU."""
    from autotune.device_keys import LEGACY_HOST, cpu_key, legacy_alias
    from tensorir.target import host_target

    for old in db.devices():
        if LEGACY_HOST.fullmatch(old):
            new = legacy_alias(old, cpu_key(host_target()))
            print(f"tuning database: {db.rename_device(old, new)} records of device {old!r} are now {new!r}")


def add_tune_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="autotune a model's kernels on a device (resumable)")
    p.add_argument("model", help="ONNX model file")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS")
    p.add_argument("--device", default="host", help=f"what to tune for ({', '.join(tuning_device_names())})")
    p.add_argument("--trials", type=int, default=200, help="total measurements (default 200)")
    p.add_argument(
        "--time-budget",
        metavar="T",
        help="stop after T (e.g. 20m): the model-level search takes at most half, the in-model "
        "check after the kernels a tenth; resumable",
    )
    p.add_argument(
        "--db",
        metavar="PATH",
        help="tuning database: a SQLite file or a postgresql:// URL (default: the user cache)",
    )
    p.add_argument("--batch", type=int, default=8, help="candidates per round")
    p.add_argument("--early-stopping", type=int, default=48, help="per task: trials without improvement")
    p.add_argument(
        "--retime",
        type=int,
        default=3,
        metavar="N",
        help="at the end, time each task's default and its N fastest configs again, back to back, "
        "so that records of earlier runs compare with this run's (0: skip)",
    )
    p.add_argument("--search", default="model", choices=["model", "random"])
    p.add_argument("--workers", type=int, default=2, help="build processes")
    p.add_argument(
        "--threads",
        type=int,
        default=0,
        help="kernel threads while timing (0: all cores); N > 0 keeps the records under device <key>-tN",
    )
    p.add_argument(
        "--warm",
        action="store_true",
        help="time kernels back to back with warm caches (default: cold, each call after a cache "
        "flush with the activations read back in, as the kernels meet their weights in a model)",
    )
    p.add_argument("--repeat", type=int, default=5, help="timings per candidate (median reported)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--rpc",
        metavar="HOST:PORT[,...]",
        help="measure on `tir rpc serve` servers (in turn); records go under the servers' device key",
    )
    p.add_argument("--token", help="the rpc servers' shared token (default: $TIR_RPC_TOKEN)")
    p.add_argument("--adb", metavar="SERIAL", help="measure on this Android device through adb (CPU devices)")
    p.add_argument("--adb-path", metavar="PROGRAM", help="the adb program (default: $TIR_ADB, else adb)")
    p.add_argument(
        "--ray",
        metavar="auto|ADDRESS",
        help="build on a Ray cluster's CPUs and measure on its device actors (nodes started with "
        "--resources '{\"tir-device:<device key>\": 1}'); auto: the cluster this machine is in",
    )
    p.add_argument(
        "--no-model-ab",
        action="store_true",
        help="skip checking the records inside the model (each tuned kernel timed in place with and "
        "without its record; only records that make the model faster are used)",
    )
    p.add_argument("--plot", metavar="PNG", help="draw best-so-far vs trials per task and for the model")
    p.add_argument(
        "--no-layout",
        action="store_true",
        help="skip the model-level measurement (NCHW[x]c block, depthwise + 1x1 merge)",
    )
    p.set_defaults(func=cmd_tune)


def cmd_tune(args: argparse.Namespace) -> int:
    from autotune.db_open import open_database
    from autotune.measure import MeasureOptions, Measurer
    from autotune.task import extract_tasks, load_graph
    from autotune.tuner import TuneOptions, Tuner
    from tensorir.cli import parse_shape_arg
    from tensorir.target import get_target

    dev = get_tuning_device(args.device)
    if args.trials < 1:
        raise InputError(f"--trials {args.trials}: must be at least 1")
    if args.retime < 0:
        raise InputError(f"--retime {args.retime}: must be 0 (skip) or more")
    if not Path(args.model).exists():
        raise InputError(f"{args.model}: no such file")
    target = dev.target
    budget = parse_duration(args.time_budget) if args.time_budget else None
    started, started_at = time.monotonic(), time.time()
    shapes = dict(parse_shape_arg(s) for s in args.input_shape)
    servers, token = _rpc_servers(args)
    device = _device_key(args, dev, servers, token)  # a remote device fails here, before any work
    measurer = _ray_measurer(args.ray, device) if args.ray else Measurer
    db = open_database(args.db)
    migrate_legacy_host(db)
    graph = load_graph(args.model, target, shapes)
    gpu = get_target(target).kind == "opencl"  # the GPU layout block is the float4 lane count
    if (
        not gpu
        and dev.measured == "process"  # the model-level knobs are measured on whole models here
        and not servers
        and not args.no_layout
        and any(n.op == "layout_transform" for n in map(graph.node, graph.op_nodes()))
    ):
        from autotune.graph_tune import config_label, tune_model_level
        from tensorir.pipeline import merge_choice

        print(f"measuring {args.model} with each model-level config (NCHW[x]c block, depthwise + 1x1 merge)")
        if budget is not None:
            print(f"  (at most {_minutes(MODEL_LEVEL_SHARE * budget)} of --time-budget {args.time_budget})")
        deadline = None if budget is None else started + MODEL_LEVEL_SHARE * budget
        best = tune_model_level(
            args.model, db, device, target, shapes, threads=args.threads or None, deadline=deadline
        )
        print("  best: " + (config_label(best) if best else "the compiler's own rules"))
        if best:  # as tir compile will read it (pipeline.model_choices)
            merge = merge_choice(best.get("fuse_dwpw"))
            graph = load_graph(args.model, target, shapes, best["layout_block"], merge)
    tasks = extract_tasks(graph, target)
    if not tasks:
        print(f"{args.model}: nothing to tune (no kernel has knobs)")
        return 0
    checked = dev.measured != "remote" and not servers and not args.no_model_ab
    probe, reserve = None, 0.0
    if budget is not None and checked:
        from autotune.model_check import probe_check

        probe = probe_check(args.model, db, device, target, shapes, threads=args.threads or None)
        reserve = min(probe.seconds(), CHECK_SHARE * budget)
    left = None if budget is None else max(0.0, budget - (time.monotonic() - started) - reserve)
    print(
        f"tuning {len(tasks)} tasks of {args.model} on {device}; database {db.path}"
        + ("" if left is None else f"; the kernels get {_minutes(left)} of the time budget")
        + ("" if probe is None else f", the check after them {_minutes(reserve)} ({_probe_label(probe)})")
    )
    for k, t in enumerate(tasks, 1):
        print(f"  {k:2d}. {t}")
    options = TuneOptions(
        device=device,
        target=target,
        trials=args.trials,
        time_budget_s=left,
        batch_size=args.batch,
        early_stopping=args.early_stopping,
        retime=args.retime,
        search=args.search,
        seed=args.seed,
        model_path=db.local_file(f"costmodel-{device}.json"),  # beside a file; a server's: user cache
    )
    measure = MeasureOptions(
        target=target,
        workers=args.workers,
        threads=args.threads or None,
        repeat=args.repeat,
        cold=not args.warm,
        rpc=servers,
        rpc_token=token,
        adb=args.adb or "",
        adb_path=args.adb_path or "",
    )
    summary = Tuner(tasks, db, options, measure, measurer=measurer).run()
    print(_report(summary))
    if checked:
        from autotune.model_check import check_in_model

        sizing = {}
        if probe is not None:  # to the end of the budget, the time set aside at least
            sizing = {"probe": probe, "deadline": max(started + budget, time.monotonic() + reserve)}
        print("checking the records inside the model (each tuned kernel timed in place, with and without)")
        check = check_in_model(
            args.model, db, device, target, shapes, threads=args.threads or None, since=started_at, **sizing
        )
        print(check.report())
    if args.plot:
        from autotune.plot import plot_curves

        plot_curves(summary, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _probe_label(probe: Any) -> str:
    t = probe.timing
    build = f"a build of {t.compile_s:.1f} s, a copy of {t.copy_s * 1e3:.0f} ms"
    return f"from {build}, a run of {t.run_s * 1e3:.1f} ms and a profile of {t.pass_s * 1e3:.1f} ms"


def _device_key(args: argparse.Namespace, dev: TuningDevice, servers: tuple[str, ...], token: str) -> str:
    """The key the records go under; checks first that a remote device can be reached the way
    asked (the rpc servers answer and agree, the adb device is an arm64 phone)."""
    if servers and args.adb:
        raise InputError("--rpc and --adb: measure through one of them")
    if servers:
        from autotune.rpc_runner import remote_device

        return remote_device(servers, token, dev.target, args.threads)
    if args.adb:
        if "adb" not in dev.remote:
            can = [d for d in tuning_device_names() if "adb" in get_tuning_device(d).remote]
            raise InputError(f"--adb measures CPU devices ({', '.join(can)}), not {dev.name}; use --rpc")
        from autotune.adb_runner import ADB, check_device

        if not args.ray:  # with --ray the phone is on a node: its device actor checks it
            check_device(ADB(args.adb, args.adb_path or ""))
    elif dev.measured == "remote":
        ways = " or ".join({"rpc": "--rpc HOST:PORT", "adb": "--adb SERIAL"}[w] for w in dev.remote)
        raise InputError(f"--device {dev.name} is measured on the device itself: give {ways}")
    return tuning_device(dev.target, args.threads)


def _ray_measurer(address: str, device: str) -> Callable[[Any], Any]:
    """A RayMeasurer factory for the Tuner; connects first, so an unreachable cluster or one
    without the device is one line (InputError) before any work."""
    from autotune.ray_measure import RayMeasurer, check_device, connect

    connect(address)
    check_device(device, address)
    return lambda options: RayMeasurer(options, device, address)


def _rpc_servers(args: argparse.Namespace) -> tuple[tuple[str, ...], str]:
    """(the --rpc servers, the token) (no servers: measure here)."""
    from autotune.rpc import parse_servers

    if not args.rpc:
        return (), ""
    return parse_servers(args.rpc), args.token or os.environ.get("TIR_RPC_TOKEN", "")


STOP_REASONS = {
    "time budget": "the time budget ran out",
    "trial budget": "the trial budget was spent",
    "every task stopped": "every task stopped early: --early-stopping trials without a better config "
    "(replayed records count), or its space used up; a larger --early-stopping searches on",
}


def _report(summary) -> str:
    why = STOP_REASONS.get(summary.stopped)
    lines = [f"{summary.trials} trials in {summary.seconds:.0f} s" + (f" ({why})" if why else "")]
    for k, st in enumerate(summary.tasks, 1):
        head = f"  {k:2d}. {st.task.label}"
        if not math.isfinite(st.best):
            lines.append(f"{head}: {'no valid measurement' if st.trials else 'not reached (budget)'}")
            continue
        speedup = st.default_cost / st.best if math.isfinite(st.default_cost) else math.nan
        kind = "effective GFLOP/s" if st.effective else "GFLOP/s"
        earlier = f", {st.resumed} of them from earlier runs" if st.resumed else ""
        stale = "; the best's time is an earlier run's (timed again, it was slower)" if st.stale_best else ""
        lines.append(
            f"{head} x{st.task.count}: {st.best * 1e3:.3f} ms ({st.gflops():.1f} {kind}, "
            f"{speedup:.2f}x the default) after {st.trials} trials{earlier}{stale}"
        )
    retimed = [st for st in summary.tasks if st.retimed]
    if retimed:
        lines.append(
            f"timed again at the end, back to back: the default and the fastest configs of {len(retimed)} "
            f"of {len(summary.tasks)} tasks ({sum(st.retimed for st in retimed)} configs, "
            f"{summary.retime_s:.0f} s), so each 'x the default' compares timings of this run"
        )
    tuned, default, paired = summary.paired_latency()
    if default > 0:
        n = len(summary.tasks)
        of = "" if paired == n else f" ({paired} of {n} tasks: those with a timed default)"
        lines.append(f"tuned kernels: {tuned * 1e3:.2f} ms, defaults {default * 1e3:.2f} ms{of}")
    if any(st.effective for st in summary.tasks):
        lines.append("effective GFLOP/s: the direct algorithm's FLOPs over a Winograd/Strassen kernel's time")
    return "\n".join(lines)
