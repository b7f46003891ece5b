"""The `tir` command line.

Bad input (a broken file, an unsupported op, a wrong --input) is one line on stderr and
exit status 2; `TIR_DEBUG=1` adds the traceback.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from tensorir import config
from tensorir.errors import TirError


def parse_shape_arg(text: str) -> tuple[str, list[int]]:
    """`name=1,3,224,224` -> ("name", [1, 3, 224, 224])."""
    name, sep, dims = text.partition("=")
    try:
        if not sep or not name:
            raise ValueError
        return name, [int(d) for d in dims.replace("x", ",").split(",") if d]
    except ValueError:
        raise TirError(f"--input-shape {text!r}: expected NAME=D1,D2,... with integer dims") from None


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "model", help="model: .onnx, TensorFlow SavedModel folder, frozen .pb, Keras .keras / .h5, .tflite"
    )
    p.add_argument(
        "--signature",
        default="serving_default",
        help="SavedModel: the signature to import (default serving_default)",
    )
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="static shape for an input with symbolic dims, e.g. input=1,3,224,224",
    )
    p.add_argument(
        "--override-shape",
        action="store_true",
        help="let --input-shape change an input's static dims (refused without it)",
    )


def _add_input_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="input array")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (those not given)")


def _add_tolerance_args(p: argparse.ArgumentParser) -> None:
    from tensorir.tools.compare import ATOL, MIN_COSINE, RTOL

    p.add_argument(
        "--rtol",
        default=str(RTOL),
        help=f"a tensor passes when max |ours - ort| <= atol + rtol * max |ort| (default {RTOL:g})",
    )
    p.add_argument("--atol", default=str(ATOL), help=f"see --rtol (default {ATOL:g})")
    p.add_argument(
        "--min-cosine",
        default=str(MIN_COSINE),
        help=f"and its cosine similarity >= this (default {MIN_COSINE:g})",
    )


def _tolerance(args: argparse.Namespace):
    from tensorir.tools.compare import Tolerance

    values = []
    for opt, text in (("--rtol", args.rtol), ("--atol", args.atol), ("--min-cosine", args.min_cosine)):
        try:
            values.append(float(text))
        except ValueError:
            raise TirError(f"{opt} {text!r}: expected a number") from None
    return Tolerance(*values)


def build_parser() -> argparse.ArgumentParser:
    from tensorir import __version__

    parser = argparse.ArgumentParser(prog="tir", description="tensorir: compile tensor models to native code")
    parser.add_argument("--version", action="version", version=f"tensorir {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="inputs, outputs, op histogram, parameters and FLOPs of a model")
    _add_model_args(p)
    p.add_argument(
        "--plan",
        action="store_true",
        help="also report the memory plan of the model compiled for --target (default host): the "
        "workspace it allocates (activations and kernel scratch), its lower bound and no-reuse total",
    )
    p.add_argument(
        "--target", help="also say where each kernel runs for this target (e.g. opencl: GPU or CPU)"
    )
    p.add_argument(
        "--records",
        default="auto",
        metavar="SRC",
        help="with --plan: the tuning records the compile uses, as tir compile (auto)",
    )
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("compile", help="compile a model to a native library (+ header, manifest)")
    _add_model_args(p)
    p.add_argument(
        "--target",
        default="host",
        help="host | linux-arm64 | android-arm64 | opencl[:PROFILE] | android-arm64+opencl[:PROFILE]",
    )
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder")
    p.add_argument("--weights", default="embedded", choices=["embedded", "external"])
    p.add_argument(
        "--precision",
        default="fp32",
        choices=["fp32", "fp16"],
        help="fp16: weights and activations in float16 (inputs, outputs and the ops that need "
        "float32 sums stay float32; the output says which)",
    )
    p.add_argument("--dump-dir", metavar="D", help="write every compiler stage's IR to D")
    p.add_argument(
        "--records",
        default="auto",
        metavar="SRC",
        help="tuning records: auto (the local database and ./tuning_logs), none, or a database / "
        ".jsonl file / folder of <device>.jsonl",
    )
    p.add_argument(
        "--device",
        help="device key whose tuning records to use (default: the one that fits --target: "
        "exact, then the same device at another thread count, then its family)",
    )
    p.set_defaults(func=_cmd_compile)

    p = sub.add_parser("run", help="run a model (.onnx) or a compiled folder on given or random inputs")
    _add_model_args(p)
    _add_input_args(p)
    p.add_argument(
        "--inputs",
        metavar="DIR",
        help="input samples: DIR/<input>.npy (one sample), or one sub-folder of <input>.npy per sample",
    )
    p.add_argument(
        "--backend",
        default=None,
        help=".onnx model: compiled (default: compile for --target and run the native code) or ref "
        "(the numpy reference interpreter)",
    )
    p.add_argument("--target", help=".onnx model, backend compiled: the target to compile for (default host)")
    p.add_argument("--records", help=".onnx model, backend compiled: tuning records, as tir compile (auto)")
    p.add_argument(
        "--compare-ort",
        action="store_true",
        help="compare every output with onnxruntime (TensorFlow / tf.lite.Interpreter for TF and TFLite "
        "models): max abs / rel error, cosine, SQNR; exit 1 when one misses the tolerance (--rtol, "
        "--atol, --min-cosine)",
    )
    _add_tolerance_args(p)
    p.add_argument("--save", metavar="DIR", help="write each output to DIR/<name>.npy")
    p.add_argument("--profile", action="store_true", help="compiled model: per-kernel time and share")
    p.add_argument("--threads", type=int, default=0, help="compiled model: threads (0: all cores)")
    p.add_argument("--onnx", metavar="MODEL", help="compiled folder: the ONNX model for --compare-ort")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("diff", help="compare a compiled model with onnxruntime layer by layer")
    _add_model_args(p)
    _add_input_args(p)
    p.add_argument("--target", default="host", help="the target to compile for (default host)")
    p.add_argument("--records", default="auto", metavar="SRC", help="tuning records, as tir compile (auto)")
    p.add_argument(
        "--every-node",
        action="store_true",
        help="expose every node's output (ends the fused groups there) instead of every kernel's",
    )
    _add_tolerance_args(p)
    p.set_defaults(func=_cmd_diff)

    from tensorir.quantize.cli import add_quantize_parser

    add_quantize_parser(sub)

    try:  # `tir tune` and `tir db`, when the autotune package is installed (tensorir never needs it)
        from autotune.cli_db import add_db_parser
        from autotune.cli_tune import add_tune_parser
        from autotune.rpc_server import add_rpc_parser
    except ModuleNotFoundError as e:
        if e.name not in ("autotune", "autotune.cli_db", "autotune.cli_tune", "autotune.rpc_server"):
            raise
    else:
        add_tune_parser(sub)
        add_db_parser(sub)
        add_rpc_parser(sub)
    return parser


def _cmd_inspect(args: argparse.Namespace) -> int:
    from tensorir.tools.inspect import inspect_model

    shapes = dict(parse_shape_arg(s) for s in args.input_shape)
    records = _open_records(args.records, None, args.target or "host") if args.plan else None
    print(
        inspect_model(
            args.model,
            shapes,
            args.plan,
            args.target,
            override_shapes=args.override_shape,
            signature=args.signature,
            records=records,
        )
    )
    return 0


def _open_records(source: str, device: str | None, target: str):
    """The tuning records `tir compile --records` names (None: none / autotune missing):
    those of `device` when given, else of the device key that fits `target`
    (autotune/device_keys.py: exact, other thread count, same family; never another arch)."""
    if source == "none":
        if device is not None:
            raise TirError(f"--device {device!r} picks tuning records, but --records none uses none")
        return None
    try:
        from autotune.records import Records, is_log_source
    except ModuleNotFoundError:
        if source == "auto":
            return None
        raise TirError("--records needs the autotune package (pip install -e .)") from None
    from autotune.db_open import postgres_url

    url = postgres_url(source, "--records") if source != "auto" else None  # another scheme: refused
    path = None if source == "auto" or url is not None else Path(source)
    if path is not None and not path.exists():
        raise TirError(f"--records {source!r}: no such file or folder")
    is_log = path is not None and is_log_source(path)
    db, logs = (None, None) if path is None else ((False, path) if is_log else (path, None))
    if url is not None:  # a PostgreSQL tuning database
        db = url
    if device is None:
        from tensorir.target import get_target

        return Records.for_target(get_target(target), db=db, logs=logs)
    records = Records.open(db=db, logs=logs, device=device)
    if not len(records):
        _no_records_of(device, db, logs)
    return records


def _no_records_of(device: str, db: Path | str | bool | None, logs: Path | None) -> NoReturn:
    """The TirError for a --device that has no records in the sources, naming those that do."""
    from autotune.records import DEFAULT_LOGS, db_source, stored_devices

    db_path = None if db is False else db_source(db)
    logs_path = logs if logs is not None else (DEFAULT_LOGS if DEFAULT_LOGS.is_dir() else None)
    known = stored_devices(db_path, logs_path)
    named = ", ".join(sorted(known)) or "none (run tir tune first)"
    raise TirError(f"--device {device!r}: no tuning records of that device; devices with records: {named}")


def _cmd_compile(args: argparse.Namespace) -> int:
    from tensorir.tools.compile import check_paths, compile_cli

    check_paths(args.model, args.output)  # before reading records or compiling
    return compile_cli(
        args.model,
        records=_open_records(args.records, args.device, args.target),
        target=args.target,
        out=args.output,
        input_shapes=dict(parse_shape_arg(s) for s in args.input_shape),
        weights=args.weights,
        precision=args.precision,
        dump_dir=args.dump_dir,
        override_shapes=args.override_shape,
        signature=args.signature,
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from tensorir.tools.run import run_artifact_cli, run_graph_model_cli, run_model_cli

    if args.threads < 0:
        raise TirError(f"--threads {args.threads}: expected 0 (all cores) or a positive count")
    from tensorir.frontend import model_format

    tolerance = _tolerance(args)
    if Path(args.model).is_dir() and model_format(args.model) != "tensorflow":
        given = [
            o
            for o, v in (("--backend", args.backend), ("--target", args.target), ("--records", args.records))
            if v
        ]
        if given:
            raise TirError(f"{given[0]}: a compiled folder runs as it was built (it applies to .onnx models)")
        return run_artifact_cli(
            args.model,
            inputs=args.input,
            compare_ort=args.compare_ort,
            seed=args.seed,
            save_dir=args.save,
            profile=args.profile,
            threads=args.threads,
            onnx_path=args.onnx,
            inputs_dir=args.inputs,
            tolerance=tolerance,
        )
    backend = args.backend or "compiled"
    if backend not in ("compiled", "ref"):
        raise TirError(f"--backend {backend!r}: expected compiled or ref")
    if backend == "ref" and (args.target or args.records):
        raise TirError(f"{'--target' if args.target else '--records'}: only with --backend compiled")
    target = args.target or "host"
    run_cli = run_model_cli
    extra = {}
    if model_format(args.model) != "onnx":
        run_cli, extra = run_graph_model_cli, {"signature": args.signature}
    return run_cli(
        args.model,
        inputs=args.input,
        input_shapes=dict(parse_shape_arg(s) for s in args.input_shape),
        compare_ort=args.compare_ort,
        seed=args.seed,
        save_dir=args.save,
        override_shapes=args.override_shape,
        inputs_dir=args.inputs,
        backend=backend,
        target=target,
        records=_open_records(args.records or "auto", None, target) if backend == "compiled" else None,
        tolerance=tolerance,
        profile=args.profile,
        threads=args.threads,
        **extra,
    )


def _cmd_diff(args: argparse.Namespace) -> int:
    from tensorir.frontend import model_format
    from tensorir.frontend.onnx import check_model_file
    from tensorir.tools.diff import diff_cli

    tolerance = _tolerance(args)
    if model_format(args.model) != "onnx":
        raise TirError(f"{args.model}: tir diff compares layers with onnxruntime; it takes .onnx models only")
    check_model_file(args.model)
    return diff_cli(
        args.model,
        target=args.target,
        records=_open_records(args.records, None, args.target),
        input_shapes=dict(parse_shape_arg(s) for s in args.input_shape),
        inputs=args.input,
        seed=args.seed,
        tolerance=tolerance,
        every_node=args.every_node,
    )


def _check_optional_dependencies(args: argparse.Namespace) -> None:
    """A flag whose package is an optional extra (pyproject.toml) that is not installed: one
    line before any work, not an ImportError after a tuning run."""
    import importlib.util

    plot = args.command == "tune" and getattr(args, "plot", None)
    if plot and importlib.util.find_spec("matplotlib") is None:
        raise TirError("--plot needs matplotlib, which is not installed: pip install -e '.[plot]'")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check_optional_dependencies(args)
        return args.func(args)
    except TirError as e:
        if config.debug_level() >= 1:
            traceback.print_exc()
        print(f"tir {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tir: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
