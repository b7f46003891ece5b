"""fold_batchnorm: into conv weights and bias, into dense + bias add, else mul + add."""

from __future__ import annotations

import numpy as np

from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType
from tensorir.passes.fold_batchnorm import fold_batchnorm

from .helpers import assert_same_results, check_pass, const


def _bn_params(g: Graph, c: int, seed: int = 10) -> list[Value]:
    rng = np.random.default_rng(seed)
    scale, bias, mean = (rng.standard_normal(c).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2.0, c).astype(np.float32)
    return [g.add_const(a) for a in (scale, bias, mean, var)]


def _conv_bn(bias: bool = False, extra_use: bool = False, const_w: bool = True, group: int = 1) -> Graph:
    g = Graph("conv_bn")
    x = g.add_input("x", TensorType((1, 4, 6, 6)))
    w = const(g, (4, 4 // group, 3, 3), 1) if const_w else g.add_input("w", TensorType((4, 4 // group, 3, 3)))
    ins = [x, w, *([const(g, (4,), 2)] if bias else [])]
    (y,) = g.add_node("conv", ins, {"pads": (1, 1, 1, 1), "group": group})
    (z,) = g.add_node("batch_norm", [y, *_bn_params(g, 4)], {"epsilon": 1e-3})
    g.set_outputs([("z", z), *([("y", y)] if extra_use else [])])
    return g


def test_conv_without_bias_gets_folded_weights_and_a_new_bias():
    check_pass(
        _conv_bn(),
        fold_batchnorm,
        """
        graph conv_bn(%x: f32[1,4,6,6]) {
          %c8 = constant f32[4,4,3,3]
          %c9 = constant f32[4] [ 0.20022777,-0.12942605, 0.39581823, 1.0157055 ]
          %10 = conv(%x, %c8, %c9) group=1 pads=(1,1,1,1) : f32[1,4,6,6]
          return %10 as z
        }
        """,
    )


def test_conv_with_bias_folds_into_both():
    check_pass(
        _conv_bn(bias=True),
        fold_batchnorm,
        """
        graph conv_bn(%x: f32[1,4,6,6]) {
          %c9 = constant f32[4,4,3,3]
          %c10 = constant f32[4] [0.02166782,0.16734727,0.6405184 ,0.54297477]
          %11 = conv(%x, %c9, %c10) group=1 pads=(1,1,1,1) : f32[1,4,6,6]
          return %11 as z
        }
        """,
    )


def test_grouped_conv_folds_per_output_channel():
    g = check_pass(
        _conv_bn(group=2),
        fold_batchnorm,
        """
        graph conv_bn(%x: f32[1,4,6,6]) {
          %c8 = constant f32[4,2,3,3]
          %c9 = constant f32[4] [ 0.20022777,-0.12942605, 0.39581823, 1.0157055 ]
          %10 = conv(%x, %c8, %c9) group=2 pads=(1,1,1,1) : f32[1,4,6,6]
          return %10 as z
        }
        """,
    )
    assert "batch_norm" not in {g.node(n).op for n in g.op_nodes()}


def test_conv_output_used_elsewhere_gives_mul_add():
    check_pass(
        _conv_bn(extra_use=True),
        fold_batchnorm,
        """
        graph conv_bn(%x: f32[1,4,6,6]) {
          %c1 = constant f32[4,4,3,3]
          %2 = conv(%x, %c1) group=1 pads=(1,1,1,1) : f32[1,4,6,6]
          %c8 = constant f32[4,1,1] [-0.94449484,-0.56771725,-0.59240323, 0.19362566]
          %c9 = constant f32[4,1,1] [ 0.20022777,-0.12942605, 0.39581823, 1.0157055 ]
          %10 = mul(%2, %c8) : f32[1,4,6,6]
          %11 = add(%10, %c9) : f32[1,4,6,6]
          return %11 as z, %2 as y
        }
        """,
    )


def test_conv_with_input_weights_gives_mul_add():
    check_pass(
        _conv_bn(const_w=False),
        fold_batchnorm,
        """
        graph conv_bn(%x: f32[1,4,6,6], %w: f32[4,4,3,3]) {
          %2 = conv(%x, %w) group=1 pads=(1,1,1,1) : f32[1,4,6,6]
          %c8 = constant f32[4,1,1] [-0.94449484,-0.56771725,-0.59240323, 0.19362566]
          %c9 = constant f32[4,1,1] [ 0.20022777,-0.12942605, 0.39581823, 1.0157055 ]
          %10 = mul(%2, %c8) : f32[1,4,6,6]
          %11 = add(%10, %c9) : f32[1,4,6,6]
          return %11 as z
        }
        """,
    )


def _dense_bn(bias: bool) -> Graph:
    g = Graph("dense_bn")
    x = g.add_input("x", TensorType((3, 4)))
    (y,) = g.add_node("dense", [x, const(g, (5, 4), 1)])
    if bias:
        (y,) = g.add_node("add", [y, const(g, (5,), 2)])
    (z,) = g.add_node("batch_norm", [y, *_bn_params(g, 5)])
    g.set_outputs([("z", z)])
    return g


def test_dense_then_bn_gets_folded_weights_and_bias_add():
    check_pass(
        _dense_bn(bias=False),
        fold_batchnorm,
        """
        graph dense_bn(%x: f32[3,4]) {
          %c8 = constant f32[5,4]
          %9 = dense(%x, %c8) : f32[3,5]
          %c10 = constant f32[5] [-0.4777727 , 0.145614  , 0.64662004, 0.49147406,-0.6279926 ]
          %11 = add(%9, %c10) : f32[3,5]
          return %11 as z
        }
        """,
    )


def test_dense_bias_then_bn_folds_both():
    check_pass(
        _dense_bn(bias=True),
        fold_batchnorm,
        """
        graph dense_bn(%x: f32[3,4]) {
          %c10 = constant f32[5,4]
          %11 = dense(%x, %c10) : f32[3,5]
          %c12 = constant f32[5] [-0.62909305, 0.5930531 , 0.9004689 ,-0.2826105 ,-0.9560394 ]
          %13 = add(%11, %c12) : f32[3,5]
          return %13 as z
        }
        """,
    )


def test_lone_batch_norm_becomes_per_channel_mul_add():
    g = Graph("bn")
    x = g.add_input("x", TensorType((2, 3, 4, 5)))
    (z,) = g.add_node("batch_norm", [x, *_bn_params(g, 3)])
    g.set_outputs([("z", z)])
    check_pass(
        g,
        fold_batchnorm,
        """
        graph bn(%x: f32[2,3,4,5]) {
          %c6 = constant f32[3,1,1] [-0.7930919 ,-0.5499545 ,-0.77895445]
          %c7 = constant f32[3,1,1] [0.93558604,0.22324531,0.49662945]
          %8 = mul(%x, %c6) : f32[2,3,4,5]
          %9 = add(%8, %c7) : f32[2,3,4,5]
          return %9 as z
        }
        """,
    )


def test_batch_norm_with_input_parameters_is_left_alone():
    g = Graph("bn")
    x = g.add_input("x", TensorType((2, 3, 4)))
    scale = g.add_input("scale", TensorType((3,)))
    (z,) = g.add_node("batch_norm", [x, scale, *_bn_params(g, 3)[1:]])
    g.set_outputs([("z", z)])
    check_pass(g, fold_batchnorm, None)


def _conv_then(ops: list[tuple[str, tuple[int, ...]]], group: int = 1, swap: bool = False) -> Graph:
    """conv(x, W) followed by binary ops with constants of these shapes (a Keras batch norm
    as TensorFlow freezes it: mul by a per-channel scale, add a per-channel shift)."""
    g = Graph("conv_affine")
    x = g.add_input("x", TensorType((1, 4, 6, 6)))
    (y,) = g.add_node("conv", [x, const(g, (4, 4 // group, 3, 3), 1)], {"pads": (1, 1, 1, 1), "group": group})
    for k, (op, shape) in enumerate(ops):
        c = const(g, shape, 5 + k)
        (y,) = g.add_node(op, [c, y] if swap else [y, c])
    g.set_outputs([("z", y)])
    return g


def test_per_channel_mul_and_add_fold_into_the_conv():
    check_pass(
        _conv_then([("mul", (4, 1, 1)), ("add", (1, 4, 1, 1))]),
        fold_batchnorm,
        """
        graph conv_affine(%x: f32[1,4,6,6]) {
          %c10 = constant f32[4,4,3,3]
          %c11 = constant f32[4] [ 1.0531157 , 1.7764913 ,-2.5532918 ,-0.13796507]
          %12 = conv(%x, %c10, %c11) group=1 pads=(1,1,1,1) : f32[1,4,6,6]
          return %12 as z
        }
        """,
    )


def test_scalar_and_reversed_operands_fold_too_depthwise_included():
    for g in (
        _conv_then([("mul", ()), ("add", (4, 1, 1))], group=4, swap=True),
        _conv_then([("mul", (4, 1, 1)), ("add", (4, 1, 1))], group=4),
    ):
        after = _folded(g)
        assert [after.node(n).op for n in after.op_nodes()] == ["conv"]
        assert_same_results(g, after)


def test_constants_that_vary_along_the_image_stay():
    for shape in [(1, 6), (4, 6, 1), (4, 1, 6)]:
        g = _conv_then([("add", shape)])
        after = _folded(g)
        assert [after.node(n).op for n in after.op_nodes()] == ["conv", "add"], shape


def _folded(g: Graph) -> Graph:
    from tensorir.passes import copy_graph

    after = copy_graph(g)
    fold_batchnorm(after)
    return after
