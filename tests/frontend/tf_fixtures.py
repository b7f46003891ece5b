"""Keras models built in code with seeded weights, saved in every TensorFlow format once per test
session (tests/frontend/conftest.py): no downloads, nothing written outside the tmp folder."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

FORMATS = ("saved_model", "pb", "keras", "h5")


def _randomize(model, rng: np.random.Generator) -> None:
    """Seeded weights everywhere, and batch-norm statistics that are not the identity."""
    for layer in model.layers:
        weights = layer.get_weights()
        if not weights:
            continue
        new = []
        for w, var in zip(weights, layer.weights, strict=True):
            name = var.path if hasattr(var, "path") else var.name
            if "moving_variance" in name or "gamma" in name:
                new.append(rng.uniform(0.5, 1.5, w.shape).astype(w.dtype))
            else:
                new.append((rng.standard_normal(w.shape) * 0.2).astype(w.dtype))
        layer.set_weights(new)


def small_cnn(keras):
    i = keras.Input((16, 16, 3), name="image")
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same")(i)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU(6.0)(x)
    x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Activation("relu")(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.AveragePooling2D(3, strides=1, padding="same")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(10, activation="softmax")(x)
    return keras.Model(i, x)


def mobilenet_v2(keras):
    return keras.applications.MobileNetV2(
        input_shape=(96, 96, 3), alpha=0.35, weights=None, classifier_activation=None
    )


def encoder(keras):
    i = keras.Input((8, 16), name="tokens")
    a = keras.layers.MultiHeadAttention(2, 8)(i, i)
    x = keras.layers.LayerNormalization()(i + a)
    f = keras.layers.Dense(32, activation="gelu")(x)
    f = keras.layers.Dense(16)(f)
    return keras.Model(i, keras.layers.LayerNormalization()(x + f))


BUILDERS = {"small_cnn": small_cnn, "mobilenet_v2": mobilenet_v2, "encoder": encoder}


def save_all(folder: Path, names: tuple[str, ...] = tuple(BUILDERS)) -> dict[str, dict]:
    """Per model: its path in each format, a seeded input and Keras's output on it."""
    os.environ.setdefault("KERAS_HOME", str(folder / "keras_home"))
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    keras.utils.set_random_seed(0)
    out = {}
    for name in names:
        model = BUILDERS[name](keras)
        _randomize(model, np.random.default_rng(1))
        paths = {fmt: folder / f"{name}.{fmt}" for fmt in FORMATS}
        paths["saved_model"] = folder / f"{name}_saved_model"
        model.export(str(paths["saved_model"]), verbose=False)
        model.save(str(paths["keras"]))
        model.save(str(paths["h5"]))
        loaded = tf.saved_model.load(str(paths["saved_model"]))  # keeps the variables alive
        frozen = convert_variables_to_constants_v2(loaded.signatures["serving_default"])
        paths["pb"].write_bytes(frozen.graph.as_graph_def().SerializeToString())
        shape = (1, *model.inputs[0].shape[1:])
        x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
        out[name] = {"paths": paths, "x": x, "expected": np.asarray(model(x, training=False))}
    return out


def save_two_signatures(folder: Path) -> str:
    """A SavedModel with two signatures on a (2, 3) float32 input x: serving_default (y = x + 1)
    and double (y = x * 2)."""
    import tensorflow as tf

    class Module(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec((2, 3), tf.float32, name="x")])
        def plus_one(self, x):
            return {"y": x + 1.0}

        @tf.function(input_signature=[tf.TensorSpec((2, 3), tf.float32, name="x")])
        def double(self, x):
            return {"y": x * 2.0}

    m = Module()
    tf.saved_model.save(m, str(folder), signatures={"serving_default": m.plus_one, "double": m.double})
    return str(folder)
