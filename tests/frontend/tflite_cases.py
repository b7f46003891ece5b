"""TFLite test fixtures: small Keras models and single-op tf.functions, converted to .tflite
with TFLiteConverter (float32, and fp16 weights), once per test session into pytest's tmp
folder. TensorFlow is imported only here, inside `build_all`, and only by the TFLite tests.

`interpret(path, feeds)` runs the TFLite interpreter (the oracle); `close(outs, refs)` checks
outputs against it with the tolerance the tests state: max |out - ref| <= ATOL + RTOL * max |ref|.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

RTOL, ATOL = 1e-4, 1e-5  # relative to the output's magnitude (max |ref|)
SEED = 0


def _tf() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    return tf


# ---- Keras models --------------------------------------------------------------------------
def _randomize_batchnorm(model: Any, rng: np.random.Generator) -> None:
    """Seeded non-trivial BN statistics (weights=None leaves them at 0/1, which folds to nothing)."""
    for layer in model.layers:
        if layer.__class__.__name__ == "BatchNormalization":
            n = layer.get_weights()[0].shape[0]
            gamma, beta = rng.uniform(0.5, 1.5, n), rng.normal(0, 0.2, n)
            mean, var = rng.normal(0, 0.2, n), rng.uniform(0.5, 1.5, n)
            layer.set_weights([w.astype(np.float32) for w in (gamma, beta, mean, var)])


def convnet() -> Any:
    """Conv + BN + ReLU6, depthwise, max/avg pool, a residual add, global pool, dense softmax."""
    tf = _tf()
    L = tf.keras.layers
    inp = tf.keras.Input((32, 32, 3), batch_size=1)
    x = L.ReLU(6.0)(L.BatchNormalization()(L.Conv2D(16, 3, padding="same", use_bias=False)(inp)))
    y = L.DepthwiseConv2D(3, padding="same")(x)
    y = L.ReLU(6.0)(L.BatchNormalization()(y))
    y = L.Conv2D(16, 1, activation="relu")(y)
    x = L.Add()([x, y])
    x = L.MaxPooling2D(2)(x)
    x = L.Conv2D(24, 3, strides=2, padding="valid", activation="relu6")(x)
    x = L.DepthwiseConv2D(3, depth_multiplier=2, padding="same", activation="relu")(x)
    x = L.AveragePooling2D(2, strides=1, padding="same")(x)
    x = L.GlobalAveragePooling2D()(x)
    out = L.Dense(10, activation="softmax")(L.Dense(32, activation="relu")(x))
    return tf.keras.Model(inp, out)


def mobilenet_v2() -> Any:
    tf = _tf()
    return tf.keras.applications.MobileNetV2(
        input_shape=(96, 96, 3), alpha=0.35, weights=None, classes=16, classifier_activation="softmax"
    )


def mixed() -> Any:
    """hard-swish, bilinear and nearest resize, concat, transposed conv, strided slice, PReLU, pad."""
    tf = _tf()
    L, ops = tf.keras.layers, tf.keras.ops
    inp = tf.keras.Input((16, 16, 4), batch_size=1)
    x = L.Conv2D(8, 3, padding="same")(inp)
    x = L.Activation("hard_swish")(x)
    up = L.UpSampling2D(2, interpolation="bilinear")(x)
    near = L.UpSampling2D(2, interpolation="nearest")(L.Conv2D(8, 1)(x))
    t = L.Conv2DTranspose(8, 3, strides=2, padding="same", activation="relu")(x)
    x = L.Concatenate()([up, near, t])
    x = L.PReLU(shared_axes=[1, 2])(L.Conv2D(12, 3, padding="same")(x))
    x = x[:, 1:-1:2, ::2, :]
    x = L.ZeroPadding2D(((1, 0), (0, 1)))(x)
    x = L.Conv2D(8, 3, strides=2, padding="same", activation="sigmoid")(x)
    x = ops.mean(x, axis=(1, 2), keepdims=True) * x
    out = L.Conv2DTranspose(4, 2, strides=2, padding="valid")(x)
    return tf.keras.Model(inp, out)


MODELS: dict[str, Callable[[], Any]] = {"convnet": convnet, "mobilenet_v2": mobilenet_v2, "mixed": mixed}


def _seeded(builder: Callable[[], Any]) -> Any:
    tf = _tf()
    tf.keras.utils.set_random_seed(SEED)
    model = builder()
    _randomize_batchnorm(model, np.random.default_rng(SEED))
    return model


def _convert(converter: Any, fp16: bool = False) -> bytes:
    tf = _tf()
    if fp16:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


# ---- single-op functions ---------------------------------------------------------------------
OP_CASES = (
    "conv_same_stride2_relu",
    "conv_valid_dilated",
    "depthwise_multiplier2_relu6",
    "transpose_conv_same",
    "transpose_conv_valid",
    "fully_connected_from_4d",
    "add_mul_sub_div_broadcast",
    "max_avg_pool_same",
    "mean_keepdims_and_not",
    "softmax_logistic_tanh",
    "prelu_leaky_relu",
    "hard_swish",
    "resize_bilinear_half_pixel",
    "resize_bilinear_align_corners",
    "resize_nearest_half_pixel",
    "resize_nearest_asymmetric",
    "concat_channels_and_width",
    "reshape_transpose",
    "pad_and_padv2",
    "strided_slice_masks",
    "strided_slice_shrink",
    "relu_variants",
    "square_log_rsqrt",
    "comparisons_select_v2",
    "select_rank1_condition",
    "depth_to_space_and_back",
)
# builtins a case must convert to (the converter could rewrite an op into others)
CASE_BUILTINS = {
    "square_log_rsqrt": {"SQUARE", "LOG", "RSQRT"},
    "comparisons_select_v2": {"EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL"}
    | {"SELECT_V2"},
    "select_rank1_condition": {"SELECT"},
    "depth_to_space_and_back": {"DEPTH_TO_SPACE", "SPACE_TO_DEPTH"},
}


def _op_cases() -> dict[str, tuple[Callable, list[tuple[int, ...]]]]:
    """name -> (tf function of the inputs, input shapes); weights are seeded constants."""
    tf = _tf()
    rng = np.random.default_rng(SEED)

    def w(*shape: int) -> Any:
        return tf.constant(rng.standard_normal(shape).astype(np.float32) * 0.5)

    conv_w, dw_w, tc_w = w(3, 3, 4, 6), w(3, 3, 4, 2), w(3, 3, 5, 4)
    fc_w, fc_b = w(24, 7), w(7)
    prelu = tf.keras.layers.PReLU(tf.constant_initializer(rng.uniform(0.1, 0.5, 4)), shared_axes=[1, 2])
    prelu.build((1, 3, 5, 4))
    return {
        "conv_same_stride2_relu": (
            lambda x: tf.nn.relu(tf.nn.conv2d(x, conv_w, 2, "SAME") + w(6)),
            [(1, 9, 10, 4)],
        ),
        "conv_valid_dilated": (lambda x: tf.nn.conv2d(x, conv_w, 1, "VALID", dilations=2), [(1, 11, 9, 4)]),
        "depthwise_multiplier2_relu6": (
            lambda x: tf.nn.relu6(tf.nn.depthwise_conv2d(x, dw_w, [1, 2, 2, 1], "SAME")),
            [(1, 8, 7, 4)],
        ),
        "transpose_conv_same": (
            lambda x: tf.nn.conv2d_transpose(x, tc_w, (1, 10, 12, 5), 2, "SAME"),
            [(1, 5, 6, 4)],
        ),
        "transpose_conv_valid": (
            lambda x: tf.nn.conv2d_transpose(x, tc_w, (1, 11, 13, 5), 2, "VALID"),
            [(1, 5, 6, 4)],
        ),
        "fully_connected_from_4d": (
            lambda x: tf.matmul(tf.reshape(x, (-1, 24)), fc_w) + fc_b,
            [(1, 2, 3, 4)],
        ),
        "add_mul_sub_div_broadcast": (
            lambda a, b: ((a + b) * w(4) - b) / (tf.abs(a) + 1.0),
            [(1, 5, 6, 4), (1, 1, 1, 4)],
        ),
        "max_avg_pool_same": (
            lambda x: tf.nn.max_pool2d(x, 3, 2, "SAME") + tf.nn.avg_pool2d(x, 3, 2, "SAME"),
            [(1, 9, 8, 3)],
        ),
        "mean_keepdims_and_not": (
            lambda x: (
                tf.reduce_mean(x, axis=[1, 2], keepdims=True) + tf.reduce_mean(x, axis=[3], keepdims=True)
            ),
            [(1, 4, 5, 6)],
        ),
        "softmax_logistic_tanh": (
            lambda x: tf.nn.softmax(x) + tf.sigmoid(x) * tf.tanh(x),
            [(2, 7)],
        ),
        "prelu_leaky_relu": (
            lambda x: prelu(x) + tf.nn.leaky_relu(x, 0.3),
            [(1, 3, 5, 4)],
        ),
        "hard_swish": (lambda x: x * tf.nn.relu6(x + 3.0) / 6.0, [(1, 4, 4, 8)]),
        "resize_bilinear_half_pixel": (lambda x: tf.image.resize(x, (7, 10), "bilinear"), [(1, 4, 5, 3)]),
        "resize_bilinear_align_corners": (
            lambda x: tf.compat.v1.image.resize_bilinear(x, (7, 10), align_corners=True),
            [(1, 4, 5, 3)],
        ),
        "resize_nearest_half_pixel": (lambda x: tf.image.resize(x, (9, 7), "nearest"), [(1, 4, 5, 3)]),
        "resize_nearest_asymmetric": (
            lambda x: tf.compat.v1.image.resize_nearest_neighbor(x, (9, 7), half_pixel_centers=False),
            [(1, 4, 5, 3)],
        ),
        "concat_channels_and_width": (
            lambda a, b: tf.concat([tf.concat([a, b], axis=3), tf.concat([b, a], axis=3)], axis=2),
            [(1, 3, 4, 2), (1, 3, 4, 2)],
        ),
        "reshape_transpose": (
            lambda x: tf.transpose(tf.reshape(x, (1, 6, 4, 5)), (0, 3, 1, 2)),
            [(1, 4, 6, 5)],
        ),
        "pad_and_padv2": (
            lambda x: (
                tf.pad(x, [[0, 0], [1, 2], [0, 1], [0, 0]])[:, :, :, :1]
                + tf.pad(x, [[0, 0], [1, 2], [0, 1], [0, 0]], constant_values=0.5)[:, :, :, 1:2]
            ),
            [(1, 3, 4, 2)],
        ),
        "strided_slice_masks": (
            lambda x: x[:, 1:-1:2, ::-2, 1:] + x[:, -3:, :4, :1] * 0.0,
            [(1, 7, 8, 3)],
        ),
        "strided_slice_shrink": (lambda x: x[:, 2, 1:, :] * 2.0, [(1, 4, 5, 3)]),
        "relu_variants": (
            lambda x: tf.nn.relu(x) + tf.clip_by_value(x, -1.0, 1.0) + tf.nn.relu6(x * 4.0),
            [(3, 4)],
        ),
        "square_log_rsqrt": (
            lambda x: tf.math.log(tf.square(x) + 0.5) * tf.math.rsqrt(tf.square(x) + 1.0),
            [(1, 4, 5, 3)],
        ),
        "comparisons_select_v2": (_comparisons, [(1, 3, 4, 5), (1, 1, 4, 5)]),
        "select_rank1_condition": (
            lambda x: tf.raw_ops.Select(condition=x[:, 0] > 0.0, x=x, y=x * -3.0),
            [(4, 6)],
        ),
        "depth_to_space_and_back": (  # MediaPipe's full-range face and pose detectors upsample so
            lambda x: tf.nn.space_to_depth(tf.nn.depth_to_space(x, 2) * 2.0, 3),
            [(1, 3, 6, 8)],
        ),
    }


def _comparisons(a: Any, b: Any) -> Any:
    """Every comparison feeding tf.where (SELECT_V2, broadcast), as Basic Pitch's DivNoNan does
    with EQUAL: relu(a) == 0 holds for the negative half of a."""
    tf = _tf()
    out = tf.where(tf.equal(tf.nn.relu(a), 0.0), b, a) + tf.where(tf.not_equal(a, b), a, 0.5)
    out += tf.where(a < b, a, b) + tf.where(a <= 0.2, 1.0, b)
    return out + tf.where(a > b, b, a * a) + tf.where(a >= b, 2.0 * a, -1.0)


def convert_function(fn: Callable, shapes: list[tuple[int, ...]]) -> bytes:
    tf = _tf()
    spec = [tf.TensorSpec(s, tf.float32, name=f"in{k}") for k, s in enumerate(shapes)]
    f = tf.function(fn, input_signature=spec, autograph=False)
    module = tf.Module()
    module.f = f  # tracks the variables the function captures (PReLU's alpha)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], module)
    return _convert(converter)


@functools.cache
def build_all(root: Path) -> dict[str, Path]:
    """Every fixture file, written once per session under `root` (a pytest tmp folder)."""
    tf = _tf()
    root.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, builder in MODELS.items():
        model = _seeded(builder)
        for fp16 in (False, True) if name != "mixed" else (False,):
            key = name + ("_fp16" if fp16 else "")
            paths[key] = root / f"{key}.tflite"
            paths[key].write_bytes(_convert(tf.lite.TFLiteConverter.from_keras_model(model), fp16))
    cases = _op_cases()
    assert tuple(cases) == OP_CASES
    for name, (fn, shapes) in cases.items():
        paths[name] = root / f"op_{name}.tflite"
        paths[name].write_bytes(convert_function(fn, shapes))
    for name, data in _refused().items():
        paths[name] = root / f"refused_{name}.tflite"
        paths[name].write_bytes(data)
    return paths


def _refused() -> dict[str, bytes]:
    """Models the importer refuses: an unsupported builtin, a custom op; and a full int8 model
    (refused once, imported now)."""
    tf = _tf()
    conv_w = tf.constant(np.random.default_rng(SEED).standard_normal((3, 3, 4, 6)).astype(np.float32))
    spec = [tf.TensorSpec((1, 8, 8, 4), tf.float32)]

    def conv(x: Any) -> Any:
        return tf.nn.relu(tf.nn.conv2d(x, conv_w, 1, "SAME"))

    def igamma(x: Any) -> Any:
        return tf.math.igamma(tf.abs(x) + 1.0, tf.abs(x))

    def samples() -> Any:
        rng = np.random.default_rng(SEED)
        for _ in range(2):
            yield [rng.standard_normal((1, 8, 8, 4)).astype(np.float32)]

    out = {"unsupported": convert_function(lambda x: tf.math.cumsum(conv(x), axis=1), [(1, 8, 8, 4)])}
    f = tf.function(igamma, input_signature=spec, autograph=False)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f)
    converter.allow_custom_ops = True
    out["custom"] = converter.convert()
    f = tf.function(conv, input_signature=spec, autograph=False)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = samples
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = converter.inference_output_type = tf.int8
    out["int8"] = converter.convert()
    return out


# ---- oracle -----------------------------------------------------------------------------------
def seeded_inputs(path: Path, seed: int = 1) -> dict[str, np.ndarray]:
    tf = _tf()
    interp = tf.lite.Interpreter(model_path=str(path))
    rng = np.random.default_rng(seed)
    return {d["name"]: rng.standard_normal(d["shape"]).astype(d["dtype"]) for d in interp.get_input_details()}


def interpret(path: Path, feeds: dict[str, np.ndarray], resize: bool = False) -> dict[str, np.ndarray]:
    """The TFLite interpreter's outputs by tensor name (`resize`: to the feeds' shapes first)."""
    tf = _tf()
    interp = tf.lite.Interpreter(model_path=str(path))
    if resize:
        for d in interp.get_input_details():
            interp.resize_tensor_input(d["index"], feeds[d["name"]].shape)
    interp.allocate_tensors()
    for d in interp.get_input_details():
        interp.set_tensor(d["index"], feeds[d["name"]])
    interp.invoke()
    return {d["name"]: interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()}


def max_error(out: np.ndarray, ref: np.ndarray) -> float:
    """max |out - ref| relative to max |ref|."""
    return float(np.max(np.abs(out - ref)) / max(float(np.max(np.abs(ref))), 1e-30))


def close(outs: dict[str, np.ndarray], refs: dict[str, np.ndarray]) -> None:
    assert outs.keys() == refs.keys()
    for name, ref in refs.items():
        out = outs[name]
        assert out.shape == ref.shape, (name, out.shape, ref.shape)
        tol = ATOL + RTOL * float(np.max(np.abs(ref)))
        err = float(np.max(np.abs(out - ref)))
        assert err <= tol, f"{name}: max abs error {err:.3g} > {tol:.3g} (rel {max_error(out, ref):.3g})"
