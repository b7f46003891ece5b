"""GFLOP/s of single ops with tensorir's default schedules, side by side with onnxruntime.

    .venv/bin/python benchmarks/op_bench.py                 # all cases, 1 and 2 threads
    .venv/bin/python benchmarks/op_bench.py --runs 30 --threads 1 --only conv3x3

Cases: conv2d for the ResNet-50 3x3 layers (stride 1, pad 1) and a set of its 1x1 layers,
dense / matmul (M x K x N). Each case is one ONNX node; onnxruntime runs that model twice:
`ort` with every tensor a graph input (the same work tensorir's kernel does per call:
weights arrive at run time) and `ort_w` with the weights as initializers (ORT's deployed
mode: it prepacks them once at session creation). tensorir runs the op's kernel
(`op_kernel`, default schedule) on the same arrays.

Timing: a warm-up, then `runs` rounds that call tensorir, ort and ort_w once each in turn
(interleaved, so the machine's noise falls on all of them); the median per engine. Threads:
tensorir.runtime.jit.set_num_threads and SessionOptions.intra_op_num_threads (spinning
off, so idle ORT workers do not steal the cores tensorir runs on). Prints a table with
ratios (tensorir GFLOP/s / ORT GFLOP/s) and writes benchmarks/results/op_bench.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tensorir.graph.types import TensorType
from tensorir.ops.kernel import op_kernel, scratch_arrays
from tensorir.ops.registry import get_op
from tensorir.runtime.jit import compile_host, set_num_threads

RESULTS = Path(__file__).resolve().parent / "results" / "op_bench.json"
CONV3 = [(64, 56), (128, 28), (256, 14), (512, 7)]  # channels in = out, size; 3x3, stride 1, pad 1
CONV1 = [(64, 256, 56), (256, 64, 56), (512, 128, 28), (1024, 256, 14), (2048, 512, 7)]  # in, out, size
DENSE = [(1, 2048, 1000), (128, 256, 1024), (128, 1024, 256), (512, 512, 512)]  # M, K, N


@dataclass
class Case:
    group: str
    name: str
    op: str  # tensorir op
    node: str  # ONNX op type
    inputs: list[np.ndarray]
    attrs: dict[str, Any]  # tensorir attributes
    onnx_attrs: dict[str, Any]
    flops: float
    weights: list[int] = field(default_factory=lambda: [1])  # inputs that are weights


def cases(rng: np.random.Generator) -> list[Case]:
    def rand(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    out = []
    for c, hw in CONV3:
        conv = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
        onnx_conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
        x, w = rand(1, c, hw, hw), rand(c, c, 3, 3) * 0.05
        flops = 2.0 * c * c * 9 * hw * hw
        out.append(Case("conv3x3", f"conv3x3 {c}@{hw}", "conv", "Conv", [x, w], conv, onnx_conv, flops))
    for ci, co, hw in CONV1:
        conv = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}
        x, w = rand(1, ci, hw, hw), rand(co, ci, 1, 1) * 0.05
        flops = 2.0 * ci * co * hw * hw
        name = f"conv1x1 {ci}->{co}@{hw}"
        out.append(Case("conv1x1", name, "conv", "Conv", [x, w], conv, {"kernel_shape": [1, 1]}, flops))
    for m, k, n in DENSE:
        a, b = rand(m, k), rand(k, n) * 0.05
        out.append(Case("dense", f"matmul {m}x{k}x{n}", "matmul", "MatMul", [a, b], {}, {}, 2.0 * m * k * n))
    return out


# ---- engines ---------------------------------------------------------------------------
def tir_runner(case: Case) -> tuple[Callable[[], None], np.ndarray]:
    types = [TensorType.of(a) for a in case.inputs]
    func = op_kernel(case.op, types, case.attrs)
    (out_t,) = get_op(case.op).infer(types, case.attrs)
    y = np.empty(out_t.shape, np.float32)
    args = [*case.inputs, y, *scratch_arrays(func)]
    bound = compile_host(func).bind(*args)  # holds raw pointers: `args` must stay alive

    def run() -> None:
        bound()

    run.args = args  # type: ignore[attr-defined]
    return run, y


def onnx_model(case: Case, weights_const: bool) -> onnx.ModelProto:
    names = [f"in{i}" for i in range(len(case.inputs))]
    inputs, inits = [], []
    for i, (name, a) in enumerate(zip(names, case.inputs, strict=True)):
        if weights_const and i in case.weights:
            inits.append(numpy_helper.from_array(a, name))
        else:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(a.shape)))
    node = helper.make_node(case.node, names, ["y"], **case.onnx_attrs)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "op", inputs, [y], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def ort_runner(case: Case, threads: int, weights_const: bool) -> tuple[Callable[[], None], Any]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(
        onnx_model(case, weights_const).SerializeToString(), so, providers=["CPUExecutionProvider"]
    )
    feeds = {f"in{i}": a for i, a in enumerate(case.inputs) if not (weights_const and i in case.weights)}
    result: list[Any] = [None]

    def run() -> None:
        result[0] = sess.run(None, feeds)[0]

    return run, result


def timed(fn: Callable[[], None]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench_case(case: Case, threads: int, runs: int) -> dict[str, Any]:
    set_num_threads(threads)
    tir, y = tir_runner(case)
    engines = {"tir": tir}
    ort_out = {}
    for key, const in (("ort", False), ("ort_w", True)):
        engines[key], ort_out[key] = ort_runner(case, threads, const)
    for fn in engines.values():  # warm-up (JIT'd code paged in, ORT arenas grown)
        for _ in range(3):
            fn()
    ref = ort_out["ort"][0]
    err = float(np.max(np.abs(y - ref)) / (np.max(np.abs(ref)) + 1e-30))
    times: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(runs):
        for k, fn in engines.items():
            times[k].append(timed(fn))
    med = {k: statistics.median(v) for k, v in times.items()}
    row = {"case": case.name, "group": case.group, "threads": threads, "flops": case.flops, "rel_err": err}
    for k in engines:
        row[f"{k}_ms"] = med[k] * 1e3
        row[f"{k}_gflops"] = case.flops / med[k] / 1e9
    row["ratio_ort"] = med["ort"] / med["tir"]
    row["ratio_ort_w"] = med["ort_w"] / med["tir"]
    return row


# ---- report ----------------------------------------------------------------------------
def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'case':<26}{'thr':>4}{'tir GF/s':>10}{'ort GF/s':>10}{'ort_w GF/s':>12}"
        f"{'tir/ort':>9}{'tir/ort_w':>11}{'tir ms':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['case']:<26}{r['threads']:>4}{r['tir_gflops']:>10.1f}{r['ort_gflops']:>10.1f}"
            f"{r['ort_w_gflops']:>12.1f}{r['ratio_ort']:>9.2f}{r['ratio_ort_w']:>11.2f}{r['tir_ms']:>9.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="timed rounds per case (default 20)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--only", nargs="*", default=None, help="case groups: conv3x3 conv1x1 dense")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    selected = [c for c in cases(np.random.default_rng(0)) if not args.only or c.group in args.only]
    rows = []
    for case in selected:
        for t in args.threads:
            rows.append(bench_case(case, t, args.runs))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"machine": platform.processor() or platform.machine(), "ort": ort.__version__, "runs": args.runs}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
