"""NN ops: shape inference, references against naive float64 loops, and ONNX import."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorir.errors import ShapeError
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.types import TensorType
from tensorir.ops.registry import get_op
from tensorir.runtime.reference import run_reference

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seed() -> None:
    """The same data for a test whatever runs before it (xdist, -k)."""
    global RNG
    RNG = np.random.default_rng(0)


def infer(op: str, types: list[TensorType], **attrs) -> list[str]:
    return [str(t) for t in get_op(op).infer(types, attrs)]


def ref(op: str, *xs: np.ndarray, **attrs) -> list[np.ndarray]:
    return get_op(op).run_reference(list(xs), attrs)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# ---- naive float64 oracles ------------------------------------------------------------
def _pad_spatial(x: np.ndarray, pads, value=0.0) -> np.ndarray:
    n = x.ndim - 2
    return np.pad(x, [(0, 0), (0, 0), *((pads[i], pads[n + i]) for i in range(n))], constant_values=value)


def naive_conv(x, w, b, strides, pads, dilations, group):
    x, w = x.astype(np.float64), w.astype(np.float64)
    nsp, (n, c), m, k = x.ndim - 2, x.shape[:2], w.shape[0], w.shape[2:]
    xp = _pad_spatial(x, pads)
    out = [(xp.shape[2 + i] - (k[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(nsp)]
    cg, mg = c // group, m // group
    y = np.zeros((n, m, *out))
    for b_, o, pos in itertools.product(range(n), range(m), np.ndindex(*out)):
        acc = b[o] if b is not None else 0.0
        for ci, tap in itertools.product(range(cg), np.ndindex(*k)):
            at = tuple(pos[i] * strides[i] + tap[i] * dilations[i] for i in range(nsp))
            acc += xp[(b_, (o // mg) * cg + ci, *at)] * w[(o, ci, *tap)]
        y[(b_, o, *pos)] = acc
    return y


def naive_conv_transpose(x, w, strides, pads, dilations, group, output_padding):
    x, w = x.astype(np.float64), w.astype(np.float64)
    nsp, (n, c), mg, k = x.ndim - 2, x.shape[:2], w.shape[1], w.shape[2:]
    cg = c // group
    full = [
        (x.shape[2 + i] - 1) * strides[i] + (k[i] - 1) * dilations[i] + 1 + output_padding[i]
        for i in range(nsp)
    ]
    buf = np.zeros((n, mg * group, *full))
    for b_, ci, pos in itertools.product(range(n), range(c), np.ndindex(*x.shape[2:])):
        for mo, tap in itertools.product(range(mg), np.ndindex(*k)):
            at = tuple(pos[i] * strides[i] + tap[i] * dilations[i] for i in range(nsp))
            buf[(b_, (ci // cg) * mg + mo, *at)] += x[(b_, ci, *pos)] * w[(ci, mo, *tap)]
    return buf[(Ellipsis, *(slice(pads[i], full[i] - pads[nsp + i]) for i in range(nsp)))]


def naive_pool(x, kind, kernel, strides, pads, dilations, out, count_include_pad=0):
    """Max (value, flat index) or average over taps, positions in unpadded coordinates."""
    nsp = x.ndim - 2
    y = np.zeros((*x.shape[:2], *out))
    idx = np.zeros(y.shape, dtype=np.int64)
    for nc in np.ndindex(*x.shape[:2]):
        for pos in np.ndindex(*out):
            vals, where, padded = [], [], 0
            for tap in np.ndindex(*kernel):
                at = tuple(pos[i] * strides[i] + tap[i] * dilations[i] - pads[i] for i in range(nsp))
                if all(0 <= at[i] < x.shape[2 + i] for i in range(nsp)):
                    vals.append(float(x[(*nc, *at)]))
                    where.append(np.ravel_multi_index((*nc, *at), x.shape))
                elif all(-pads[i] <= at[i] < x.shape[2 + i] + pads[nsp + i] for i in range(nsp)):
                    padded += 1
            if kind == "max":
                j = int(np.argmax(vals))
                y[(*nc, *pos)], idx[(*nc, *pos)] = vals[j], where[j]
            else:
                y[(*nc, *pos)] = sum(vals) / (len(vals) + (padded if count_include_pad else 0))
    return y, idx


# ---- shape inference -----------------------------------------------------------------
def test_inference_prints_types():
    x = TensorType((1, 4, 9, 9))
    conv_attrs = {"strides": (2, 2), "pads": (1, 1, 1, 1), "dilations": (2, 2), "group": 2}
    assert infer("conv", [x, TensorType((6, 2, 3, 3))], **conv_attrs) == ["f32[1,6,4,4]"]
    ct = {"strides": (2, 2), "pads": (0, 0, 1, 1), "output_padding": (1, 0), "group": 2}
    assert infer("conv_transpose", [x, TensorType((4, 3, 3, 3))], **ct) == ["f32[1,6,19,18]"]
    mp = {"kernel_shape": (2, 2), "strides": (2, 2), "ceil_mode": 1}
    assert infer("max_pool", [x], **mp) == ["f32[1,4,5,5]", "i64[1,4,5,5]"]
    assert infer("avg_pool", [TensorType((2, 3, 7))], kernel_shape=(3,), strides=(2,)) == ["f32[2,3,3]"]
    assert infer("global_avg_pool", [TensorType((2, 3, 4, 5, 6), "float16")]) == ["f16[2,3,1,1,1]"]
    assert infer(
        "gemm", [TensorType((3, 5)), TensorType((4, 3)), TensorType((4,))], trans_a=1, trans_b=1
    ) == ["f32[5,4]"]
    ln = infer("layer_norm", [TensorType((2, 3, 4), "float16"), TensorType((4,), "float16")], axis=2)
    assert ln == ["f16[2,3,4]", "f32[2,3,1]", "f32[2,3,1]"]
    assert infer("dropout", [TensorType((3,))], ratio=0.5, seed=1) == ["f32[3]", "bool[3]"]


@pytest.mark.parametrize(
    ("a", "b", "out"),
    [
        ((3,), (3,), ()),
        ((2, 3, 4), (4,), (2, 3)),
        ((4,), (2, 4, 5), (2, 5)),
        ((2, 1, 3, 4), (5, 4, 6), (2, 5, 3, 6)),
    ],
)
def test_matmul_shapes(a, b, out):
    assert get_op("matmul").infer([TensorType(a), TensorType(b)], {})[0].shape == out
    assert ref("matmul", np.ones(a, np.float32), np.ones(b, np.float32))[0].shape == out


@pytest.mark.parametrize(
    ("eq", "shapes"),
    [
        ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 6)]),
        ("ii->i", [(3, 3)]),
        ("ba", [(2, 3)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("i,i", [(4,), (4,)]),
        ("...ii->...i", [(2, 3, 3)]),
    ],
)
def test_einsum_shape_matches_numpy(eq, shapes):
    xs = [rand(*s) for s in shapes]
    (t,) = get_op("einsum").infer([TensorType.of(x) for x in xs], {"equation": eq})
    (y,) = ref("einsum", *xs, equation=eq)
    np.testing.assert_allclose(y, np.einsum(eq, *xs), rtol=1e-5, atol=1e-6)
    assert t == TensorType.of(y)


def test_shape_errors():
    with pytest.raises(ShapeError, match="group=1"):
        get_op("conv").infer([TensorType((1, 3, 8, 8)), TensorType((4, 2, 3, 3))], {})
    with pytest.raises(ShapeError, match="inner dims"):
        get_op("matmul").infer([TensorType((2, 3)), TensorType((4, 5))], {})
    with pytest.raises(ShapeError, match="does not fit"):
        get_op("max_pool").infer([TensorType((1, 1, 2, 2))], {"kernel_shape": (3, 3)})
    with pytest.raises(ShapeError, match="subscript 'i'"):
        get_op("einsum").infer([TensorType((2,)), TensorType((3,))], {"equation": "i,i->i"})


# ---- references vs naive loops ----------------------------------------------------------
@pytest.mark.parametrize(
    ("xs", "ws", "strides", "pads", "dil", "group"),
    [
        ((2, 4, 7, 8), (6, 2, 3, 2), (2, 1), (1, 0, 2, 1), (2, 1), 2),  # grouped, dilated, strided
        ((1, 3, 6, 6), (3, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 3),  # depthwise
        ((2, 2, 9), (3, 2, 4), (3,), (2, 1), (2,), 1),  # 1-D
        ((1, 2, 4, 5, 3), (2, 1, 2, 3, 2), (1, 2, 1), (0, 1, 1, 1, 0, 0), (1, 1, 2), 2),  # 3-D
    ],
)
def test_conv_matches_naive(xs, ws, strides, pads, dil, group):
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    attrs = {"strides": strides, "pads": pads, "dilations": dil, "group": group}
    (y,) = ref("conv", x, w, b, **attrs)
    (t,) = get_op("conv").infer([TensorType.of(x), TensorType.of(w), TensorType.of(b)], attrs)
    assert t == TensorType.of(y)
    np.testing.assert_allclose(y, naive_conv(x, w, b, strides, pads, dil, group), rtol=1e-5, atol=1e-5)


def test_conv_keeps_float16_and_float64():
    x, w = rand(1, 2, 5, 5), rand(3, 2, 3, 3)
    expect = naive_conv(x, w, None, (1, 1), (0,) * 4, (1, 1), 1)
    (y16,) = ref("conv", x.astype(np.float16), w.astype(np.float16))
    (y64,) = ref("conv", x.astype(np.float64), w.astype(np.float64))
    assert y16.dtype == np.float16 and y64.dtype == np.float64
    np.testing.assert_allclose(y16, expect, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(y64, expect, rtol=1e-12)


@pytest.mark.parametrize(
    ("xs", "ws", "strides", "pads", "dil", "group", "op"),
    [
        ((1, 2, 3, 4), (2, 3, 3, 3), (2, 3), (1, 0, 0, 2), (1, 1), 1, (1, 2)),
        ((2, 4, 3, 3), (4, 1, 2, 3), (1, 2), (0, 1, 1, 0), (2, 1), 2, (0, 1)),
        ((1, 2, 5), (2, 2, 3), (3,), (1, 1), (2,), 1, (2,)),
    ],
)
def test_conv_transpose_matches_naive(xs, ws, strides, pads, dil, group, op):
    x, w = rand(*xs), rand(*ws)
    attrs = {"strides": strides, "pads": pads, "dilations": dil, "group": group, "output_padding": op}
    (y,) = ref("conv_transpose", x, w, **attrs)
    (t,) = get_op("conv_transpose").infer([TensorType.of(x), TensorType.of(w)], attrs)
    assert t == TensorType.of(y)
    np.testing.assert_allclose(
        y, naive_conv_transpose(x, w, strides, pads, dil, group, op), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_ceil_mode_and_indices(storage_order):
    x = rand(2, 3, 7, 6)
    attrs = {
        "kernel_shape": (3, 2),
        "strides": (2, 3),
        "pads": (1, 0, 0, 1),
        "dilations": (1, 2),
        "ceil_mode": 1,
    }
    y, idx = ref("max_pool", x, storage_order=storage_order, **attrs)
    assert y.shape == (2, 3, 4, 2)  # ceil((7+1-3)/2)+1 = 4; ceil((6+1-3)/3)+1 = 3, but the 3rd starts in pads
    expect, flat = naive_pool(x, "max", (3, 2), (2, 3), (1, 0, 0, 1), (1, 2), y.shape[2:])
    np.testing.assert_array_equal(y, expect.astype(np.float32))
    if storage_order:  # column-major spatial axes: h + w * H
        n, c, h, w = np.unravel_index(flat, x.shape)
        flat = (n * 3 + c) * 42 + h + w * 7
    np.testing.assert_array_equal(idx, flat)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_avg_pool_ceil_mode(count_include_pad):
    x = rand(1, 2, 6, 7)
    kernel, strides, pads = (3, 3), (2, 2), (1, 1, 1, 0)
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "ceil_mode": 1}
    (y,) = ref("avg_pool", x, count_include_pad=count_include_pad, **attrs)
    assert y.shape == (1, 2, 4, 4)  # the last W window hangs past the input and its pads
    expect, _ = naive_pool(x, "avg", kernel, strides, pads, (1, 1), y.shape[2:], count_include_pad)
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-6)


def test_norms_match_numpy():
    x, s, b = rand(2, 3, 4, 5).astype(np.float64), rand(3), rand(3)
    mean, var = rand(3), np.abs(rand(3)) + 0.1
    (y,) = ref("batch_norm", x, s, b, mean, var, epsilon=1e-3)
    r = (1, 3, 1, 1)
    expect = (x - mean.reshape(r)) / np.sqrt(var.reshape(r) + 1e-3) * s.reshape(r) + b.reshape(r)
    np.testing.assert_allclose(y, expect, rtol=1e-6, atol=1e-12)
    (y,) = ref("instance_norm", x, s, b, epsilon=1e-5)
    mu, sd = x.mean(axis=(2, 3), keepdims=True), np.sqrt(x.var(axis=(2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, (x - mu) / sd * s.reshape(r) + b.reshape(r), rtol=1e-6, atol=1e-12)
    y, m, inv = ref("layer_norm", x.astype(np.float32), rand(4, 5), axis=2, epsilon=1e-5)
    assert (m.shape, inv.dtype) == ((2, 3, 1, 1), np.float32)
    np.testing.assert_allclose(m, x.mean(axis=(2, 3), keepdims=True), rtol=1e-4, atol=1e-6)


def test_softmax_and_gemm():
    x = rand(3, 4) * 50
    (y,) = ref("softmax", x, axis=0)
    e = np.exp(x.astype(np.float64) - x.max(axis=0))
    np.testing.assert_allclose(y, e / e.sum(axis=0), rtol=1e-5, atol=1e-7)
    (ly,) = ref("log_softmax", x, axis=0)
    np.testing.assert_allclose(ly, np.log(e / e.sum(axis=0)), rtol=1e-5, atol=1e-4)
    a, b, c = rand(4, 3), rand(5, 4), rand(1, 5)
    (g,) = ref("gemm", a, b, c, alpha=0.5, beta=2.0, trans_a=1, trans_b=1)
    np.testing.assert_allclose(g, 0.5 * a.T @ b.T + 2 * c, rtol=1e-5)
    (gi,) = ref("gemm", np.arange(6, dtype=np.int32).reshape(2, 3), np.ones((3, 2), np.int32))
    assert gi.dtype == np.int32 and gi.tolist() == [[3, 3], [12, 12]]


# ---- ONNX import ---------------------------------------------------------------------
def _model(nodes, inputs, outputs, inits=(), opset=22) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name: str, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _node_attrs(g, op: str) -> dict:
    return next(g.node(n).attr for n in g.op_nodes() if g.node(n).op == op)


def test_conv_weight_mismatch_names_the_node():
    w = numpy_helper.from_array(rand(4, 2, 3, 3), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="stem_conv")
    model = _model([node], [_vi("x", [1, 3, 8, 8])], [_vi("y", None)], [w])
    with pytest.raises(ShapeError, match="stem_conv.*Conv.*group=1"):
        from_onnx(model)


def test_import_resolves_auto_pad_and_output_shape():
    w = numpy_helper.from_array(rand(2, 3, 3, 3), "w")
    nodes = [
        helper.make_node("Conv", ["x", "wc"], ["c"], auto_pad="SAME_LOWER", strides=[2, 2]),
        helper.make_node("ConvTranspose", ["c", "w"], ["y"], strides=[2, 2], output_shape=[10, 9]),
    ]
    wc = numpy_helper.from_array(rand(2, 2, 4, 4), "wc")
    model = _model(nodes, [_vi("x", [1, 2, 9, 9])], [_vi("y", None)], [w, wc])
    g = from_onnx(model)
    conv = _node_attrs(g, "conv")
    assert conv == {"strides": (2, 2), "pads": (2, 2, 1, 1), "dilations": (1, 1), "group": 1}
    ct = _node_attrs(g, "conv_transpose")
    assert ct["pads"] == (1, 1, 0, 1) and ct["output_padding"] == (0, 0)  # odd pad at the begin
    (y,) = run_reference(g, {"x": rand(1, 2, 9, 9)})
    assert y.shape == (1, 3, 10, 9)


def test_softmax_opset11_coerces_to_2d():
    x = rand(2, 3, 4)
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    g = from_onnx(_model([node], [_vi("x", [2, 3, 4])], [_vi("y", None)], opset=11))
    (y,) = run_reference(g, {"x": x})
    flat = x.reshape(2, 12).astype(np.float64)
    e = np.exp(flat - flat.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, (e / e.sum(axis=1, keepdims=True)).reshape(2, 3, 4), rtol=1e-5)


def test_dropout_inference_and_seeded_training():
    x = rand(3, 4)
    old = helper.make_node("Dropout", ["x"], ["y", "m"], ratio=0.3)
    g = from_onnx(_model([old], [_vi("x", [3, 4])], [_vi("y", None), _vi("m", None)], opset=7))
    y, m = run_reference(g, {"x": x})
    np.testing.assert_array_equal(y, x)
    assert m.dtype == np.float32 and (m == 1).all()  # opset < 10: the mask has the input's type
    ratio = numpy_helper.from_array(np.array(0.5, np.float32), "r")
    train = numpy_helper.from_array(np.array(True), "t")
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"], seed=3)
    g = from_onnx(_model([node], [_vi("x", [3, 4])], [_vi("y", None), _vi("m", None)], [ratio, train]))
    y, m = run_reference(g, {"x": x})
    keep = np.random.RandomState(3).uniform(0, 1, x.shape) >= 0.5
    np.testing.assert_array_equal(m, keep)
    np.testing.assert_allclose(y, np.where(keep, x * 2, 0), rtol=1e-6)


def test_dropout_inference_ratio_need_not_be_constant():
    node = helper.make_node("Dropout", ["x", "r"], ["y", "m"])
    model = _model([node], [_vi("x", [2, 3]), _vi("r", [])], [_vi("y", None), _vi("m", None)], opset=13)
    g = from_onnx(model)
    x = rand(2, 3)
    y, m = run_reference(g, {"x": x, "r": np.array(0.4, np.float32)})
    np.testing.assert_array_equal(y, x)
    assert m.dtype == np.bool_ and m.all()
