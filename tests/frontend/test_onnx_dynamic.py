"""Data-dependent output lengths (NonZero, Compress, NonMaxSuppression, Unique, TopK with a
run-time K) compiled for the host and checked against onnxruntime: the values must be equal
(they are indices, selections and sorts of float32 data computed the same way)."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import tensorir
from tensorir.errors import ModelError
from tensorir.frontend.onnx import from_onnx
from tensorir.ops.kernel import op_kernel
from tensorir.runtime.reference import run_reference

RNG = np.random.default_rng(7)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    vi = [h.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    vo = [h.make_tensor_value_info(n, t, None) for n, t in outputs]
    g = h.make_graph(nodes, "dyn", vi, vo, initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(model, feeds):
    """Compiled for the host and by the reference interpreter: equal to onnxruntime."""
    theirs = _ort(model, feeds)
    ours = tensorir.compile(model).run(feeds)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == b.shape, (a.shape, b.shape)
        np.testing.assert_array_equal(a, b)
    return ours


def _boxes(batch, n, flip=False):
    ctr = RNG.random((batch, n, 2)) * 20
    wh = RNG.random((batch, n, 2)) * 8 + 1
    b = np.concatenate([ctr - wh / 2, ctr + wh / 2], -1).astype(np.float32)
    return b[..., [2, 3, 0, 1]] if flip else b


@pytest.mark.parametrize(
    "center, score_threshold, max_out_input",
    [(0, True, False), (1, True, False), (0, False, False), (0, True, True), (1, False, True)],
)
def test_nms_matches_onnxruntime(center, score_threshold, max_out_input):
    batch, classes, n = 2, 3, 60
    inits = [h.make_tensor("iou", T.FLOAT, [1], [0.4])]
    inputs = [("boxes", T.FLOAT, [batch, n, 4]), ("scores", T.FLOAT, [batch, classes, n])]
    if max_out_input:
        inputs.append(("max_out", T.INT64, [1]))
    else:
        inits.append(h.make_tensor("max_out", T.INT64, [1], [7]))
    nms_in = ["boxes", "scores", "max_out", "iou"]
    if score_threshold:
        inits.append(h.make_tensor("thr", T.FLOAT, [1], [0.3]))
        nms_in.append("thr")
    node = h.make_node("NonMaxSuppression", nms_in, ["sel"], center_point_box=center)
    model = _model([node], inputs, [("sel", T.INT64)], inits)
    feeds = {
        "boxes": _boxes(batch, n, flip=not center),
        "scores": RNG.random((batch, classes, n)).astype(np.float32),
    }
    if center:  # (x_center, y_center, width, height)
        b = feeds["boxes"]
        feeds["boxes"] = np.concatenate([(b[..., :2] + b[..., 2:]) / 2, b[..., 2:] - b[..., :2]], -1)
    if max_out_input:
        feeds["max_out"] = np.array([5], np.int64)
    (sel,) = _check(model, feeds)
    assert 10 <= len(sel) < batch * classes * n  # some kept, some suppressed or filtered


def test_nms_ties_and_identical_boxes():
    """Equal scores keep the lower index first; identical boxes suppress each other."""
    boxes = np.tile(np.array([[0, 0, 1, 1]], np.float32), (1, 6, 1))
    boxes[0, 3:] += 5
    scores = np.array([[[0.5, 0.9, 0.9, 0.5, 0.5, 0.7]]], np.float32)
    node = h.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou"], ["sel"])
    inits = [h.make_tensor("max_out", T.INT64, [1], [6]), h.make_tensor("iou", T.FLOAT, [1], [0.5])]
    model = _model(
        [node], [("boxes", T.FLOAT, [1, 6, 4]), ("scores", T.FLOAT, [1, 1, 6])], [("sel", T.INT64)], inits
    )
    (sel,) = _check(model, {"boxes": boxes, "scores": scores})
    assert sel[:, 2].tolist() == [1, 5]


def test_nonzero_compress_topk_and_downstream_ops():
    """Lengths flow through Squeeze, Gather, Mul and Shape; Compress with and without an axis;
    TopK's K given at run time."""
    nodes = [
        h.make_node("Greater", ["x", "thr"], ["mask"]),
        h.make_node("NonZero", ["mask"], ["nz"]),
        h.make_node("Squeeze", ["nz", "ax0"], ["idx"]),
        h.make_node("Gather", ["data", "idx"], ["rows"], axis=0),
        h.make_node("Mul", ["rows", "two"], ["rows2"]),
        h.make_node("Shape", ["rows2"], ["shp"]),
        h.make_node("Compress", ["data", "mask"], ["comp"], axis=0),
        h.make_node("Compress", ["data", "flat_mask"], ["comp_flat"]),
        h.make_node("TopK", ["x", "k"], ["tv", "ti"]),
        h.make_node("NonZero", ["cube"], ["nz3"]),
    ]
    inputs = [
        ("x", T.FLOAT, [6]),
        ("data", T.FLOAT, [6, 4]),
        ("k", T.INT64, [1]),
        ("flat_mask", T.BOOL, [24]),
        ("cube", T.FLOAT, [3, 4, 5]),
    ]
    outs = [("rows2", T.FLOAT), ("shp", T.INT64), ("comp", T.FLOAT), ("comp_flat", T.FLOAT)]
    outs += [("tv", T.FLOAT), ("ti", T.INT64), ("nz3", T.INT64)]
    inits = [
        h.make_tensor("thr", T.FLOAT, [], [0.5]),
        h.make_tensor("ax0", T.INT64, [1], [0]),
        h.make_tensor("two", T.FLOAT, [], [2.0]),
    ]
    model = _model(nodes, inputs, outs, inits)
    cube = RNG.random((3, 4, 5)).astype(np.float32)
    feeds = {
        "x": np.array([0.1, 0.9, 0.7, 0.2, 0.6, 0.0], np.float32),
        "data": np.arange(24, dtype=np.float32).reshape(6, 4),
        "k": np.array([4], np.int64),
        "flat_mask": RNG.random(24) > 0.5,
        "cube": np.where(cube > 0.7, cube, 0),
    }
    ours = _check(model, feeds)
    assert ours[0].shape == (3, 4) and ours[1].tolist() == [3, 4]
    feeds["x"][:] = 0.0  # nothing selected: empty outputs
    ours = _check(model, feeds)
    assert ours[0].shape == (0, 4) and ours[2].shape == (0, 4)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("sort", [0, 1])
def test_unique_matches_onnxruntime(axis, sort):
    attrs = {"sorted": sort} | ({} if axis is None else {"axis": axis})
    node = h.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], **attrs)
    outs = [("y", T.FLOAT), ("indices", T.INT64), ("inverse", T.INT64), ("counts", T.INT64)]
    model = _model([node], [("x", T.FLOAT, [5, 4])], outs)
    x = RNG.integers(0, 3, (5, 4)).astype(np.float32)
    x[3] = x[1]  # a repeated row
    x[:, 2] = x[:, 0]  # and a repeated column
    _check(model, {"x": x})


def test_graph_text_manifest_and_header(tmp_path):
    node = h.make_node("NonZero", ["x"], ["nz"], name="find")
    model = _model([node], [("x", T.FLOAT, [2, 3])], [("nz", T.INT64)])
    g = from_onnx(model)
    assert "return %1.0 as nz (rows along axis 1: nz__length), %1.1 as nz__length" in str(g)
    mod = tensorir.compile(model)
    out = mod.export(tmp_path / "build")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["outputs"] == [
        {"name": "nz", "shape": [2, 6], "dtype": "int64", "length": {"axis": 1, "output": 1}},
        {"name": "nz__length", "shape": [], "dtype": "int64", "length_of": 0},
    ]
    header = (out / "model.h").read_text()
    assert "output 0: nz  int64[2, 6]  at most; valid along axis 1: the first *output 1" in header
    assert "output 1: nz__length  int64[]  the run's length of output 0" in header
    x = np.array([[0, 2, 0], [3, 0, 4]], np.float32)
    (nz,) = tensorir.load(out).run({"x": x})
    np.testing.assert_array_equal(nz, np.array(np.nonzero(x)))


def test_c_api_buffers_are_upper_bounds(tmp_path):
    """Through the raw entry point: every buffer, the padding zeroed, the length beside it."""
    import ctypes

    node = h.make_node("NonZero", ["x"], ["nz"])
    out = tensorir.compile(_model([node], [("x", T.FLOAT, [5])], [("nz", T.INT64)])).export(tmp_path / "b")
    mod = tensorir.load(out)
    x = np.array([0, 1, 0, 2, 0], np.float32)
    nz, length = np.full((1, 5), -1, np.int64), np.zeros((), np.int64)
    ptrs = lambda arrays: (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])  # noqa: E731
    assert mod.lib.tir_run(mod.handle, ptrs([x]), ptrs([nz, length])) == 0
    assert nz.tolist() == [[1, 3, 0, 0, 0]] and int(length) == 2


def test_nonzero_kernel_ir_text():
    from tensorir.graph.types import TensorType

    text = str(op_kernel("nonzero", [TensorType((2, 3), "float32")], {}, "host"))
    assert "if x[i] != 0.0:" in text
    assert "idx[n[0]] = i//3" in text and "idx[6 + n[0]] = i%3" in text
    assert "count[0] = n[0]" in text


def test_constant_inputs_fold_to_exact_shapes():
    node = h.make_node("NonZero", ["c"], ["nz"])
    c = h.make_tensor("c", T.FLOAT, [4], [0, 1, 0, 1])
    g = from_onnx(_model([node], [], [("nz", T.INT64)], [c]))
    assert g.output_lengths == {}
    np.testing.assert_array_equal(run_reference(g, {})[0], [[1, 3]])


@pytest.mark.parametrize(
    "node, what",
    [
        (h.make_node("ReduceSum", ["rows"], ["y"], keepdims=0, name="total"), "reduce_sum"),
        (h.make_node("Concat", ["rows", "data"], ["y"], axis=0, name="join"), "concat"),
        (h.make_node("NonZero", ["rows"], ["y"], name="again"), "nonzero"),
    ],
)
def test_ops_that_would_read_the_padding_are_refused(node, what):
    nodes = [
        h.make_node("NonZero", ["x"], ["nz"], name="find"),
        h.make_node("Squeeze", ["nz", "ax0"], ["idx"]),
        h.make_node("Gather", ["data", "idx"], ["rows"], axis=0),
        node,
    ]
    inits = [h.make_tensor("ax0", T.INT64, [1], [0])]
    model = _model(nodes, [("x", T.FLOAT, [6]), ("data", T.FLOAT, [6, 4])], [("y", T.FLOAT)], inits)
    with pytest.raises(ModelError) as e:
        from_onnx(model)
    msg = str(e.value)
    assert f"node '{node.name}'" in msg and "node 'find' (NonZero)" in msg and what in msg
    assert "\n" not in msg


def test_nms_head_on_opencl_runs_nms_on_the_cpu_and_the_rest_on_the_device():
    """An OpenCL build: sigmoid and the gathers are GPU kernels (PoCL here), nms a CPU step
    between them; the selected boxes equal onnxruntime's."""
    batch, classes, n = 1, 2, 30
    nodes = [
        h.make_node("Sigmoid", ["logits"], ["scores"]),
        h.make_node("NonMaxSuppression", ["boxes", "scores", "mo", "iou", "thr"], ["sel"]),
        h.make_node("Gather", ["sel", "two"], ["box_index"], axis=1),
        h.make_node("Squeeze", ["boxes", "zero"], ["b0"]),
        h.make_node("Gather", ["b0", "box_index"], ["picked"], axis=0),
    ]
    inits = [
        h.make_tensor("mo", T.INT64, [1], [5]),
        h.make_tensor("iou", T.FLOAT, [1], [0.3]),
        h.make_tensor("thr", T.FLOAT, [1], [0.4]),
        h.make_tensor("two", T.INT64, [], [2]),
        h.make_tensor("zero", T.INT64, [1], [0]),
    ]
    inputs = [("boxes", T.FLOAT, [batch, n, 4]), ("logits", T.FLOAT, [batch, classes, n])]
    model = _model(nodes, inputs, [("picked", T.FLOAT), ("sel", T.INT64)], inits)
    feeds = {"boxes": _boxes(batch, n), "logits": RNG.normal(size=(batch, classes, n)).astype(np.float32)}
    mod = tensorir.compile(model, "opencl:pocl")
    devices = {k["op"]: k.get("device") for k in mod.manifest["kernels"]}
    assert devices["nms"] == "cpu" and devices["sigmoid"] == "gpu", devices
    ours, theirs = mod.run(feeds), _ort(model, feeds)
    assert ours[1].shape[0] >= 4
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.arm64
def test_nms_on_linux_arm64_under_qemu():
    """The loop-IR kernels and the length outputs on ARM64: run under qemu, cut to length."""
    batch, classes, n = 1, 2, 40
    node = h.make_node("NonMaxSuppression", ["boxes", "scores", "mo", "iou", "thr"], ["sel"])
    inits = [
        h.make_tensor("mo", T.INT64, [1], [6]),
        h.make_tensor("iou", T.FLOAT, [1], [0.3]),
        h.make_tensor("thr", T.FLOAT, [1], [0.2]),
    ]
    inputs = [("boxes", T.FLOAT, [batch, n, 4]), ("scores", T.FLOAT, [batch, classes, n])]
    model = _model([node], inputs, [("sel", T.INT64)], inits)
    feeds = {"boxes": _boxes(batch, n), "scores": RNG.random((batch, classes, n)).astype(np.float32)}
    (ours,), (theirs,) = tensorir.compile(model, "linux-arm64").run(feeds), _ort(model, feeds)
    assert 4 <= len(theirs) <= 12
    np.testing.assert_array_equal(ours, theirs)
