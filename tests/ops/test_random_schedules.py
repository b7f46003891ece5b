"""Random legal schedules on every op family with a compute definition, compiled and run
against the numpy references.

A schedule drawn by hypothesis may inline elementwise intermediates, then per stage: split
a data axis (any factor, dividing or not), permute the data axes, vectorize an innermost
constant-extent data loop, unroll a small loop, parallelize the outermost data loop. All of
these keep the computation's meaning, so any mismatch is a lowering or codegen bug.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorir.graph.types import TensorType, np_dtype
from tensorir.ops.kernel import op_kernel, scratch_arrays
from tensorir.ops.registry import all_ops, get_op
from tensorir.runtime.jit import compile_host
from tensorir.schedule import MAX_LANES, Schedule, Stage

Draw = Callable[[st.SearchStrategy], object]
Sample = tuple[list[np.ndarray], dict]
RNG = np.random.default_rng(0)


def _f(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def _b(*shape: int) -> np.ndarray:
    return RNG.random(shape) < 0.5


# ---- sample inputs per op family --------------------------------------------------------------
BINARY = "add sub mul div pow mod maximum minimum equal less less_equal greater greater_equal prelu".split()
LOGIC = "logical_and logical_or logical_xor".split()
UNARY = (
    "sqrt exp log abs neg reciprocal floor ceil erf tanh sign sin cos round relu leaky_relu elu selu "
    "sigmoid hard_sigmoid hard_swish softplus softsign gelu mish"
).split()
REDUCE = "reduce_sum reduce_mean reduce_max reduce_min reduce_prod reduce_l1 reduce_l2".split()
REDUCE += "reduce_sum_square reduce_log_sum reduce_log_sum_exp".split()


def _elementwise(op: str) -> Sample:
    if op in LOGIC:
        return [_b(3, 1, 17), _b(5, 17)], {}
    if op == "logical_not":
        return [_b(4, 19)], {}
    if op == "where":
        return [_b(3, 1, 17), _f(5, 17), _f(3, 5, 1)], {}
    if op == "cast":
        return [_f(4, 19, lo=-50, hi=50)], {"to": "int32"}
    if op == "clip":
        return [_f(4, 19)], {"min": -0.5, "max": 1.0}
    if op in BINARY:
        lo = 0.5 if op in ("div", "pow", "mod") else -2.0
        return [_f(3, 1, 17, lo=lo), _f(5, 17, lo=lo)], {"fmod": 1} if op == "mod" else {}
    positive = op in ("sqrt", "log", "reciprocal")
    return [_f(4, 19, lo=0.1 if positive else -3, hi=3)], {}


def _reduction(op: str) -> Sample:
    x = _f(3, 5, 32, lo=0.1 if op == "reduce_log_sum" else -2)  # 32: max/min split in lanes
    if op in ("argmax", "argmin"):
        return [x], {"axis": 1, "keepdims": 0, "select_last_index": 0}
    if op == "cumsum":
        return [x], {"axis": 2, "exclusive": 1, "reverse": 0}
    if op == "topk":
        return [x], {"k": 2, "axis": 1, "largest": 1, "sorted": 1}
    return [x], {"axes": (0, 2), "keepdims": 1}


def _rowwise(op: str) -> Sample:
    x = _f(2, 3, 4, 32)
    c = [_f(3), _f(3), _f(3), _f(3, lo=0.5)]
    return {
        "softmax": ([x], {"axis": 3}),
        "log_softmax": ([x], {"axis": 2}),
        "batch_norm": ([x, *c], {"epsilon": 1e-3}),
        "batch_norm_training": ([x, *c], {"epsilon": 1e-3, "momentum": 0.9}),
        "instance_norm": ([x, *c[:2]], {"epsilon": 1e-3}),
        "layer_norm": ([x, _f(4, 32), _f(32)], {"axis": 2, "epsilon": 1e-3}),
    }[op]


def _conv_matmul(op: str) -> Sample:
    spatial = {"strides": (1, 1), "pads": (1, 0, 1, 1), "dilations": (1, 1)}
    return {
        "conv": ([_f(1, 4, 6, 7), _f(6, 4, 3, 3), _f(6)], {**spatial, "group": 1}),
        "matmul": ([_f(2, 5, 7), _f(7, 6)], {}),
        "gemm": ([_f(7, 5), _f(6, 7), _f(6)], {"alpha": 0.5, "beta": 2.0, "trans_a": 1, "trans_b": 1}),
    }[op]


GROUPS: dict[str, tuple[list[str], Callable[[str], Sample]]] = {
    "binary": ([*BINARY, *LOGIC, "where"], _elementwise),
    "unary": ([*UNARY, "logical_not", "cast", "clip"], _elementwise),
    "reduce": ([*REDUCE, "argmax", "argmin", "cumsum", "topk"], _reduction),
    "rowwise": (
        ["softmax", "log_softmax", "batch_norm", "batch_norm_training", "instance_norm", "layer_norm"],
        _rowwise,
    ),
    "conv_matmul": (["conv", "matmul", "gemm"], _conv_matmul),
}


# ---- the random schedule ---------------------------------------------------------------------------
def random_schedule(draw: Draw) -> Callable[[Schedule, object, object], None]:
    def schedule(s: Schedule, outputs: object, target: object) -> None:
        for stage in s.stages:
            if not stage.is_output and not stage.op.reduce_axis and draw(st.booleans()):
                stage.compute_inline()
        for stage in s.stages:
            if not stage.inlined:
                random_loops(draw, stage)

    return schedule


def random_loops(draw: Draw, stage: Stage) -> None:
    """split / reorder / vectorize / unroll / parallel, each with probability 1/2, all legal."""
    data = [a for a in stage.leaves if a.kind == "data"]
    if data and draw(st.booleans()):
        axis = draw(st.sampled_from(data))
        stage.split(axis, factor=draw(st.integers(1, axis.extent + 1)))
    data = [a for a in stage.leaves if a.kind == "data"]
    if len(data) > 1 and draw(st.booleans()):
        stage.reorder(*draw(st.permutations(data)))
    inner, outer = stage.leaves[-1], stage.leaves[0]
    if inner.kind == "data" and inner.extent <= MAX_LANES and draw(st.booleans()):
        stage.vectorize(inner)
    small = [a for a in stage.leaves if a.extent <= 8 and a not in stage.kinds]
    if small and draw(st.booleans()):
        stage.unroll(draw(st.sampled_from(small)))
    if outer.kind == "data" and outer not in stage.kinds and draw(st.booleans()):
        stage.parallel(outer)


def run_with_schedule(op: str, ins: list[np.ndarray], attrs: dict, draw: Draw) -> list[np.ndarray]:
    in_types = [TensorType.of(a) for a in ins]
    func = op_kernel(op, in_types, attrs, "host", schedule=random_schedule(draw))
    outs = [np.empty(t.shape, np_dtype(t.dtype)) for t in get_op(op).infer(in_types, attrs)]
    compile_host(func)(*ins, *outs, *scratch_arrays(func))
    return outs


def check_group(group: str, data: st.DataObject) -> None:
    ops, sample = GROUPS[group]
    op = data.draw(st.sampled_from(ops), label="op")
    ins, attrs = sample(op)
    got = run_with_schedule(op, ins, attrs, data.draw)
    for g, w in zip(got, get_op(op).run_reference(ins, attrs), strict=True):
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True, err_msg=op)
        else:
            np.testing.assert_array_equal(g, w, err_msg=op)


SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@pytest.mark.parametrize("group", list(GROUPS))
@SETTINGS
@given(data=st.data())
def test_random_schedule(group: str, data: st.DataObject) -> None:
    check_group(group, data)


def test_every_sampled_op_has_a_compute() -> None:
    with_compute = {n for n, o in all_ops().items() if "compute" in o.extra}
    sampled = {op for ops, _ in GROUPS.values() for op in ops}
    assert sampled <= with_compute, sorted(sampled - with_compute)
