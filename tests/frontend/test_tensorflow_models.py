"""Keras models imported from every TensorFlow format, compiled for the host and compared with
TensorFlow's own output; the optimized NHWC MobileNetV2 keeps no transpose between its convs."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import tensorir as tir
from tensorir.frontend import load_graph_any
from tensorir.frontend.tensorflow import from_tensorflow
from tensorir.pipeline import optimize
from tensorir.runtime.reference import run_reference
from tests.frontend.tf_fixtures import FORMATS, save_all

pytestmark = pytest.mark.tf  # TensorFlow in the process: a session of its own (quickstart.sh)

RTOL, ATOL = 1e-4, 1e-5  # max |ours - tf| <= ATOL + RTOL * max |tf|


@pytest.fixture(scope="session")
def tf_models(tmp_path_factory):
    return save_all(tmp_path_factory.mktemp("tf_models"))


def _close(out: np.ndarray, expected: np.ndarray) -> float:
    err = float(np.abs(out - expected).max())
    assert out.shape == expected.shape
    assert err <= ATOL + RTOL * float(np.abs(expected).max()), err
    return err


# Keras cannot reload the encoder (MultiHeadAttention + op layers) from legacy .h5 itself
CASES = [("small_cnn", f) for f in FORMATS] + [("encoder", f) for f in FORMATS if f != "h5"]


@pytest.mark.parametrize(("name", "fmt"), CASES)
def test_formats_reference(tf_models, name, fmt):
    m = tf_models[name]
    g = from_tensorflow(m["paths"][fmt])
    (inp,) = g.input_names()
    _close(run_reference(g, {inp: m["x"]})[0], m["expected"])


@pytest.mark.parametrize("name", ["small_cnn", "mobilenet_v2", "encoder"])
def test_compiled_matches_tensorflow(tf_models, name):
    m = tf_models[name]
    fmt = "saved_model" if name != "encoder" else "keras"
    mod = tir.compile(str(m["paths"][fmt]))
    out = mod.run({mod.inputs[0]["name"]: m["x"]})[0]
    _close(out, m["expected"])


def test_mobilenet_v2_no_transposes_between_convs(tf_models):
    g = optimize(load_graph_any(str(tf_models["mobilenet_v2"]["paths"]["pb"])))
    ops = collections.Counter(g.node(n).op for n in g.op_nodes())
    # 52 convs, alone (a projection whose frozen batch norm folded into it) or fused with their
    # epilogue (some depthwise + 1x1 pairs merged: passes/fuse_dwpw.py)
    bodies = [str(g.node(n).attr["body"]) for n in g.op_nodes() if g.node(n).op == "fused"]
    assert ops["conv2d_nchwc"] + sum(b.split("+").count("conv2d_nchwc") for b in bodies) >= 52
    # one transpose of the NHWC input, one unpack of the pooled [1, C, 1, 1] features
    assert ops["transpose"] == 1 and ops["layout_transform"] == 1, ops


def test_input_shape_and_batch(tf_models):
    m = tf_models["small_cnn"]
    g = from_tensorflow(m["paths"]["saved_model"], input_shapes={"image": [2, 16, 16, 3]})
    x = np.concatenate([m["x"], m["x"]])
    out = run_reference(g, {"image": x})[0]
    _close(out[1:], m["expected"])
