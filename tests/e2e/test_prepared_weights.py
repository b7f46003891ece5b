"""Winograd weights prepared at start-up (tensorir/compiler_prepare.py): a CPU build stores
the packed 3x3 weights, not U = G w G^T (alpha^2 / 9 times larger), and tir_create runs one
kernel per transformed constant that writes U into the prepared block the convs read."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorir as tir
from tensorir.cli import main
from tensorir.compiler_link import entry_module_ir
from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.ops.layout import pack_weight
from tensorir.passes.memory_plan import ALIGN
from tensorir.pipeline import compile_graph, compile_model
from tests.schedule.test_winograd_nchwc import TOL

X = (1, 32, 16, 16)
# conv 3x3 32 -> 64 at 16x16 (pads 1): F(4x4); 64 -> 64 unpadded to 14x14, then 64 -> 64 at
# 14x14 (pads 1): F(2x2) (choose_winograd_m's defaults); each weight its own initializer
CONVS = [("w1", (64, 32), True, 1, 4), ("w2", (64, 64), True, 0, 2), ("w3", (64, 64), False, 1, 2)]


def _aligned(nbytes: int) -> int:
    return nbytes + (-nbytes) % ALIGN


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "x"
    for k, (w, (m, c), bias, pad, _) in enumerate(CONVS):
        inits.append(numpy_helper.from_array(rng.uniform(-0.1, 0.1, (m, c, 3, 3)).astype(np.float32), w))
        ins = [x, w]
        if bias:
            inits.append(numpy_helper.from_array(rng.uniform(-1, 1, m).astype(np.float32), f"b{k}"))
            ins.append(f"b{k}")
        nodes.append(helper.make_node("Conv", ins, [f"c{k}"], pads=[pad] * 4))
        nodes.append(helper.make_node("Relu", [f"c{k}"], [f"r{k}"]))
        x = f"r{k}"
    graph = helper.make_graph(
        nodes,
        "wino",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, X)],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 64, 14, 14])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


MODEL = _model()
FEEDS = {"x": np.random.default_rng(1).standard_normal(X).astype(np.float32)}


@pytest.fixture(scope="module", params=["embedded", "external"])
def compiled(request):
    return request.param, tir.compile(MODEL, weights=request.param)


def _ort() -> np.ndarray:
    sess = ort.InferenceSession(MODEL.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, FEEDS)[0]


def test_outputs_match_onnxruntime(compiled):
    _, mod = compiled
    assert [k.get("algorithm") for k in mod.manifest["kernels"] if "algorithm" in k] == [
        f"winograd{m}" for *_, m in CONVS
    ]
    ref = _ort()
    for threads in (0, 1):
        mod.set_num_threads(threads)
        (y,) = mod.run(FEEDS)
        assert np.abs(y - ref).max() / np.abs(ref).max() <= TOL[4]


def test_weights_hold_the_packed_weights_and_tir_create_prepares_u(compiled, tmp_path):
    weights, mod = compiled
    m = mod.manifest
    stored = sum(_aligned(numpy_helper.to_array(t).nbytes) for t in MODEL.graph.initializer)
    assert m["weights_bytes"] == stored  # the weights as given (packed), no U
    u_bytes = [(mm + 2) ** 2 * c * k * 4 for _, (k, c), *_, mm in CONVS]
    assert m["prepared_bytes"] == sum(_aligned(n) for n in u_bytes)
    out = mod.export(tmp_path / "build")
    if weights == "external":
        assert (out / "weights.bin").stat().st_size == stored
    assert json.loads((out / "manifest.json").read_text())["prepare"] == m["prepare"]
    assert f"computes {m['prepared_bytes']} bytes of transformed weights" in (out / "model.h").read_text()

    prep = m["prepare"]
    assert [(e["op"], e["attrs"]) for e in prep] == [("winograd_weight_nchwc", {"m": mm}) for *_, mm in CONVS]
    assert prep[1]["symbol"] == prep[2]["symbol"] != prep[0]["symbol"]  # one kernel per shape and m
    assert [[kind for kind, _ in e["args"]] for e in prep] == [["weight", "prepared"]] * 3
    read = [a for k in m["kernels"] for a in k["args"] if a[0] == "prepared"]
    assert read == [e["args"][1] for e in prep]  # each conv reads the U its prepare call wrote


def test_run_profile_on_the_folder(tmp_path, capsys):
    path = tmp_path / "wino.onnx"
    onnx.save(MODEL, str(path))
    out = tmp_path / "build"
    assert main(["compile", str(path), "-o", str(out), "--weights", "external"]) == 0
    assert main(["run", str(out), "--compare-ort", "--profile"]) == 0
    text = capsys.readouterr().out
    assert "vs onnxruntime: max_abs_err=" in text and "share" in text
    assert text.count("conv2d_nchwc") + text.count("fused") >= 3


def test_create_runs_the_prepare_calls_and_destroy_frees_the_block():
    build = compile_model(MODEL)
    ir = entry_module_ir(build, embedded=True)
    create = ir[ir.index("define ptr @tir_create") :].split("\n}\n")[0]
    assert f"call ptr @malloc(i64 {build.prepared + ALIGN})" in create
    assert [line.split("(")[0].split("@")[1] for line in create.splitlines() if "call void @" in line] == [
        c.symbol for c in build.prepares
    ]
    destroy = ir[ir.index("define void @tir_destroy") :].split("\n}\n")[0]
    assert destroy.count("call void @free") == 4  # workspace, read weights, prepared block, model
    assert "call ptr @tir_prepared(ptr %m)" in ir[ir.index("define i32 @tir_run") :]


def test_a_weight_a_direct_conv_also_reads_is_stored_once():
    """The packed weight of a Winograd conv that a direct (strided) conv reads as well stays
    in the blob, once; only U moves to the prepared block. Blocks of 16, as wide as AVX-512's
    vector: a narrower output block would make the strided conv `direct_wide`, which widens
    its own copy of the weight (ops/conv_wide.py)."""
    w = np.random.default_rng(2).uniform(-1, 1, (64, 64, 3, 3)).astype(np.float32)
    wp = pack_weight(w, 16, 16, False)
    g = Graph("shared")
    x = g.add_input("x", TensorType((1, 4, 14, 14, 16)))
    w = g.add_const(wp, "w")
    (a,) = g.add_node("conv2d_nchwc", [x, w], {"pads": (1, 1, 1, 1)})
    (b,) = g.add_node("conv2d_nchwc", [x, w], {"pads": (1, 1, 1, 1), "strides": (2, 2)})
    g.set_outputs([("a", a), ("b", b)])
    m = compile_graph(g, "host").manifest
    wino, direct = m["kernels"]
    assert (wino["algorithm"], direct["algorithm"]) == ("winograd2", "direct")
    assert m["weights_bytes"] == wp.nbytes and direct["args"][1] == ["weight", 0]
    assert m["prepare"][0]["args"] == [["weight", 0], ["prepared", 0]] and wino["args"][1] == ["prepared", 0]


def test_a_loop_body_prepares_into_the_enclosing_block():
    """A Winograd conv inside an ONNX Loop body: the body's prepare call joins the model's,
    its weight and U rebased into the model's blob and prepared block."""
    shape, h = [1, 32, 16, 16], helper
    weight = np.random.default_rng(3).uniform(-0.1, 0.1, (32, 32, 3, 3)).astype(np.float32)
    body = h.make_graph(
        [
            h.make_node("Conv", ["acc", "W"], ["c"], pads=[1, 1, 1, 1]),
            h.make_node("Relu", ["c"], ["acc_out"]),
            h.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [
            h.make_tensor_value_info("i", TensorProto.INT64, []),
            h.make_tensor_value_info("cond", TensorProto.BOOL, []),
            h.make_tensor_value_info("acc", TensorProto.FLOAT, shape),
        ],
        [
            h.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            h.make_tensor_value_info("acc_out", TensorProto.FLOAT, shape),
        ],
    )
    graph = h.make_graph(
        [h.make_node("Loop", ["M", "c0", "x"], ["y"], body=body)],
        "g",
        [
            h.make_tensor_value_info("M", TensorProto.INT64, []),
            h.make_tensor_value_info("c0", TensorProto.BOOL, []),
            h.make_tensor_value_info("x", TensorProto.FLOAT, shape),
        ],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        initializer=[numpy_helper.from_array(weight, "W")],
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    mod = tir.compile(model)
    (prep,) = mod.manifest["prepare"]
    assert prep["symbol"].startswith("tir_l0_prep") and prep["attrs"] == {"m": 4}
    assert mod.manifest["prepared_bytes"] == 36 * 32 * 32 * 4
    feeds = {"M": np.array(3, np.int64), "c0": np.array(True), "x": FEEDS["x"]}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ours,), (theirs,) = mod.run(feeds), sess.run(None, feeds)
    assert np.abs(ours - theirs).max() / np.abs(theirs).max() <= TOL[4]


def test_opencl_builds_keep_compile_time_transforms():
    """A GPU's Winograd kernel reads U from the blob, transformed at compile time (no
    prepared block: the OpenCL runtime has no prepare step)."""
    target = "android-arm64+opencl:adreno640"
    kernels = compile_model(MODEL, target).manifest["kernels"]
    records = {k["workload"]: {"algorithm": "winograd2"} for k in kernels if "algorithm" in k}
    m = compile_model(MODEL, target, records=records).manifest
    assert [k.get("algorithm") for k in m["kernels"] if "algorithm" in k] == ["winograd2"] * 3
    assert "prepare" not in m and "prepared_bytes" not in m
    biases = 2 * _aligned(64 * 4)
    assert m["weights_bytes"] == sum(_aligned(16 * c * k * 4) for _, (k, c), *_ in CONVS) + biases


def test_weights_only_the_prepare_calls_read_go_last_and_back_to_the_system():
    """MODEL's three packed 3x3 weights feed only the prepare calls: the blob holds the biases
    first and those weights after them, and tir_create hands their whole pages back
    (madvise MADV_DONTNEED) once U is made: read back from a weights.bin build, they are zero
    pages now, and the model still matches onnxruntime."""
    import ctypes

    build = compile_model(MODEL)
    m = build.manifest
    inits = MODEL.graph.initializer
    packed = [_aligned(numpy_helper.to_array(t).nbytes) for t in inits if t.name.startswith("w")]
    lo, hi = build.released
    assert (hi - lo, hi) == (sum(packed), m["weights_bytes"]) and m["weights_released_bytes"] == hi - lo
    assert [e["args"][0][1] for e in m["prepare"]] == [lo, lo + packed[0], lo + packed[0] + packed[1]]
    read = [a[1] for k in m["kernels"] for a in k["args"] if a[0] == "weight"]
    assert read and max(read) < lo  # the model's kernels read only what stays
    ir = entry_module_ir(build, embedded=False)
    create = ir[ir.index("define ptr @tir_create") :].split("\n}\n")[0]
    assert "call i32 @madvise(ptr %rel.p, i64 %rel.n, i32 4)" in create

    mod = tir.compile(MODEL, weights="external")
    base = mod.lib.tir_weights
    base.restype, base.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
    page = 64 << 10
    first = (base(mod.handle) + lo + page - 1) // page * page
    tail = np.ctypeslib.as_array((ctypes.c_uint8 * page).from_address(first))
    assert not tail.any()  # released: the pages come back zero
    (y,) = mod.run(FEEDS)
    ref = _ort()
    assert np.abs(y - ref).max() / np.abs(ref).max() <= TOL[4]
