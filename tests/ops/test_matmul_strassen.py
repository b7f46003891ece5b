"""One level of Strassen as the "strassen" algorithm of a matmul of two run-time operands
(ops/matmul_strassen.py: B's seven operands formed in the kernel): the compiled kernel
(batch dims, broadcast operands, a fused epilogue, random knob configs) against float64
numpy, which products may choose it and the default, and a whole model compiled with a
record that picks it, against onnxruntime.

Tolerance: max |err| / max |ref| < 1e-5, as tests/ops/test_dense_strassen.py."""

from __future__ import annotations

import random

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tensorir as tir
from tensorir.backends import get_backend
from tensorir.graph.types import TensorType
from tensorir.ops import matmul_strassen as ms
from tensorir.ops.fused import FusedBody, Step
from tensorir.ops.kernel import build_kernel, kernel_space, scratch_arrays
from tensorir.ops.registry import get_op
from tensorir.target import get_target

HOST = get_target("host")
TOL = 1e-5


def _check(got: np.ndarray, ref: np.ndarray) -> None:
    err = float(np.max(np.abs(got - ref))) / float(np.max(np.abs(ref)))
    assert err < TOL, f"relative error {err}"


def _rand(*shapes: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _run(op: str, ins: list[np.ndarray], attrs: dict, config: dict) -> tuple[np.ndarray, list[str]]:
    """(the kernel's output, its parameters' names and shapes) under `config`."""
    types = [TensorType(a.shape) for a in ins]
    func, spec = build_kernel(op, types, attrs, HOST, config=config, const_args=frozenset())
    assert spec.algorithm == config["algorithm"] and not spec.transforms
    (out_type,) = get_op(op).infer(types, attrs)
    out = np.zeros(out_type.shape, np.float32)
    get_backend(HOST).jit(func, HOST)(*ins, out, *scratch_arrays(func))
    return out, [f"{b.name}{list(b.shape)}" for b in func.params]


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [
        ((8, 6), (6, 10)),
        ((3, 64, 32), (3, 32, 48)),
        ((64, 32), (2, 32, 48)),  # A broadcast over B's batch
        ((2, 1, 64, 32), (3, 32, 48)),  # both broadcast
        ((130, 96), (96, 98)),
    ],
)
def test_kernel_matches_numpy(a_shape: tuple, b_shape: tuple) -> None:
    a, b = _rand(a_shape, b_shape)
    got, params = _run("matmul", [a, b], {}, {"algorithm": "strassen"})
    _check(got, np.matmul(a.astype(np.float64), b.astype(np.float64)))
    k2, n2 = b_shape[-2] // 2, b_shape[-1] // 2
    assert f"strassen_b{[*b_shape[:-2], 7, k2, n2]}" in params  # B's operands: scratch of the kernel


def test_fused_scale_mask_relu():
    a, b, mask = _rand((2, 32, 16), (2, 16, 24), (1, 32, 24), seed=1)
    scale = np.array(0.25, np.float32)
    steps = (
        Step("matmul", (), (0, 1)),
        Step("mul", (), (4, 2)),
        Step("add", (), (5, 3)),
        Step("relu", (), (6,)),
    )
    got, _ = _run("fused", [a, b, scale, mask], {"body": FusedBody(steps, 4, 0)}, {"algorithm": "strassen"})
    assert (got == 0).any()
    _check(got, np.maximum(np.matmul(a.astype(np.float64), b) * 0.25 + mask, 0))


def test_random_configs():
    a, b = _rand((2, 64, 96), (2, 96, 80), seed=3)
    ref = np.matmul(a.astype(np.float64), b)
    space = kernel_space("matmul", [TensorType(a.shape), TensorType(b.shape)], {}, HOST)
    assert space.algorithms == ["direct", "strassen"]
    rng = random.Random(0)
    for _ in range(4):
        cfg = {k.name: rng.choice(k.choices) for k in space.knobs("strassen")} | {"algorithm": "strassen"}
        _check(_run("matmul", [a, b], {}, cfg)[0], ref)


def test_choices_and_default():
    assert ms.algorithm_choices((64, 32), (32, 48))[0] == ["direct", "strassen"]
    assert ms.algorithm_choices((63, 32), (32, 48)) == (["direct"], "direct")  # odd M
    assert ms.algorithm_choices((64, 31), (31, 48)) == (["direct"], "direct")  # odd K
    assert ms.algorithm_choices((64, 32), (32, 47)) == (["direct"], "direct")  # odd N
    assert ms.algorithm_choices((32,), (32, 48)) == (["direct"], "direct")  # 1-D
    assert ms.algorithm_choices((64, 32), (32, 48))[1] == "direct"  # small: direct
    # the measured cut-off (dense_strassen.strassen_default, runtime_b)
    assert ms.algorithm_choices((12, 512, 64), (12, 64, 512))[1] == "direct"  # BERT QK^T: 1.52-1.57x
    assert ms.algorithm_choices((1024, 1024), (1024, 1024))[1] == "direct"  # 0.97-1.00x
    assert ms.algorithm_choices((4096, 1024), (1024, 1024))[1] == "strassen"  # 0.93x
    assert ms.algorithm_choices((2048, 2048), (2048, 2048))[1] == "strassen"  # 0.89x
    space = kernel_space("matmul", [TensorType((63, 32)), TensorType((32, 48))], {}, HOST)
    assert "strassen" not in space.algorithms


def test_model_with_a_strassen_record_matches_onnxruntime():
    from autotune.task import extract_tasks, load_graph

    shapes = {"a": [2, 64, 32], "b": [2, 32, 48], "y": [2, 64, 48]}
    io = {n: helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()}
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "mm", [io["a"], io["b"]], [io["y"]]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    (task,) = extract_tasks(load_graph(model), HOST)
    assert task.op == "matmul" and task.space(HOST).algorithms == ["direct", "strassen"]
    mod = tir.compile(model, records={task.key: {"algorithm": "strassen"}})
    assert [k.get("algorithm") for k in mod.manifest["kernels"]] == ["strassen"]
    a, b = _rand((2, 64, 32), (2, 32, 48), seed=5)
    (ref,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"a": a, "b": b}
    )
    (got,) = mod.run({"a": a, "b": b})
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
