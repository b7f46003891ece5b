"""TFLite full-integer models (TensorFlow's post-training int8 quantization): imported as float
arithmetic on the quantized values (frontend/tflite_quant.py), compiled for the host, checked
against the TFLite interpreter on the same int8 model: within one quantization step of the
output (of the last quantized tensor for a float output behind DEQUANTIZE). A 16x8 model
(int16 activations) is refused in one line naming its first int16 tensor."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tensorir
from tensorir.errors import TirError, UnsupportedOpError
from tensorir.frontend.tflite import from_tflite, read_tflite
from tensorir.graph.graph import Graph
from tensorir.runtime.reference import run_reference
from tests.frontend import tflite_cases as tc

pytestmark = pytest.mark.tf  # TensorFlow in the process: a session of its own (quickstart.sh)

SHAPE = (1, 16, 16, 3)
# model variant -> (inference input / output type); "float" keeps float32 with QUANTIZE /
# DEQUANTIZE at the edges
VARIANTS = {"convnet_float": "float", "convnet_int8": "int8", "convnet_uint8": "uint8", "mlp_int8": "int8"}


def _convnet() -> Any:
    """Conv 3x3 + ReLU, depthwise + ReLU6, add, average / max pool, concat, global average
    pool (MEAN), 1x1 conv, reshape, dense, softmax."""
    tf = tc._tf()
    L = tf.keras.layers
    inp = tf.keras.Input(SHAPE[1:], batch_size=1)
    x = L.Conv2D(8, 3, padding="same", activation="relu")(inp)
    y = L.DepthwiseConv2D(3, padding="same", activation="relu6")(x)
    x = L.Add()([x, y])
    x = L.Concatenate()([L.AveragePooling2D(2)(x), L.MaxPooling2D(2)(x)])
    g = L.Dense(16, activation="relu")(L.GlobalAveragePooling2D()(x))
    flat = L.Reshape((-1,))(L.Conv2D(4, 1, strides=2)(x))
    x = L.Concatenate()([g, L.Dense(16)(flat)])
    return tf.keras.Model(inp, L.Softmax()(L.Dense(10)(x)))


def _mlp() -> Any:
    """A strided conv without activation, then dense layers on the flattened map (no softmax:
    the logits are the output)."""
    tf = tc._tf()
    L = tf.keras.layers
    inp = tf.keras.Input(SHAPE[1:], batch_size=1)
    x = L.Conv2D(6, 3, strides=2, padding="valid")(inp)
    x = L.Dense(12, activation="relu")(L.Flatten()(x))
    return tf.keras.Model(inp, L.Dense(5)(x))


def _op_cases() -> dict[str, Any]:
    """Single int8 ops beyond the models' (name -> tf function of a SHAPE input)."""
    tf = tc._tf()
    rng = np.random.default_rng(tc.SEED)
    tconv_w = tf.constant(rng.standard_normal((3, 3, 5, 3)).astype(np.float32) * 0.5)
    return {
        "logistic_tanh_mul": lambda x: tf.sigmoid(x) * tf.tanh(x),
        "hard_swish": lambda x: x * tf.nn.relu6(x * 3 + 3) / 6,
        "pad": lambda x: tf.pad(x, [[0, 0], [1, 2], [0, 1], [0, 0]]),
        "resize_bilinear": lambda x: tf.image.resize(x, (24, 20), "bilinear"),
        "resize_nearest": lambda x: tf.image.resize(x, (32, 32), "nearest"),
        "leaky_relu": lambda x: tf.nn.leaky_relu(x, 0.1),
        "strided_slice": lambda x: x[:, 1:-1:2, ::2, :],
        "transpose_conv": lambda x: tf.nn.conv2d_transpose(x, tconv_w, (1, 32, 32, 5), 2, "SAME"),
        "mean_channels": lambda x: tf.reduce_mean(x, axis=3, keepdims=True),
        "transpose": lambda x: tf.transpose(x, (0, 3, 1, 2)),
    }


OP_CASES = (
    "logistic_tanh_mul",
    "hard_swish",
    "pad",
    "resize_bilinear",
    "resize_nearest",
    "leaky_relu",
    "strided_slice",
    "transpose_conv",
    "mean_channels",
    "transpose",
)


def _samples(seed: int = 0) -> Any:
    def gen() -> Any:
        rng = np.random.default_rng(seed)
        for _ in range(16):
            yield [rng.uniform(-1.0, 1.0, SHAPE).astype(np.float32)]

    return gen


def _int8_model(model: Any, io: str, int16: bool = False) -> bytes:
    """A Keras model or a tf.function of one SHAPE input, converted with full-integer quantization."""
    tf = tc._tf()
    if isinstance(model, tf.keras.Model):
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
    else:
        f = tf.function(model, input_signature=[tf.TensorSpec(SHAPE, tf.float32)], autograph=False)
        converter = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = _samples()
    if int16:
        ops = tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8
    else:
        ops = tf.lite.OpsSet.TFLITE_BUILTINS_INT8
    converter.target_spec.supported_ops = [ops]
    if io != "float":
        converter.inference_input_type = converter.inference_output_type = getattr(tf, io)
    return converter.convert()


@functools.cache
def _build(root: Path) -> dict[str, Path]:
    tf = tc._tf()
    root.mkdir(parents=True, exist_ok=True)
    tf.keras.utils.set_random_seed(tc.SEED)
    models = {"convnet": _convnet(), "mlp": _mlp()}
    paths = {}
    for key, io in VARIANTS.items():
        paths[key] = root / f"{key}.tflite"
        paths[key].write_bytes(_int8_model(models[key.split("_")[0]], io))
    cases = _op_cases()
    assert tuple(cases) == OP_CASES
    for name, fn in cases.items():
        paths[name] = root / f"op_{name}.tflite"
        paths[name].write_bytes(_int8_model(fn, "int8"))
    paths["int16"] = root / "int16.tflite"
    paths["int16"].write_bytes(_int8_model(models["mlp"], "float", int16=True))
    return paths


@pytest.fixture(scope="session")
def int8_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _build(tmp_path_factory.getbasetemp() / "tflite_int8")


def _feeds(path: Path, seed: int = 1) -> dict[str, np.ndarray]:
    """Inputs in [-1, 1] (the calibration range), quantized for an integer input."""
    interp = tc._tf().lite.Interpreter(model_path=str(path))
    rng = np.random.default_rng(seed)
    feeds = {}
    for d in interp.get_input_details():
        x = rng.uniform(-1.0, 1.0, d["shape"]).astype(np.float32)
        if d["dtype"] != np.float32:
            scale, zp = d["quantization"]
            info = np.iinfo(d["dtype"])
            x = np.clip(np.round(x / scale) + zp, info.min, info.max)
        feeds[d["name"]] = x.astype(d["dtype"])
    return feeds


def _steps(path: Path) -> dict[str, float]:
    """Per output: the quantization step it is compared in (its own scale; for a float output,
    the scale of the quantized tensor its DEQUANTIZE reads)."""
    m = read_tflite(path)
    producer = {o: op for op in m.ops for o in op.outputs}
    steps = {}
    for i in m.outputs:
        t = m.tensors[i]
        if t.qparams is None and producer[i].code == "DEQUANTIZE":
            t = m.tensors[producer[i].inputs[0]]
        steps[m.tensors[i].name] = float(t.qparams.scale[0])
    return steps


def _error_in_steps(outs: dict[str, np.ndarray], refs: dict[str, np.ndarray], path: Path) -> float:
    """max |out - ref| in quantization steps over all outputs (integer outputs count 1 per unit)."""
    steps, worst = _steps(path), 0.0
    assert outs.keys() == refs.keys()
    for name, ref in refs.items():
        out = outs[name]
        assert out.shape == ref.shape and out.dtype == ref.dtype, (name, out.shape, out.dtype, ref.dtype)
        diff = np.abs(out.astype(np.float64) - ref.astype(np.float64))
        unit = 1.0 if np.issubdtype(ref.dtype, np.integer) else steps[name]
        worst = max(worst, float(diff.max()) / unit)
    return worst


def _outputs(g: Graph, outs: list) -> dict[str, np.ndarray]:
    return {name: np.asarray(o) for (name, _), o in zip(g.outputs, outs, strict=True)}


@pytest.mark.parametrize("name", [*VARIANTS, *OP_CASES])
def test_int8_model_matches_interpreter_within_one_step(int8_files, name):
    path = int8_files[name]
    g = from_tflite(path)
    module = tensorir.compile(path)
    for seed in (1, 2, 3):
        feeds = _feeds(path, seed)
        refs = tc.interpret(path, feeds)
        assert _error_in_steps(_outputs(g, run_reference(g, feeds)), refs, path) <= 1.0
        assert _error_in_steps(_outputs(g, module.run(feeds)), refs, path) <= 1.0


def test_cases_convert_to_their_int8_builtins(int8_files):
    want = {
        "convnet_float": {"QUANTIZE", "DEQUANTIZE", "CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "SOFTMAX"}
        | {"AVERAGE_POOL_2D", "MAX_POOL_2D", "CONCATENATION", "MEAN", "RESHAPE", "FULLY_CONNECTED"},
        "convnet_uint8": {"QUANTIZE"},
        "logistic_tanh_mul": {"LOGISTIC", "TANH", "MUL"},
        "resize_bilinear": {"RESIZE_BILINEAR"},
        "resize_nearest": {"RESIZE_NEAREST_NEIGHBOR"},
        "leaky_relu": {"LEAKY_RELU"},
        "strided_slice": {"STRIDED_SLICE"},
        "transpose_conv": {"TRANSPOSE_CONV"},
    }
    for name, builtins in want.items():
        m = read_tflite(int8_files[name])
        assert builtins <= {op.code for op in m.ops}, (name, sorted(op.code for op in m.ops))
        assert any(t.dtype == "int8" and t.qparams is not None for t in m.tensors), name


def test_int8_io_types_and_weights_stay_int8(int8_files):
    g = from_tflite(int8_files["convnet_int8"])
    assert [g.type_of(v).dtype for _, v in g.outputs] == ["int8"]
    g = from_tflite(int8_files["convnet_uint8"])
    assert [g.type_of(v).dtype for _, v in g.outputs] == ["uint8"]
    g = from_tflite(int8_files["convnet_float"])
    assert [g.type_of(v).dtype for _, v in g.outputs] == ["float32"]
    # every conv / dense weight: an int8 constant under cast (-> sub) -> mul, as fold_qdq reads it
    weights = 0
    for nid in g.nx.nodes:
        node = g.node(nid)
        if node.op not in ("conv", "dense"):
            continue
        w = g.inputs_of(nid)[1]
        assert g.node(w.node).op == "mul", node.name
        a = g.inputs_of(w.node)[0]
        a = g.inputs_of(a.node)[0] if g.node(a.node).op == "sub" else a
        assert g.node(a.node).op == "cast", node.name
        q = g.node(g.inputs_of(a.node)[0].node)
        assert q.op == "constant" and q.value.dtype == np.int8, node.name
        weights += 1
    assert weights == 6


def test_int16_activations_are_refused_naming_the_tensor(int8_files):
    with pytest.raises(UnsupportedOpError) as e:
        from_tflite(int8_files["int16"])
    msg = str(e.value)
    assert "quantized model: tensor #" in msg and "is int16 with per-tensor quantization" in msg, msg
    assert str(int8_files["int16"]) in msg and "16x8" in msg and "\n" not in msg
    assert isinstance(e.value, TirError)  # the CLI prints it as one line, exit status 2


def test_dynamic_range_model_imports_as_float_with_its_int8_weights(tmp_path):
    """TensorFlow's dynamic-range quantization (no representative dataset): int8 weights,
    float activations. The weights dequantize at import, the model runs in float and agrees
    with the interpreter (whose hybrid kernels quantize activations on the fly) to within
    that rounding."""
    converter = tc._tf().lite.TFLiteConverter.from_keras_model(_mlp())
    converter.optimizations = [tc._tf().lite.Optimize.DEFAULT]
    path = tmp_path / "hybrid.tflite"
    path.write_bytes(converter.convert())
    m = read_tflite(path)
    assert any(t.dtype == "int8" and t.data is not None for t in m.tensors)
    assert all(t.dtype != "int8" for t in m.tensors if t.data is None)  # activations stay float
    g = from_tflite(path)
    module = tensorir.compile(path)
    for seed in (1, 2):
        feeds = _feeds(path, seed)
        (ref,) = tc.interpret(path, feeds).values()
        (out,) = _outputs(g, module.run(feeds)).values()
        assert out.dtype == np.float32
        np.testing.assert_allclose(out, ref, atol=0.02 * np.abs(ref).max())
