"""ONNX BitCast compiled for the host (ops/bitwise.py's bitcast: LLVM bitcast, a bool's byte
through a cast) on what the node tests leave out: NaN payloads, signed zeros, infinities and
denormals kept bit for bit, float16, vectorized lengths with a
tail, and the refusal of types of different widths."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from tensorir.errors import ShapeError
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.types import TensorType
from tensorir.loop.interp import run
from tensorir.ops.kernel import op_kernel
from tensorir.runtime.executor import CompiledGraph

RNG = np.random.default_rng(0)


def _bitcast(x: np.ndarray, to: np.dtype) -> np.ndarray:
    src, dst = helper.np_dtype_to_tensor_dtype(x.dtype), helper.np_dtype_to_tensor_dtype(np.dtype(to))
    node = helper.make_node("BitCast", ["x"], ["y"], to=dst)
    graph = helper.make_graph(
        [node],
        "m",
        [helper.make_tensor_value_info("x", src, list(x.shape))],
        [helper.make_tensor_value_info("y", dst, list(x.shape))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    (got,) = CompiledGraph(from_onnx(model), "host").run({"x": x})
    return got


def _special_bits(dtype: type, n: int) -> np.ndarray:
    info = np.finfo(dtype)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, info.tiny / 4, -info.tiny, info.max]
    x = np.concatenate([np.array(special, dtype), RNG.standard_normal(n).astype(dtype)])
    ints = x.view(f"uint{8 * x.itemsize}")
    ints[4] |= 0x5  # a NaN with a payload
    ints[5 + n // 2] ^= 1 << (8 * x.itemsize - 2)  # a large exponent
    return x


@pytest.mark.parametrize(
    "src, to",
    [(np.float32, np.int32), (np.float32, np.uint32), (np.float64, np.uint64), (np.float16, np.int16)],
)
def test_float_bits_round_trip_exactly(src, to):
    x = _special_bits(src, 37)  # 45 elements: full vectors and a tail
    y = _bitcast(x, to)
    assert y.dtype == np.dtype(to) and y.shape == x.shape
    np.testing.assert_array_equal(y, x.view(to))
    back = _bitcast(y, src)
    np.testing.assert_array_equal(back.view(to), x.view(to))


def test_int_to_float_and_bool_to_uint8():
    bits = RNG.integers(-(2**31), 2**31, (3, 5, 7), dtype=np.int64).astype(np.int32)
    np.testing.assert_array_equal(_bitcast(bits, np.float32).view(np.int32), bits)
    flags = RNG.random(19) < 0.5
    np.testing.assert_array_equal(_bitcast(flags, np.uint8), flags.astype(np.uint8))


def test_widths_must_match():
    with pytest.raises(ShapeError, match="same width"):
        _bitcast(np.zeros(4, np.float32), np.int64)


def test_kernel_is_a_vector_bitcast_the_interpreter_runs():
    func = op_kernel("bitcast", [TensorType((64,), "float32")], {"to": "int32"})
    assert "ramp(" in str(func) and "bitcast(" in str(func), str(func)
    x = _special_bits(np.float32, 56)
    out = np.empty(64, np.int32)
    run(func, [x, out])
    np.testing.assert_array_equal(out, x.view(np.int32))
