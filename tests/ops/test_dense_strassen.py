"""One level of Strassen as dense's "strassen" algorithm (ops/dense_strassen.py): the weight
transform and the reference against numpy, the compiled kernel (alone, with a fused bias +
relu, random knob configs) against float64 numpy, the choice and its default, and a whole
model compiled with a record that picks it, against onnxruntime.

Tolerance: max |err| / max |ref| < 1e-5 (fp32 over K <= 256 terms, a level of quadrant sums
adds ~1.2-1.5x rounding, ops/dense_strassen.py)."""

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
from tensorir.ops import dense_strassen as st
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.kernel import build_kernel, kernel_space, scratch_arrays
from tensorir.target import get_target

HOST = get_target("host")
TOL = 1e-5


def _check(got: np.ndarray, ref: np.ndarray) -> None:
    err = float(np.max(np.abs(got - ref))) / float(np.max(np.abs(ref)))
    assert err < TOL, f"relative error {err}"


def _operands(m: int, k: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)


def _run(op: str, ins: list[np.ndarray], attrs: dict, config: dict, out_shape: tuple) -> np.ndarray:
    types = [TensorType(a.shape) for a in ins]
    func, spec = build_kernel(op, types, attrs, HOST, config=config, const_args=frozenset({1}))
    assert spec.algorithm == config["algorithm"]
    args = [spec.transforms[i](a) if i in spec.transforms else a for i, a in enumerate(ins)]
    out = np.zeros(out_shape, np.float32)
    get_backend(HOST).jit(func, HOST)(*args, out, *scratch_arrays(func))
    return out


def test_transform_and_reference_are_the_product():
    x, w = _operands(6, 8, 10)
    bt = st.weight_transform(w)
    assert bt.shape == (7, 5, 4) and bt.dtype == np.float32
    np.testing.assert_allclose(bt[1], w[:5, :4])  # P1's B operand is B11 = W11^T
    np.testing.assert_allclose(st.dense_strassen(x, bt), x @ w.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m, k, n", [(8, 6, 10), (64, 32, 48), (130, 256, 98)])
def test_kernel_matches_numpy(m: int, k: int, n: int) -> None:
    x, w = _operands(m, k, n)
    got = _run("dense", [x, w], {}, {"algorithm": "strassen"}, (m, n))
    _check(got, x.astype(np.float64) @ w.T.astype(np.float64))


def test_fused_bias_relu():
    x, w = _operands(32, 64, 48, seed=1)
    b = np.random.default_rng(2).standard_normal((1, 48)).astype(np.float32)
    body = FusedBody((Step("dense", (), (0, 1)), Step("add", (), (3, 2)), Step("relu", (), (4,))), 3, 0)
    got = _run("fused", [x, w, b], {"body": body}, {"algorithm": "strassen"}, (32, 48))
    ref = np.maximum(x.astype(np.float64) @ w.T + b, 0)
    assert (got == 0).any()
    _check(got, ref)


def test_random_configs():
    x, w = _operands(64, 96, 80, seed=3)
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    space = kernel_space("dense", [TensorType(x.shape), TensorType(w.shape)], {}, HOST)
    assert space.algorithms == ["direct", "strassen"]
    names = {k.name for k in space.knobs("strassen")}
    assert {"gemm_rows", "gemm_col_vectors"} <= names
    rng = random.Random(0)
    for _ in range(4):
        cfg = {k.name: rng.choice(k.choices) for k in space.knobs("strassen")} | {"algorithm": "strassen"}
        _check(_run("dense", [x, w], {}, cfg, ref.shape), ref)


def test_choices_and_default():
    assert st.algorithm_choices((64, 32), (48, 32), True)[0] == ["direct", "strassen"]
    assert st.algorithm_choices((64, 32), (48, 32), False) == (["direct"], "direct")  # weight not constant
    assert st.algorithm_choices((63, 32), (48, 32), True) == (["direct"], "direct")  # odd M
    assert st.algorithm_choices((64, 31), (48, 31), True) == (["direct"], "direct")  # odd K
    assert st.algorithm_choices((64, 32), (48, 32), True)[1] == "direct"  # small: direct
    # the measured cut-off (strassen_default): BERT-base's FFN at 512 tokens
    assert st.algorithm_choices((512, 3072), (768, 3072), True)[1] == "strassen"  # down: 0.87-0.94x
    assert st.algorithm_choices((512, 768), (3072, 768), True)[1] == "direct"  # up: 1.00-1.03x
    assert st.algorithm_choices((1024, 1024), (1024, 1024), True)[1] == "direct"  # 0.97-1.01x
    assert st.algorithm_choices((2048, 2048), (2048, 2048), True)[1] == "strassen"  # 0.90-0.92x
    assert st.algorithm_choices((256, 2048), (2048, 2048), True)[1] == "direct"  # 1.15x: too few rows


def _matmul_model(m: int, k: int, n: int) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(4).standard_normal((k, n)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    graph = helper.make_graph(
        nodes,
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_model_with_a_strassen_record_matches_onnxruntime():
    from autotune.task import extract_tasks, load_graph

    model = _matmul_model(96, 128, 64)
    (task,) = extract_tasks(load_graph(model), HOST)
    assert "strassen" in task.space(HOST).algorithms
    mod = tir.compile(model, records={task.key: {"algorithm": "strassen"}})
    assert [k.get("algorithm") for k in mod.manifest["kernels"]] == ["strassen"]
    x = {"x": np.random.default_rng(5).standard_normal((96, 128)).astype(np.float32)}
    (ref,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)
    (got,) = mod.run(x)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
