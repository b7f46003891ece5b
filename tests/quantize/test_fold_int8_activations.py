"""A TFLite full-integer model (int8 activations, TensorFlow's post-training quantization)
compiles to integer ops: fold_qdq takes int8 activations as uint8 = int8 + 128 (zero points
shifted the same), looks through the NHWC -> NCHW transpose of the input and takes
FULLY_CONNECTED's dense; against the TFLite interpreter within one step of the int8 output."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

import tensorir
from tensorir.frontend.tflite import from_tflite
from tensorir.graph.printer import print_graph
from tensorir.pipeline import optimize

pytestmark = pytest.mark.tf  # TensorFlow in the process: a session of its own (quickstart.sh)


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory) -> str:
    import tensorflow as tf

    inp = tf.keras.Input((16, 16, 8), batch_size=1)
    x = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inp)
    x = tf.keras.layers.DepthwiseConv2D(3, padding="same", activation="relu6")(x)
    x = tf.keras.layers.Add()([x, tf.keras.layers.Conv2D(16, 1)(x)])
    x = tf.keras.layers.Conv2D(24, 3, strides=2, padding="same")(x)
    out = tf.keras.layers.Dense(10)(tf.keras.layers.GlobalAveragePooling2D()(x))
    rng = np.random.default_rng(0)

    def samples():
        for _ in range(16):
            yield [rng.standard_normal((1, 16, 16, 8)).astype(np.float32)]

    conv = tf.lite.TFLiteConverter.from_keras_model(tf.keras.Model(inp, out))
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = samples
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = conv.inference_output_type = tf.int8
    path = tmp_path_factory.mktemp("int8") / "m8.tflite"
    path.write_bytes(conv.convert())
    return str(path)


def test_int8_activation_model_runs_on_integer_ops_and_matches_tflite(int8_model):
    import tensorflow as tf

    text = print_graph(optimize(from_tflite(int8_model), fuse=False))
    ops = collections.Counter(re.findall(r" = (qconv1x1|qdwconv|qdense|im2col|conv|dense)\(", text))
    assert ops == {"qconv1x1": 3, "im2col": 2, "qdwconv": 1, "qdense": 1}, ops
    mod = tensorir.compile(int8_model)
    interp = tf.lite.Interpreter(int8_model)
    interp.allocate_tensors()
    (i,), (o,) = interp.get_input_details(), interp.get_output_details()
    for seed in range(3):
        x = np.random.default_rng(seed).integers(-128, 128, i["shape"]).astype(np.int8)
        interp.set_tensor(i["index"], x)
        interp.invoke()
        want = interp.get_tensor(o["index"]).astype(int)
        got = mod.run({i["name"]: x})[0]
        assert got.dtype == np.int8 and np.abs(got.astype(int) - want).max() <= 1
