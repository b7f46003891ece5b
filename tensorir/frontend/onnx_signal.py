"""Converters for ONNX signal ops whose output depends only on constant inputs:
MelWeightMatrix becomes a constant (its inputs must be known at compile time; a static-shape
compiler needs num_mel_bins and dft_length anyway)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper

from tensorir.frontend.onnx import ImportContext, converter
from tensorir.graph.graph import Value


def mel_weight_matrix(
    num_mel_bins: int, dft_length: int, sample_rate: np.ndarray, lower_hz: np.ndarray, upper_hz: np.ndarray
) -> np.ndarray:
    """[dft_length // 2 + 1, num_mel_bins] triangular filters, in float64, computed with the
    operations (and the input dtypes) of ONNX's reference so the bin edges round the same."""
    edges = np.arange(0, num_mel_bins + 2)
    low_mel = 2595 * np.log10(1 + lower_hz / 700)
    high_mel = 2595 * np.log10(1 + upper_hz / 700)
    step = (high_mel - low_mel) / edges.shape[0]
    hz = 700 * (np.power(10, (edges * step + low_mel) / 2595) - 1)
    bins = (((dft_length + 1) * hz) // sample_rate).astype(int)
    out = np.zeros((dft_length // 2 + 1, num_mel_bins))
    for i in range(num_mel_bins):
        left, center, right = bins[i], bins[i + 1], bins[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            rise = np.arange(left, center + 1)
            out[rise, i] = (rise - left) / float(center - left)
        if right > center:
            fall = np.arange(center, right)
            out[fall, i] = (right - fall) / float(right - center)
    return out


@converter("MelWeightMatrix")
def mel_weight_matrix_node(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    args = [np.asarray(ctx.const_input(node, i, n)).reshape(()) for i, n in enumerate(names)]
    out = mel_weight_matrix(int(args[0]), int(args[1]), *args[2:])
    dtype = onnx.helper.tensor_dtype_to_np_dtype(
        ctx.attrs(node).get("output_datatype", onnx.TensorProto.FLOAT)
    )
    return [ctx.const(out.astype(dtype))]
