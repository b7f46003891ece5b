"""benchmarks/weights_ahead.py: each kernel's weight blocks found from the manifest, and the two
passes (plain, weights read first) over the model's own memory."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh

import tensorir as tir
from benchmarks.weights_ahead import other_views, passes, weight_views


def _two_convs(path) -> str:
    rng = np.random.default_rng(0)
    w1 = onh.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.1, "w1")
    w2 = onh.from_array(rng.standard_normal((48, 32, 1, 1)).astype(np.float32) * 0.1, "w2")
    graph = oh.make_graph(
        [
            oh.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
            oh.make_node("Relu", ["c"], ["r"]),
            oh.make_node("Conv", ["r", "w2"], ["y"]),
        ],
        "two",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 16, 28, 28])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 48, 28, 28])],
        [w1, w2],
    )
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), path)
    return str(path)


def test_every_weight_byte_belongs_to_one_kernels_view(tmp_path):
    """The views of distinct arguments tile each block from its first argument to its end, and
    a conv kernel's view holds that conv's (packed or prepared) weights: as many floats."""
    mod = tir.compile(_two_convs(tmp_path / "two.onnx"))
    x = np.random.default_rng(1).uniform(-1, 1, (1, 16, 28, 28)).astype(np.float32)
    _, bases = mod.kernel_calls({"x": x})
    views = weight_views(mod.manifest, bases)
    kernels = mod.manifest["kernels"]
    assert len(views) == len(kernels)
    seen: dict[int, int] = {}
    for view in (v for vs in views for v in vs):
        seen[view.ctypes.data] = view.nbytes
    blocks = {"weight": mod.manifest["weights_bytes"], "prepared": mod.manifest.get("prepared_bytes") or 0}
    for kind, total in blocks.items():
        base = bases[kind] or 0
        starts = sorted(a for a in seen if base <= a < base + total)
        if starts:
            assert sum(seen[a] for a in starts) == base + total - starts[0]
    convs = [vs for k, vs in zip(kernels, views, strict=True) if "conv" in k.get("workload", "")]
    assert len(convs) == 2 and all(vs for vs in convs)
    assert max(v.size for v in convs[0]) >= 32 * 16 * 9 and max(v.size for v in convs[1]) >= 48 * 32


def test_both_passes_time_every_kernel_and_leave_the_model_right(tmp_path):
    mod = tir.compile(_two_convs(tmp_path / "two.onnx"))
    x = np.random.default_rng(2).uniform(-1, 1, (1, 16, 28, 28)).astype(np.float32)
    want = mod.run({"x": x})[0]
    t, _ = passes(mod, {"x": x}, rounds=2)
    assert t.shape == (3, 2, len(mod.manifest["kernels"])) and (t > 0).all()
    np.testing.assert_array_equal(mod.run({"x": x})[0], want)


def test_the_control_reads_as_many_bytes_of_other_memory():
    """Each kernel's control slices match its weight views in size, lie inside the other
    buffer, and wrap around it when the weights outgrow it."""
    views = [[np.zeros(10, np.float32)], [], [np.zeros(6, np.float32), np.zeros(8, np.float32)]]
    other = np.arange(16, dtype=np.float32)
    got = other_views(views, other)
    assert [[s.size for s in mine] for mine in got] == [[10], [], [6, 8]]
    assert [s[0] for mine in got for s in mine] == [0.0, 10.0, 0.0]  # the 8 wrapped to the start
    assert all(np.shares_memory(s, other) for mine in got for s in mine)
