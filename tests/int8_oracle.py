"""Where onnxruntime is an exact int8 oracle on this host, and what stands in where it is not.

onnxruntime's U8S8 kernels (MLAS) on x86-64 without VNNI multiply with vpmaddubsw, which adds
two u8 x s8 products into a saturating int16: 255 * 127 * 2 > 32767, so weights near +-127 give
results many output steps off (0.33 against a step of 0.028 on a 3x3 conv here, Zen 3 AVX2).
onnxruntime's quantization docs name the remedy: reduce_range, 7-bit weights, whose pair sums
fit (255 * 64 * 2 = 32640). With VNNI (vpdpbusd, int32 sums) or on ARM it is exact at 8 bits.

The int8 tests therefore quantize with reduce_range where onnxruntime saturates, so it stays an
exact oracle on every host. tensorir's sums are exact int32 at any weight range; the full 8-bit
range is checked on every host against the ONNX reference evaluator (`ReferenceSession`),
which is exact by construction."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from tensorir.tools.ort_caveats import ort_u8s8_saturates_here


def ort_u8s8_exact() -> bool:
    """Whether onnxruntime's U8S8 products are exact here (not x86-64, or a VNNI x86-64)."""
    return not ort_u8s8_saturates_here()


def quantize_options() -> dict:
    """quantize_static options that keep onnxruntime exact on this host (see the module doc)."""
    return {"reduce_range": not ort_u8s8_exact()}


def weight_max() -> int:
    """The largest int8 weight magnitude onnxruntime multiplies exactly here."""
    return 127 if ort_u8s8_exact() else 63


class ReferenceSession:
    """onnx.reference.ReferenceEvaluator behind InferenceSession's run(None, feeds)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        from onnx.reference import ReferenceEvaluator

        m = onnx.ModelProto()
        m.CopyFrom(model)
        for opset in m.opset_import:  # Q/DQ of opset 13-18 are implemented under 19 and 21 only
            if opset.domain in ("", "ai.onnx") and opset.version < 21:
                opset.version = 21
        self.evaluator = ReferenceEvaluator(m)

    def run(self, names, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.evaluator.run(names, feeds)


def int8_session(model: onnx.ModelProto):
    """onnxruntime where its U8S8 products are exact, else the ONNX reference evaluator."""
    if ort_u8s8_exact():
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return ReferenceSession(model)
