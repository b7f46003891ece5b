"""One level of Strassen as the 1x1 conv's "strassen" algorithm (ops/conv_strassen.py): the
weight transform and reference against conv2d_nchwc's, the compiled kernel (packed layouts
with different input and output blocks, batch 2, bias, a fused residual add + relu, random
knob configs) against float64 numpy, which convs may choose it, the lowered IR's stages, and
a whole model compiled with a record that picks it, against onnxruntime.

Tolerance: max |err| / max |ref| < 1e-5, as tests/ops/test_dense_strassen.py."""

from __future__ import annotations

import random

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorir as tir
from tensorir.backends import get_backend
from tensorir.graph.types import TensorType
from tensorir.loop.printer import to_text
from tensorir.ops import conv_strassen as cs
from tensorir.ops.conv_algorithms import algorithm_choices
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.kernel import build_kernel, kernel_space, scratch_arrays
from tensorir.ops.layout import pack_array, pack_weight, unpack_array
from tensorir.ops.registry import get_op
from tensorir.target import get_target

HOST = get_target("host")
TOL = 1e-5
ONE = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}


def _check(got: np.ndarray, ref: np.ndarray) -> None:
    err = float(np.max(np.abs(got - ref))) / float(np.max(np.abs(ref)))
    assert err < TOL, f"relative error {err}"


def _case(n: int, c: int, h: int, w: int, m: int, ib: int, ob: int, seed: int = 0) -> list[np.ndarray]:
    """Packed (x, w, b) of a 1x1 conv, C -> M channels, input block ib, output block ob."""
    rng = np.random.default_rng([seed, n, c, h, w, m])
    x = pack_array(rng.standard_normal((n, c, h, w)).astype(np.float32), ib)
    wp = pack_weight(rng.standard_normal((m, c, 1, 1)).astype(np.float32), ib, ob, False)
    return [x, wp, rng.standard_normal((m // ob, ob)).astype(np.float32)]


def _ref(x: np.ndarray, wp: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The float64 conv, packed in the output block."""
    xu = unpack_array(x).astype(np.float64)
    w = _dense_weight(wp)
    y = np.einsum("nchw,mc->nmhw", xu, w) + b.reshape(1, -1, 1, 1)
    return pack_array(y, wp.shape[-1])


def _dense_weight(wp: np.ndarray) -> np.ndarray:
    """The packed 1x1 weight as a dense's (M, C), float64."""
    mo, cb, _, _, ib, ob = wp.shape
    return wp[:, :, 0, 0].transpose(0, 3, 1, 2).reshape(mo * ob, cb * ib).astype(np.float64)


def _run(op: str, ins: list[np.ndarray], attrs: dict, config: dict) -> tuple[np.ndarray, str]:
    """The kernel built under `config`, run on `ins` (weights transformed): (output, IR text)."""
    types = [TensorType(a.shape) for a in ins]
    func, spec = build_kernel(op, types, attrs, HOST, config=config, const_args=frozenset({1, 2}))
    assert spec.algorithm == config["algorithm"]
    args = [spec.transforms[i](a) if i in spec.transforms else a for i, a in enumerate(ins)]
    (out_type,) = get_op(op).infer(types, attrs)
    out = np.zeros(out_type.shape, np.float32)
    get_backend(HOST).jit(func, HOST)(*args, out, *scratch_arrays(func))
    return out, to_text(func)


def test_transform_and_reference_are_the_conv():
    x, wp, b = _case(2, 64, 6, 5, 96, 8, 16)
    b7 = cs.weight_transform(wp)
    assert b7.shape == (7, 32, 48) and b7.dtype == np.float32
    np.testing.assert_allclose(b7[1], _dense_weight(wp)[:48, :32].T)  # P1's B operand is B11
    got = get_op(cs.OP).run_reference([x, b7, b], {"ob": 16})[0]
    np.testing.assert_allclose(
        got, get_op("conv2d_nchwc").run_reference([x, wp, b], ONE)[0], rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize(
    "n, c, h, w, m, ib, ob",
    [
        (1, 32, 4, 6, 32, 16, 16),
        (2, 64, 6, 5, 96, 8, 16),  # batch 2, odd W, input block 8
        (1, 64, 8, 8, 128, 4, 32),  # blocks 4 -> 32
        (1, 128, 14, 14, 64, 16, 8),
    ],
)
def test_kernel_matches_numpy(n: int, c: int, h: int, w: int, m: int, ib: int, ob: int) -> None:
    ins = _case(n, c, h, w, m, ib, ob)
    got, _ = _run("conv2d_nchwc", ins, ONE, {"algorithm": "strassen"})
    _check(got, _ref(*ins))


def test_fused_residual_relu():
    x, wp, b = _case(1, 64, 8, 6, 64, 16, 16, seed=1)
    body = FusedBody(
        (
            Step("conv2d_nchwc", tuple(sorted(ONE.items())), (0, 1, 2)),
            Step("add", (), (4, 3)),
            Step("relu", (), (5,)),
        ),
        4,
        0,
    )
    res = np.random.default_rng(2).standard_normal(x.shape).astype(np.float32)
    got, _ = _run("fused", [x, wp, b, res], {"body": body}, {"algorithm": "strassen"})
    assert (got == 0).any()
    _check(got, np.maximum(_ref(x, wp, b) + res, 0))


def test_random_configs():
    ins = _case(1, 64, 10, 10, 96, 16, 16, seed=3)
    ref = _ref(*ins)
    space = kernel_space("conv2d_nchwc", [TensorType(a.shape) for a in ins], ONE, HOST)
    assert space.algorithms == ["direct", "im2col", "strassen"]
    names = {k.name for k in space.knobs("strassen")}
    assert {"gemm_rows", "gemm_col_vectors", "gemm_pack_b"} <= names
    rng = random.Random(0)
    for _ in range(4):
        cfg = {k.name: rng.choice(k.choices) for k in space.knobs("strassen")} | {"algorithm": "strassen"}
        _check(_run("conv2d_nchwc", ins, ONE, cfg)[0], ref)


def _choices(x_shape: tuple, w_shape: tuple, attrs: dict = ONE, const: bool = True) -> list[str]:
    return algorithm_choices(x_shape, w_shape, attrs, const)[0]


def test_which_convs_may_choose_it():
    x, w = (1, 4, 56, 56, 16), (8, 4, 1, 1, 16, 16)
    assert _choices(x, w) == ["direct", "im2col", "strassen"]
    assert "strassen" not in _choices((1, 4, 7, 7, 16), w)  # odd H: a row half is not whole rows
    assert "strassen" in _choices((1, 4, 8, 7, 16), w)  # odd W is fine
    assert "strassen" not in _choices((1, 3, 56, 56, 16), (8, 3, 1, 1, 16, 16))  # C/ib odd
    assert "strassen" not in _choices(x, (3, 4, 1, 1, 16, 16))  # M/ob odd
    assert "strassen" not in _choices(x, (8, 4, 3, 3, 16, 16))  # 3x3
    assert "strassen" not in _choices(x, w, ONE | {"strides": (2, 2)})
    assert "strassen" not in _choices(x, w, ONE | {"pads": (1, 1, 1, 1)})
    assert "strassen" not in _choices(x, w, const=False)  # transformed at compile time
    # the default: dense's measured rule on (pixels, M, C)
    assert algorithm_choices(x, w, ONE, True)[1] == "direct"  # ResNet-50's 56x56x64->128
    wide = (128, 128, 1, 1, 16, 16)  # 2048 -> 2048 channels
    assert algorithm_choices((1, 128, 32, 32, 16), wide, ONE, True)[1] == "strassen"  # 0.55-0.75x
    assert algorithm_choices((1, 128, 16, 16, 16), wide, ONE, True)[1] == "direct"  # 1.06x: 256 pixels


def test_lowered_kernel_shows_its_stages():
    # text of a 16-lane target on any host: built, not run (the other tests run it here)
    types = [TensorType(a.shape) for a in _case(1, 32, 4, 6, 32, 16, 16)]
    v4 = get_target("x86_64-v4")
    func, _ = build_kernel(
        "conv2d_nchwc", types, ONE, v4, config={"algorithm": "strassen"}, const_args=frozenset({1, 2})
    )
    text = to_text(func)
    head, *lines = text.splitlines()
    assert head == (
        "def conv2d_strassen_nchwc(in0: f32[1,2,4,6,16], in1: f32[7,16,16], in2: f32[2,16], "
        "conv2d_strassen_nchwc: f32[1,2,4,6,16], strassen_x: f32[7,12,16], strassen_p: f32[7,12,16]):"
    )
    roots = [line.strip() for line in lines if line.startswith("  for ")]
    assert len(roots) == 3  # x7, the batched product, the C combination
    assert "select" not in text  # the quadrant selects folded away
    # x7's first operand A11 + A22 through the packed index: + 2 image rows (192) + 1 block (384)
    assert (
        "    strassen_x[ramp(p*16, 1, 16)] = in0[ramp(p*16, 1, 16)] + in0[ramp(p*16 + 576, 1, 16)]" in lines
    )
    product = text.split(roots[1])[1].split(roots[2])[0]
    assert 'strassen_acc = allocate(f32[1,6,16], "local")' in product and "strassen_p[" in product
    combine = text.split(roots[2])[1]
    assert combine.count("conv2d_strassen_nchwc[") == 4 and combine.count("in2[") == 4  # 4 quadrants + bias


def _conv_model(c: int, m: int, h: int, w: int) -> onnx.ModelProto:
    """x -> 1x1 conv (bias) -> + x -> relu: the residual add and relu fuse into the conv."""
    rng = np.random.default_rng(4)
    inits = [
        numpy_helper.from_array((rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
        helper.make_node("Add", ["c", "x"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c, h, w]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "conv1x1", io[:1], io[1:], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_model_with_a_strassen_record_matches_onnxruntime():
    from autotune.task import extract_tasks, load_graph

    model = _conv_model(64, 64, 10, 12)
    tasks = [t for t in extract_tasks(load_graph(model), HOST) if "strassen" in t.space(HOST).algorithms]
    (task,) = tasks
    assert task.space(HOST).algorithms == ["direct", "im2col", "strassen"]
    mod = tir.compile(model, records={task.key: {"algorithm": "strassen"}})
    assert [k.get("algorithm") for k in mod.manifest["kernels"] if k.get("algorithm")] == ["strassen"]
    x = {"x": np.random.default_rng(5).standard_normal((1, 64, 10, 12)).astype(np.float32)}
    (ref,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)
    (got,) = mod.run(x)
    assert (got == 0).any()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
