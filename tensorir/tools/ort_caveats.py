"""Where onnxruntime is not an exact reference on this machine: said beside a failed comparison.

onnxruntime's U8S8 matrix products (MLAS) on x86-64 without VNNI multiply with vpmaddubsw,
which adds two u8 x s8 products into a saturating int16 (255 * 127 * 2 > 32767). Int8 weights
near +-127 then give results many output steps off, as onnxruntime's quantization docs warn
(their remedy: quantize with reduce_range, 7-bit weights). tensorir's int8 sums are exact
int32, as the ONNX reference evaluator's are, so a failed `--compare-ort` on such a model and
such a host may be onnxruntime's error, not tensorir's; the note says so and how to check."""

from __future__ import annotations

import onnx

# ops whose int8 products onnxruntime computes with its U8S8 kernels
INT8_PRODUCT_OPS = frozenset(
    {"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QGemm", "MatMulIntegerToFloat"}
)


def ort_u8s8_saturates_here() -> bool:
    """x86-64 without AVX-512 VNNI or AVX-VNNI: onnxruntime's U8S8 sums saturate."""
    from tensorir.target import host_target

    host = host_target()
    if host.arch != "x86_64":
        return False
    return not (host.has_feature("avx512vnni") or host.has_feature("avxvnni"))


def _has_int8_products(model: onnx.ModelProto) -> bool:
    ops = {n.op_type for n in model.graph.node}
    if ops & INT8_PRODUCT_OPS:
        return True
    int8_weights = any(t.data_type == onnx.TensorProto.INT8 for t in model.graph.initializer)
    return int8_weights and "DequantizeLinear" in ops  # a QDQ model: onnxruntime fuses it to U8S8


def int8_caveat(model: onnx.ModelProto) -> str | None:
    """The note for a failed comparison of `model` with onnxruntime, or None when none applies."""
    if not (_has_int8_products(model) and ort_u8s8_saturates_here()):
        return None
    return (
        "note: this CPU has no VNNI, so onnxruntime's u8 x s8 products saturate in int16 "
        "(vpmaddubsw) while tensorir's sums are exact int32; compare on a VNNI or ARM machine, "
        "or quantize with reduce_range (7-bit weights)"
    )
