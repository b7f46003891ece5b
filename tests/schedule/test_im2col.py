"""im2col + GEMM for conv2d_nchwc (tensorir/schedule/algorithms/im2col.py): the default
schedule on the dense-conv layer shapes of ResNet-18/50 and MobileNetV2, and random legal
knob configurations on small shapes, against conv2d_nchwc's reference."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tensorir.ops.kernel import scratch_arrays
from tensorir.ops.layout import pack_array, pack_weight
from tensorir.ops.registry import get_op
from tensorir.passes.layout import channel_block
from tensorir.runtime.jit import compile_host
from tensorir.schedule import create_schedule, lower, placeholder
from tensorir.schedule.algorithms.im2col import im2col_conv_nchwc_compute, schedule_im2col_nchwc
from tensorir.schedule.space import discover_space, use_config
from tensorir.target import get_target

TARGET = get_target("host")
LANES = TARGET.vector_lanes("float32")


def build(xs, ws, bs, attrs, cfg=None):
    """Lower the im2col kernel (inputs x, w[, b], then y, then scratch)."""
    with use_config(cfg):
        x = placeholder(xs, "float32", "x")
        w = placeholder(ws, "float32", "w")
        b = placeholder(bs, "float32", "b") if bs is not None else None
        y = im2col_conv_nchwc_compute(x, w, b, **attrs)
        s = create_schedule([y])
        schedule_im2col_nchwc(s, [y], TARGET)
        ins = [x, w] + ([b] if b is not None else [])
        return lower(s, [*ins, y], name="im2col_conv"), y.shape


def make_case(n, c, m, hw, k, stride, pad, dil=1, bias=True, ib=None, ob=None, seed=0):
    rng = np.random.default_rng(seed)
    h, wd = hw if isinstance(hw, tuple) else (hw, hw)
    kh, kw = k if isinstance(k, tuple) else (k, k)
    ib = ib or channel_block(c, LANES)
    ob = ob or channel_block(m, LANES)
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = (rng.standard_normal((m, c, kh, kw)) / np.sqrt(c * kh * kw)).astype(np.float32)
    ins = [pack_array(x, ib), pack_weight(w, ib, ob, False)]
    if bias:
        ins.append(rng.standard_normal((m // ob, ob)).astype(np.float32))
    attrs = {"strides": (stride, stride), "pads": (pad,) * 4, "dilations": (dil, dil)}
    return ins, attrs


def run(ins, attrs, cfg=None):
    bs = ins[2].shape if len(ins) > 2 else None
    func, shape = build(ins[0].shape, ins[1].shape, bs, attrs, cfg)
    out = np.empty(shape, np.float32)
    compile_host(func)(*ins, out, *scratch_arrays(func))
    return out


def check(ins, attrs, cfg=None):
    got = run(ins, attrs, cfg)
    (want,) = get_op("conv2d_nchwc").run_reference(ins, {**attrs, "group": 1})
    assert got.shape == want.shape and got.dtype == want.dtype
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert err < 1e-4, (cfg, err)


# (n, c, m, hw, k, stride, pad, bias, ib): ResNet-18/50 and MobileNetV2 dense convs
LAYERS = {
    "resnet_3x3_64@56": (1, 64, 64, 56, 3, 1, 1, True, None),
    "resnet_3x3_s2_64-128@56": (1, 64, 128, 56, 3, 2, 1, False, None),
    "resnet_1x1_256-64@56": (1, 256, 64, 56, 1, 1, 0, True, None),
    "resnet_1x1_s2_256-512@56": (1, 256, 512, 56, 1, 2, 0, False, None),
    "resnet_stem_7x7_s2_3-64@224": (1, 3, 64, 224, 7, 2, 3, True, None),  # layout pass: ib = 1
    "resnet_stem_7x7_s2_ib3": (1, 3, 64, 224, 7, 2, 3, False, 3),  # a whole 3-channel block
    "mnv2_stem_3x3_s2_3-32@224": (1, 3, 32, 224, 3, 2, 1, True, None),
    "mnv2_1x1_96-24@56": (1, 96, 24, 56, 1, 1, 0, True, None),  # ob = 8
    "mnv2_1x1_16-96@112": (1, 16, 96, 112, 1, 1, 0, False, None),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_shapes_default_schedule(name):
    n, c, m, hw, k, stride, pad, bias, ib = LAYERS[name]
    ins, attrs = make_case(n, c, m, hw, k, stride, pad, bias=bias, ib=ib)
    check(ins, attrs)


def test_first_conv_block_is_one():
    """The layout pass packs C = 3 with ib = 1 (largest power of two dividing 3)."""
    assert channel_block(3, LANES) == 1


# small shapes: (n, c, m, hw, k, stride, pad, dil, bias, ib, ob)
SMALL = [
    (2, 32, 48, (9, 7), 3, 1, 1, 1, True, None, None),  # 2 images, odd sizes, ob = 16 x 3
    (1, 3, 16, (13, 11), (5, 3), 2, 2, 1, False, 3, 8),  # ib = 3, rectangular kernel, ob < lanes
    (1, 8, 24, (10, 10), 3, 1, 2, 2, True, None, None),  # dilation 2, ob = 8
]


@pytest.mark.parametrize("case", range(len(SMALL)))
def test_random_knob_configs(case):
    n, c, m, hw, k, stride, pad, dil, bias, ib, ob = SMALL[case]
    ins, attrs = make_case(n, c, m, hw, k, stride, pad, dil, bias=bias, ib=ib, ob=ob, seed=case)
    bs = ins[2].shape if bias else None
    space = discover_space(lambda: build(ins[0].shape, ins[1].shape, bs, attrs))
    names = {kn.name for kn in space.knobs()}
    assert {"im2col_mr", "im2col_nr_vectors", "im2col_pixel_block", "im2col_k_block"} <= names
    check(ins, attrs, space.default())
    rng = random.Random(case)
    for _ in range(5):
        check(ins, attrs, space.sample(rng))


def test_stage_names():
    x = placeholder((1, 2, 8, 8, 8), "float32", "x")
    w = placeholder((2, 2, 3, 3, 8, 8), "float32", "w")
    y = im2col_conv_nchwc_compute(x, w, pads=(1, 1, 1, 1))
    s = create_schedule([y])
    assert y.name == "conv_nchwc" and y.shape == (1, 2, 8, 8, 8)
    assert any(st.name.endswith("_acc") and st.op.reduce_axis for st in s.stages)
