"""`tir quantize`: the subcommand's arguments and what it runs."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import onnx

from tensorir.errors import InputError


def add_quantize_parser(sub: argparse._SubParsersAction) -> None:
    from tensorir.quantize.calibrate import METHODS
    from tensorir.quantize.quantizer import DEFAULT_MIN_SQNR

    p = sub.add_parser("quantize", help="post-training int8 quantization of an ONNX model to a QDQ model")
    p.add_argument("model", help="float .onnx model")
    p.add_argument(
        "--calib",
        required=True,
        metavar="DIR",
        help="calibration samples: a .npy file per sample (one input: any *.npy; several: <input>*.npy)",
    )
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the QDQ .onnx model to write")
    p.add_argument("--method", default="minmax", choices=METHODS, help="activation ranges (default minmax)")
    p.add_argument(
        "--percentile", type=float, default=99.99, help="--method percentile: of |x| (default 99.99)"
    )
    p.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME=DIMS",
        help="static shape for an input with symbolic dims (default: the calibration arrays' shape)",
    )
    p.add_argument(
        "--keep-float",
        default="",
        metavar="NODE,...",
        help="ops to leave in float: node names (an unnamed node: its first output), as in the report",
    )
    p.add_argument(
        "--min-sqnr",
        type=float,
        default=DEFAULT_MIN_SQNR,
        metavar="DB",
        help=f"ops whose output SQNR with only them quantized is below this stay float "
        f"(default {DEFAULT_MIN_SQNR:g})",
    )
    p.add_argument("--report", metavar="FILE", help="write the per-layer report as JSON")
    p.add_argument(
        "--backend",
        default="compiled",
        choices=["compiled", "ref"],
        help="run the calibration on tensorir's compiled code (default) or its numpy reference interpreter",
    )
    p.set_defaults(func=cmd_quantize)


def cmd_quantize(args: argparse.Namespace) -> int:
    from tensorir.cli import parse_shape_arg
    from tensorir.frontend.onnx import load_model
    from tensorir.quantize.calib_data import read_calibration
    from tensorir.quantize.quantizer import quantize_model
    from tensorir.quantize.report import format_table, summary, write_json

    out = Path(args.output)
    if not out.parent.is_dir():
        raise InputError(f"-o {args.output}: no such folder {out.parent}")
    t0 = time.perf_counter()
    model = load_model(args.model)
    shapes = dict(parse_shape_arg(s) for s in args.input_shape)
    samples = read_calibration(args.calib, model, shapes)
    keep = [k for k in args.keep_float.split(",") if k]
    result = quantize_model(model, samples, args.method, args.percentile, keep, args.min_sqnr, args.backend)
    onnx.save_model(result.model, str(out))
    print(format_table(result))
    print(summary(result))
    if args.report:
        write_json(result, args.report)
    print(
        f"wrote {out} in {time.perf_counter() - t0:.1f}s" + (f"; report {args.report}" if args.report else "")
    )
    return 0
