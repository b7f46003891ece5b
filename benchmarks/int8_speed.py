"""int8 vs fp32 latency: tensorir and onnxruntime, each on the float model and on one QDQ
model (uint8 activations, per-channel int8 weights), written by `tir quantize`
(`--quantizer tir`, tensorir.quantize) or by onnxruntime's own quantize_static (`ort`).

    python -m benchmarks.int8_speed                       # matmul_768, bert_encoder, mobilenet_v2_224
    python -m benchmarks.int8_speed --zoo --threads 1 2   # the zoo CNNs, tir quantize, 1 and 2 threads
    python -m benchmarks.int8_speed matmul_768 --runs 30 --quantizer ort

`matmul_768` is one (128, 768) @ (768, 768) + bias product (a BERT-base projection); the
others are zoo models (benchmarks/zoo.py). Calibration: 8 zoo sample inputs. The four timed
runs interleave in blocks (benchmarks/compare.py: _interleaved), medians reported, with the
load average beside them (the machine is shared). Also printed: the largest difference of the
two int8 outputs in quantization steps of the output, tensorir's int8 output's SQNR against
onnxruntime's fp32 one (dB, over 4 held-out sample inputs; the zoo's weights are random, so
no top-1 to compare), and how many integer kernels (qdense, qconv1x1, qdwconv) tensorir's int8
build holds (the QDQ ops it turned into integer code).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchmarks.compare import _interleaved, _ort_session
from benchmarks.zoo import build, sample_inputs

CASES = ("matmul_768", "bert_encoder", "mobilenet_v2_224")
ZOO_CNNS = ("mobilenet_v1", "mobilenet_v2_224", "mobilenet_v2_96", "squeezenet1_1", "resnet18", "resnet50")


def matmul_768() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((768, 768)) / 28).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(768).astype(np.float32), "b"),
    ]
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["input", "w", "b"], ["y"])],
        "matmul_768",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [128, 768])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [128, 768])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _model(name: str) -> onnx.ModelProto:
    return matmul_768() if name == "matmul_768" else build(name)


def quantize(model: onnx.ModelProto, work: Path, quantizer: str = "ort") -> onnx.ModelProto:
    """The QDQ model of 8 sample inputs: onnxruntime's quantize_static (U8S8, per-channel) or
    `tir quantize` (min-max, every layer kept int8: --min-sqnr 0)."""
    calib = [sample_inputs(model, seed=s) for s in range(8)]
    if quantizer == "tir":
        from tensorir.quantize import quantize_model

        return quantize_model(model, calib, min_sqnr=0.0, progress=False).model
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter(calib)

        def get_next(self) -> dict | None:
            return next(self.feeds, None)

    onnx.save(model, work / "f.onnx")
    quantize_static(
        str(work / "f.onnx"),
        str(work / "q.onnx"),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=True,
    )
    return onnx.load(work / "q.onnx")


def sqnr_db(mod: object, sess: object, model: onnx.ModelProto, seeds: range = range(100, 104)) -> float:
    """10 log10(sum y^2 / sum (y_int8 - y)^2) of `mod`'s output against `sess`'s (fp32)."""
    sig = err = 0.0
    for seed in seeds:
        feeds = sample_inputs(model, seed=seed)
        want = sess.run(None, feeds)[0].astype(np.float64)  # type: ignore[attr-defined]
        got = mod.run(feeds)[0].astype(np.float64)  # type: ignore[attr-defined]
        sig, err = sig + float(np.sum(want**2)), err + float(np.sum((got - want) ** 2))
    return 10 * np.log10(sig / err) if err else float("inf")


def _output_step(model: onnx.ModelProto) -> float | None:
    out = model.graph.output[0].name
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == out and n.input[1] in inits:
            return float(inits[n.input[1]].max())
    return None


def bench(
    name: str, threads: int, runs: int, warmup: int, quantizer: str = "ort", q8: onnx.ModelProto | None = None
) -> dict:
    import tensorir as tir

    f32 = _model(name)
    if q8 is None:
        with tempfile.TemporaryDirectory() as tmp:
            q8 = quantize(f32, Path(tmp), quantizer)
    feeds = sample_inputs(f32, seed=100)
    mods, sessions = [], []
    for m in (f32, q8):
        mod = tir.compile(m)
        mod.set_num_threads(threads)
        mods.append(mod)
        sessions.append(_ort_session(m, threads))
    fns = [lambda m=m: m.run(feeds) for m in mods] + [lambda s=s: s.run(None, feeds) for s in sessions]
    times = _interleaved(fns, runs, warmup)
    got, want = mods[1].run(feeds)[0], sessions[1].run(None, feeds)[0]
    step = _output_step(q8)
    kernels = [k["workload"] for k in mods[1].manifest["kernels"]]
    return {
        "case": name,
        "threads": threads,
        "tir_fp32_ms": times[0] * 1e3,
        "tir_int8_ms": times[1] * 1e3,
        "ort_fp32_ms": times[2] * 1e3,
        "ort_int8_ms": times[3] * 1e3,
        "int8_max_diff_steps": float(np.abs(got - want).max() / step) if step else float("nan"),
        "int8_sqnr_db": sqnr_db(mods[1], sessions[0], f32),
        "int8_kernels": sum(k.startswith(("qdense", "qconv1x1", "qdwconv")) for k in kernels),
        "q8": q8,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "cases", nargs="*", help=f"some of {', '.join(CASES + ZOO_CNNS)} (default: {', '.join(CASES)})"
    )
    ap.add_argument("--zoo", action="store_true", help=f"the zoo CNNs: {', '.join(ZOO_CNNS)}")
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--quantizer", choices=["ort", "tir"], default=None, help="default: tir with --zoo, else ort"
    )
    args = ap.parse_args(argv)
    cases = list(args.cases) or list(ZOO_CNNS if args.zoo else CASES)
    unknown = sorted(set(cases) - set(CASES + ZOO_CNNS))
    if unknown:
        ap.error(f"unknown case(s) {unknown}; known: {', '.join(CASES + ZOO_CNNS)}")
    quantizer = args.quantizer or ("tir" if args.zoo else "ort")
    print(f"quantizer: {quantizer}; load average before: {os.getloadavg()}")
    head = ("case", "threads", "tir_fp32_ms", "tir_int8_ms", "ort_fp32_ms", "ort_int8_ms")
    head += ("int8_max_diff_steps", "int8_sqnr_db", "int8_kernels")
    print(" | ".join(head))
    for name in cases:
        q8 = None
        for threads in args.threads:
            r = bench(name, threads, args.runs, args.warmup, quantizer, q8)
            q8 = r["q8"]
            print(
                " | ".join(f"{r[h]:.3f}" if isinstance(r[h], float) else str(r[h]) for h in head), flush=True
            )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
