"""Post-training quantization of a float ONNX model to a QDQ model (`tir quantize`).

0. prepare     opset >= 13; BatchNormalization folded into the Conv before it (prepare.py)
1. ranges      the float model, compiled by tensorir for the host with every quantized op's
               input made a graph output, runs over the calibration samples (a second pass
               fills the |x| histograms for percentile / kl: calibrate.py)
2. per layer   a probe model puts beside each candidate op a copy whose input and weights
               alone are quantized (qdq.probe_model); over the samples, each op's SQNR is
               10 log10(sum y^2 / sum (y_q - y)^2), y its float output
3. rewrite     the ops at or above `min_sqnr` dB (and not in `keep_float`) are quantized
               (qdq.quantized_model); the others stay float and the report says why
4. check       the int8 model runs over the samples: each output's SQNR against the float one

The runs use tensorir (compiled native code, or the numpy reference interpreter with
backend="ref"); onnxruntime is never needed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx.version_converter
from tqdm import tqdm

from tensorir.errors import InputError, ModelError
from tensorir.frontend.onnx import from_onnx
from tensorir.quantize.calibrate import METHODS, HistogramCollector, RangeCollector, activation_ranges
from tensorir.quantize.prepare import fold_batchnorm
from tensorir.quantize.qdq import (
    ActParams,
    Candidate,
    act_params,
    find_candidates,
    node_key,
    probe_model,
    quantized_model,
)
from tensorir.runtime.reference import run_reference
from tensorir.tools.diff import exposed_model

MIN_OPSET = 13  # per-axis DequantizeLinear
DEFAULT_MIN_SQNR = 20.0
Feeds = Mapping[str, np.ndarray]


@dataclass
class LayerRow:
    node: str
    op: str
    act: str
    params: ActParams
    channels: int
    sqnr_db: float  # nan when the op was not measured (--keep-float)
    quantized: bool
    reason: str  # why it stays float ("" when quantized)


@dataclass
class QuantizeResult:
    model: onnx.ModelProto
    rows: list[LayerRow]
    method: str
    percentile: float
    min_sqnr: float
    samples: int
    seconds: dict[str, float] = field(default_factory=dict)
    output_sqnr: dict[str, float] = field(default_factory=dict)  # the int8 model's outputs vs float


def with_min_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` at opset >= 13 (onnx's version converter when it is older)."""
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    if version >= MIN_OPSET:
        return model
    try:
        return onnx.version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:
        why = " ".join(str(e).split())[:200]
        raise ModelError(
            f"opset {version} model: cannot convert it to opset {MIN_OPSET} for QDQ: {why}"
        ) from None


def make_runner(
    model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]], backend: str = "compiled"
) -> Callable[[Feeds], dict[str, np.ndarray]]:
    """A function running `model` on feeds, giving {output name: array}."""
    if backend == "ref":
        g = from_onnx(model, input_shapes=shapes)
        names = [o.name for o in model.graph.output]
        return lambda feeds: dict(zip(names, run_reference(g, feeds), strict=True))
    if backend != "compiled":
        raise InputError(f"--backend {backend!r}: expected compiled or ref")
    import tensorir

    mod = tensorir.compile(model, "host", input_shapes=shapes)
    out_names = [o["name"] for o in mod.outputs]
    return lambda feeds: dict(zip(out_names, mod.run(feeds), strict=True))


def _bar(samples: Sequence[Feeds], what: str, progress: bool) -> tqdm:
    return tqdm(samples, desc=f"tir quantize: {what}", unit="sample", disable=not progress, leave=False)


def _check_keep_float(names: Sequence[str], cands: Sequence[Candidate]) -> None:
    keys = [c.key for c in cands]
    unknown = [n for n in names if n not in keys]
    if unknown:
        shown = ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")
        raise InputError(f"--keep-float {unknown[0]!r}: no quantizable op of that name; they are {shown}")


def collect_ranges(
    model: onnx.ModelProto,
    cands: Sequence[Candidate],
    samples: Sequence[Feeds],
    method: str,
    percentile: float,
    backend: str,
    progress: bool,
) -> tuple[dict[str, tuple[float, float]], list[dict[str, np.ndarray]]]:
    """The calibrated range of every candidate's input tensor; the model's float outputs per sample."""
    acts = sorted({c.act for c in cands})
    producers = {t: n for n in model.graph.node for t in n.output}
    keys = {node_key(producers[t]) for t in acts if t in producers}
    exposed, _ = exposed_model(model, keys)
    shapes = {k: v.shape for k, v in samples[0].items()}
    run = make_runner(exposed, shapes, backend)
    ranges = RangeCollector(acts)
    outputs = []
    for feeds in _bar(samples, "ranges", progress):
        values = run(feeds)
        ranges.observe({**values, **feeds})
        outputs.append({o.name: np.array(values[o.name]) for o in model.graph.output})
    hists = None
    if method != "minmax":
        hists = HistogramCollector(ranges.ranges)
        for feeds in _bar(samples, "histograms", progress):
            hists.observe({**run(feeds), **feeds})
    return activation_ranges(ranges.ranges, hists, method, percentile), outputs


def sqnr_db(signal: float, noise: float) -> float:
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


class _SqnrSums:
    """Signal and error energy per key, summed over samples, as SQNR in dB."""

    def __init__(self) -> None:
        self.signal: dict[str, float] = {}
        self.noise: dict[str, float] = {}

    def add(self, key: str, want: np.ndarray, got: np.ndarray) -> None:
        y = want.astype(np.float64)
        self.signal[key] = self.signal.get(key, 0.0) + float(np.sum(y * y))
        self.noise[key] = self.noise.get(key, 0.0) + float(np.sum((got - y) ** 2))

    def db(self) -> dict[str, float]:
        return {k: sqnr_db(self.signal[k], self.noise[k]) for k in self.signal}


def output_sqnr(
    model: onnx.ModelProto,
    samples: Sequence[Feeds],
    floats: Sequence[Mapping[str, np.ndarray]],
    backend: str,
    progress: bool,
) -> dict[str, float]:
    """The SQNR (dB) of each float output of `model` (the int8 one) against `floats`, over the samples."""
    run = make_runner(model, {k: v.shape for k, v in samples[0].items()}, backend)
    names = [n for n, v in floats[0].items() if v.dtype.kind == "f"]
    acc = _SqnrSums()
    for feeds, want in zip(_bar(samples, "int8 model", progress), floats, strict=True):
        got = run(feeds)
        for n in names:
            acc.add(n, want[n], got[n])
    return acc.db()


def layer_sqnr(
    model: onnx.ModelProto,
    cands: Sequence[Candidate],
    params: Mapping[str, ActParams],
    samples: Sequence[Feeds],
    backend: str,
    progress: bool,
) -> dict[str, float]:
    """Each candidate's output SQNR (dB) with only it quantized, over the samples."""
    if not cands:
        return {}
    probe, pairs = probe_model(model, cands, params)
    run = make_runner(probe, {k: v.shape for k, v in samples[0].items()}, backend)
    acc = _SqnrSums()
    for feeds in _bar(samples, "per-layer SQNR", progress):
        out = run(feeds)
        for key, (f, p) in pairs.items():
            acc.add(key, out[f], out[p])
    return acc.db()


def quantize_model(
    model: onnx.ModelProto,
    samples: Sequence[Feeds],
    method: str = "minmax",
    percentile: float = 99.99,
    keep_float: Sequence[str] = (),
    min_sqnr: float = DEFAULT_MIN_SQNR,
    backend: str = "compiled",
    progress: bool = True,
    check_model: bool = True,
) -> QuantizeResult:
    """Quantize the float `model` with the calibration `samples` (feeds, one shape).
    `check_model`: also run the int8 model over the samples for its outputs' SQNR."""
    if method not in METHODS:
        raise InputError(f"--method {method!r}: expected one of {', '.join(METHODS)}")
    if not 0 < percentile <= 100:
        raise InputError(f"--percentile {percentile}: expected a number in (0, 100]")
    if not samples:
        raise InputError("--calib: no samples")
    seconds = {}
    t0 = time.perf_counter()
    model = fold_batchnorm(with_min_opset(model))
    cands = find_candidates(model)
    _check_keep_float(keep_float, cands)
    ranges, floats = collect_ranges(model, cands, samples, method, percentile, backend, progress)
    params = {t: act_params(*r) for t, r in ranges.items()}
    seconds["ranges"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    measured = [c for c in cands if c.key not in keep_float]
    sqnr = layer_sqnr(model, measured, params, samples, backend, progress)
    seconds["per-layer SQNR"] = time.perf_counter() - t0
    rows = []
    for c in cands:
        s = sqnr.get(c.key, math.nan)
        if c.key in keep_float:
            reason = "--keep-float"
        elif not s >= min_sqnr:
            reason = f"SQNR {s:.1f} dB < --min-sqnr {min_sqnr:g} dB"
        else:
            reason = ""
        p = params[c.act]
        rows.append(LayerRow(c.key, c.node.op_type, c.act, p, c.weight.shape[c.axis], s, not reason, reason))
    chosen_keys = {r.node for r in rows if r.quantized}
    t0 = time.perf_counter()
    out = quantized_model(model, [c for c in cands if c.key in chosen_keys], params)
    onnx.checker.check_model(out)
    seconds["rewrite"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    model_sqnr = output_sqnr(out, samples, floats, backend, progress) if check_model else {}
    seconds["int8 model check"] = time.perf_counter() - t0
    return QuantizeResult(out, rows, method, percentile, min_sqnr, len(samples), seconds, model_sqnr)
