"""Compiled tensor-manipulation, pad and resize ops (run_op on the host) vs the numpy references.

Data movement (and nearest resize) must match exactly. Linear / cubic resize compute in
float64 like the reference but sum the taps in another order, so floats get rtol = atol =
1e-6 and integer outputs (rounded half to even) may differ by one step at exact ties.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.graph.types import TensorType
from tensorir.loop.ir import Ramp, Var
from tensorir.loop.printer import expr_text, to_text
from tensorir.loop.visitor import walk
from tensorir.ops.kernel import empty_tensor, op_kernel, run_op
from tensorir.ops.registry import get_op
from tensorir.ops.resize_compute import column_expr
from tensorir.schedule import ScheduleError, compute, create_schedule, lower, placeholder

RNG = np.random.default_rng(7)
DTYPES = ["float32", "int8", "float16", "bool", "int64", "uint8", "float64"]


def data(shape: tuple[int, ...], dtype: str = "float32") -> np.ndarray:
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def check(op: str, inputs: list[np.ndarray], tol: float = 0.0, **attrs) -> None:
    want = get_op(op).run_reference(inputs, attrs)
    got = run_op(op, inputs, attrs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        if tol and w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
        elif tol:
            assert np.abs(g.astype(np.int64) - w.astype(np.int64)).max(initial=0) <= 1
        else:
            np.testing.assert_array_equal(g, w)


def vectorized(op: str, inputs: list[np.ndarray], **attrs) -> bool:
    func = op_kernel(op, [TensorType.of(a) for a in inputs], attrs)
    return any(isinstance(n, Ramp) for n in walk(func.body))


# ---- identity / reshape / transpose -------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_identity_reshape_transpose_dtypes(dtype):
    x = data((2, 3, 4, 5), dtype)
    check("identity", [x])
    check("reshape", [x], shape=(6, 20))
    check("transpose", [x], perm=(0, 2, 3, 1))


@pytest.mark.parametrize("src, shape", [((1,), ()), ((), (1, 1)), ((1, 1), ()), ((7,), (1, 7, 1))])
def test_reshape_to_and_from_scalars(src, shape):
    check("reshape", [data(src)], shape=shape)


@pytest.mark.parametrize("perm", [(0, 1, 2), (2, 1, 0), (1, 0, 2), (0, 2, 1), (2, 0, 1)])
def test_transpose_permutations(perm):
    check("transpose", [data((3, 5, 16))], perm=perm)


def test_transpose_keeping_last_axis_vectorizes():
    x = data((4, 6, 16))
    assert vectorized("transpose", [x], perm=(1, 0, 2))
    assert vectorized("reshape", [x], shape=(24, 16))


# ---- concat / split / slice -----------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_concat_axes(axis):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4), (2, 3, 4), (2, 3, 4)]
    xs = [
        data(tuple(d + k if a == axis else d for a, d in enumerate(s)), "int32") for k, s in enumerate(shapes)
    ]
    check("concat", xs, axis=axis)


def test_concat_off_the_last_axis_vectorizes():
    xs = [data((2, 3, 16)), data((2, 5, 16))]
    check("concat", xs, axis=1)
    assert vectorized("concat", xs, axis=1)


def test_channel_concat_of_odd_maps_vectorizes_its_rows():
    """NCHW channel concat of 5x7 maps (a SqueezeNet fire module's): each channel's 35 pixels
    one contiguous run, vectors with a guarded last block."""
    xs = [data((1, 3, 5, 7)), data((1, 2, 5, 7))]
    check("concat", xs, axis=1)
    assert vectorized("concat", xs, axis=1)


@pytest.mark.parametrize("axis, sizes", [(0, (1, 3)), (1, (2, 2, 1)), (2, (4, 1, 3))])
def test_split(axis, sizes):
    check("split", [data((4, 5, 8), "float16")], axis=axis, sizes=sizes)


@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [
        ((1,), (4,), (0,), (1,)),
        ((0, 1), (5, 7), (1, 2), (2, 3)),
        ((4,), (-1,), (1,), (-1,)),  # down to and including index 0
        ((7, 3), (0, -1), (2, 0), (-2, -3)),
        ((6,), (1,), (2,), (-4,)),
    ],
)
def test_slice_steps(starts, ends, axes, steps):
    check("slice", [data((4, 5, 8), "int8")], starts=starts, ends=ends, axes=axes, steps=steps)


def test_reversed_slice_stays_scalar_and_correct():
    x = data((4, 16))
    check("slice", [x], starts=(15,), ends=(-1,), axes=(1,), steps=(-1,))
    assert not vectorized("slice", [x], starts=(15,), ends=(-1,), axes=(1,), steps=(-1,))


# ---- gather ------------------------------------------------------------------------------
@pytest.mark.parametrize("itype", ["int32", "int64"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_negative_indices(itype, axis):
    x = data((3, 4, 5))
    dim = x.shape[axis]
    idx = RNG.integers(-dim, dim, (2, 3)).astype(itype)
    idx.flat[0], idx.flat[1] = -1, -dim
    check("gather", [x, idx], axis=axis)


def test_gather_scalar_index_and_vectorized_rows():
    x = data((5, 16))
    check("gather", [x, np.array(-2, np.int64)], axis=0)
    assert vectorized("gather", [x, np.array([1, -1], np.int64)], axis=0)


def test_gather_out_of_range_index_is_clamped():
    x = data((4, 3))
    (got,) = run_op("gather", [x, np.array([7, -9], np.int64)], {"axis": 0})
    np.testing.assert_array_equal(got, x[[3, 0]])


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_elements(axis):
    x = data((3, 4, 5), "int64")
    shape = [3, 4, 5]
    shape[axis] = 2
    dim = x.shape[axis]
    check("gather_elements", [x, RNG.integers(-dim, dim, shape).astype(np.int32)], axis=axis)


# ---- expand / tile / depth_to_space / space_to_depth ---------------------------------------------
@pytest.mark.parametrize(
    "src, shape", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((), (2, 2)), ((4, 1, 6), (4, 5, 6)), ((2, 3), (2, 3))]
)
def test_expand(src, shape):
    check("expand", [data(src, "uint8")], shape=shape)


@pytest.mark.parametrize("repeats", [(1, 1, 1), (2, 1, 3), (1, 3, 1), (2, 2, 2)])
def test_tile(repeats):
    check("tile", [data((2, 3, 4), "bool")], repeats=repeats)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("b", [2, 3])
def test_depth_to_space(mode, b):
    check("depth_to_space", [data((2, 2 * b * b, 3, 4))], blocksize=b, mode=mode)


@pytest.mark.parametrize("b", [2, 3])
def test_space_to_depth(b):
    check("space_to_depth", [data((2, 3, 2 * b, 3 * b), "int8")], blocksize=b)


# ---- empty tensors -------------------------------------------------------------------------
def test_empty_pieces_and_outputs():
    x = data((2, 3, 4))
    empty = np.zeros((2, 0, 4), np.float32)
    check("concat", [empty, x, empty, x], axis=1)
    check("split", [x], axis=1, sizes=(0, 2, 0, 1))
    check("split", [np.zeros(0, np.float32)], axis=0, sizes=(0, 0))
    check("slice", [x], starts=(1,), ends=(1,), axes=(1,), steps=(1,))
    check("reshape", [np.zeros((0, 3, 4), np.float32)], shape=(3, 0, 4))


def test_lower_accepts_an_unread_empty_input():
    """Regression: lower() rejected every argument outside the schedule, so a kernel with an
    empty input (which no stage reads) could not be built. Non-empty strangers still fail."""
    a = placeholder((3,), "float32", "A")
    b = compute((3,), lambda i: a[i] * 2.0, name="B")
    func = lower(create_schedule([b]), [a, empty_tensor((0, 3), "float32", "E"), b])
    assert [p.name for p in func.params] == ["A", "E", "B"]
    with pytest.raises(ScheduleError, match="not a tensor of this schedule"):
        lower(create_schedule([b]), [a, placeholder((2,), "float32", "Z"), b])


def test_all_empty_outputs_give_a_kernel_that_does_nothing():
    func = op_kernel("slice", [TensorType((4, 3))], dict(starts=(2,), ends=(2,), axes=(0,), steps=(1,)))
    assert to_text(func) == "def slice(in0: f32[4,3], out0: f32[0,3]):\n  pass"


# ---- pad -----------------------------------------------------------------------------------
PADS = [
    (0, 1, 2, 3, 0, 2, 1, 0),
    (0, 0, 0, -1, 0, 0, -2, 3),  # crop and pad on one axis
    (1, -1, 0, 2, 0, 2, -1, 0),
    (0, 0, 0, 0, 0, 0, 0, 0),
]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", PADS)
def test_pad_modes(mode, pads):
    check("pad", [data((2, 3, 4, 8))], pads=pads, mode=mode, value=1.5)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("dtype", ["int32", "bool", "float16"])
def test_pad_wider_than_the_input(mode, dtype):
    value = True if dtype == "bool" else -3
    check("pad", [data((5,), dtype)], pads=(9, 11), mode=mode, value=value)


def test_pad_reflect_single_element_and_empty_input():
    check("pad", [np.ones(1, np.int32)], pads=(2, 3), mode="reflect")
    check("pad", [np.zeros((0, 3), np.float32)], pads=(1, 0, 1, 0), mode="constant", value=2.0)


def test_pad_off_the_last_axis_vectorizes():
    assert vectorized("pad", [data((2, 3, 16))], pads=(0, 1, 0, 0, 2, 0), mode="constant", value=0.0)


# ---- resize --------------------------------------------------------------------------------
BASE = dict(roi=(), cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, antialias=0)
CTMS = ["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"]
SIZES = [
    ((1, 2, 10, 14), (1, 1, 2.0, 2.0)),
    ((1, 2, 3, 4), (1, 1, 0.6, 0.6)),
    ((1, 2, 8, 9), (1, 1, 1.6, 9 / 7)),
]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"]


def resize(x: np.ndarray, sizes, scales, tol: float = 0.0, **attrs) -> None:
    full = {**BASE, "nearest_mode": "round_prefer_floor", **attrs}
    check("resize", [x], tol=tol, sizes=sizes, scales=scales, **full)


@pytest.mark.parametrize("ctm", CTMS)
@pytest.mark.parametrize("sizes, scales", SIZES)
def test_resize_nearest_every_mode_exact(ctm, sizes, scales):
    x = data((1, 2, 5, 7))
    for nm in NEAREST:
        resize(x, sizes, scales, mode="nearest", coordinate_transformation_mode=ctm, nearest_mode=nm)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("ctm", CTMS)
@pytest.mark.parametrize("sizes, scales", SIZES)
def test_resize_linear_cubic(mode, ctm, sizes, scales):
    resize(data((1, 2, 5, 7)), sizes, scales, 1e-6, mode=mode, coordinate_transformation_mode=ctm)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("exclude_outside, antialias", [(1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("sizes, scales", SIZES)
def test_resize_exclude_outside_antialias(mode, exclude_outside, antialias, sizes, scales):
    x = data((1, 2, 5, 7))
    resize(x, sizes, scales, 1e-6, mode=mode, exclude_outside=exclude_outside, antialias=antialias)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("roi", [(0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8), (0, 0, -0.4, 0.6, 1, 1, 1.2, 1.8)])
def test_resize_tf_crop_and_resize_extrapolation(mode, roi):
    x = data((1, 2, 5, 7))
    sizes, scales = (1, 2, 3, 3), (1, 1, 0.6, 3 / 7)
    ctm = "tf_crop_and_resize"
    resize(
        x,
        sizes,
        scales,
        1e-6,
        mode=mode,
        roi=roi,
        coordinate_transformation_mode=ctm,
        extrapolation_value=10.0,
    )


@pytest.mark.parametrize("dtype", ["uint8", "int8", "float16", "float64"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_dtypes(dtype, mode):
    x = data((1, 1, 4, 4), dtype) if dtype != "uint8" else RNG.integers(0, 256, (1, 1, 4, 4)).astype(np.uint8)
    tol = 0.0 if mode == "nearest" else (2e-3 if dtype == "float16" else 1e-6)
    resize(x, (1, 1, 7, 9), (1, 1, 7 / 4, 9 / 4), tol, mode=mode)


def test_resize_1d_and_3d():
    resize(data((6,)), (13,), (13 / 6,), 1e-6, mode="cubic")
    resize(data((3, 4, 5)), (5, 2, 9), (5 / 3, 0.5, 1.8), 1e-6, mode="linear", exclude_outside=1)
    resize(data((2, 3)), (2, 3), (1.0, 1.0), mode="nearest")  # nothing resized: a copy


def test_column_expr_finds_periods():
    y = Var("y")
    v = np.array([-1, 0, 0, 1, 1, 2, 2, 3])  # period 2, step 1
    assert "y%2" in expr_text(column_expr(v, y, "int64"))
    assert "y%2" in expr_text(column_expr(np.tile([0.25, 0.75], 5), y, "float64"))
    assert expr_text(column_expr(np.arange(5) * 3 + 1, y, "int64")) == "y*3 + 1"
    assert expr_text(column_expr(np.array([0, 0, 1, 5, 5]), y, "int64")).count("select") == 2
