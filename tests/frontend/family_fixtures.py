"""The Keras application families of issue 13 (MobileNet, MobileNetV2, MobileNetV3Small, ResNet50,
EfficientNetB0, DenseNet121) and a Keras transformer encoder block, built with `weights=None`, a
fixed seed and seeded non-trivial batch-norm statistics, small inputs, logits out (no softmax);
each saved as a SavedModel, a frozen GraphDef, a `.keras` file and `.tflite` (float32 and fp16
weights), once per test session into pytest's tmp folder (nothing is downloaded or cached).

To keep the session short, every format comes from one trace: the serving function is traced
once, saved as the SavedModel, and frozen once; the frozen function is both the `.pb` and the
TFLiteConverter's input (converting the frozen function takes seconds, `from_keras_model`
re-traces and re-freezes for each conversion). The oracles are computed here too: Keras's
output for the TensorFlow formats, the TFLite interpreter's for `.tflite`.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

SEED = 0
SIZE = 32  # the smallest input every application accepts with weights=None
CLASSES = 16
FORMATS = ("saved_model", "pb", "keras", "tflite", "tflite_fp16")


def _apps() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    return keras


def _app(name: str, **kw: Any) -> Callable[[], Any]:
    def build() -> Any:
        keras = _apps()
        shape = (SIZE, SIZE, 3)
        args = {"input_shape": shape, "weights": None, "classes": CLASSES, "classifier_activation": None}
        return getattr(keras.applications, name)(**args, **kw)

    return build


def transformer() -> Any:
    """A post-norm encoder block: multi-head self-attention, residual + LayerNorm, a GELU
    feed-forward, residual + LayerNorm (dropout is the identity at inference)."""
    keras = _apps()
    L = keras.layers
    tokens = keras.Input((16, 32), name="tokens")
    a = L.MultiHeadAttention(num_heads=4, key_dim=8, dropout=0.1)(tokens, tokens)
    x = L.LayerNormalization(epsilon=1e-6)(tokens + L.Dropout(0.1)(a))
    f = L.Dense(64, activation="gelu")(x)
    f = L.Dense(32)(L.Dropout(0.1)(f))
    return keras.Model(tokens, L.LayerNormalization(epsilon=1e-6)(x + f))


FAMILIES: dict[str, Callable[[], Any]] = {
    "mobilenet": _app("MobileNet", alpha=0.25),
    "mobilenet_v2": _app("MobileNetV2", alpha=0.35),
    "mobilenet_v3_small": _app("MobileNetV3Small", alpha=0.75),
    "resnet50": _app("ResNet50"),
    "efficientnet_b0": _app("EfficientNetB0"),
    "densenet121": _app("DenseNet121"),
    "transformer": transformer,
}


def randomize_batchnorm(model: Any, rng: np.random.Generator) -> None:
    """Seeded BN statistics and affine terms (weights=None leaves them at 0/1, which fold away)."""
    for layer in model.layers:
        if layer.__class__.__name__ == "BatchNormalization":
            n = layer.get_weights()[0].shape[0]
            gamma, beta = rng.uniform(0.5, 1.5, n), rng.normal(0, 0.2, n)
            mean, var = rng.normal(0, 0.2, n), rng.uniform(0.5, 1.5, n)
            stats = [gamma, beta, mean, var][-len(layer.get_weights()) :]
            layer.set_weights([w.astype(np.float32) for w in stats])


def build(name: str) -> Any:
    keras = _apps()
    keras.utils.set_random_seed(SEED)
    model = FAMILIES[name]()
    randomize_batchnorm(model, np.random.default_rng(SEED))
    return model


def _tflite(tf: Any, frozen: Any, fp16: bool) -> bytes:
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
    if fp16:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


def interpret(path: Path, x: np.ndarray) -> np.ndarray:
    """The TFLite interpreter's output for the one input x."""
    import tensorflow as tf

    interp = tf.lite.Interpreter(model_path=str(path))
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return interp.get_tensor(interp.get_output_details()[0]["index"]).copy()


def family_paths(name: str, folder: Path) -> dict[str, Path]:
    paths = {"saved_model": folder / f"{name}_saved_model", "pb": folder / f"{name}.pb"}
    paths.update({"keras": folder / f"{name}.keras", "tflite": folder / f"{name}.tflite"})
    paths["tflite_fp16"] = folder / f"{name}_fp16.tflite"
    return paths


def save_family(name: str, folder: Path) -> None:
    """One family in every format under folder, and `<name>_oracle.npz`: the seeded input `x`
    and per format the oracle's output on it (written last: its presence means done)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    model = build(name)
    spec = tf.TensorSpec((None, *model.inputs[0].shape[1:]), tf.float32, name="input")
    serve = tf.function(lambda x: model(x, training=False), input_signature=[spec])
    module = tf.Module()
    module.model = model  # tracks the variables the SavedModel stores
    fn = serve.get_concrete_function()
    frozen = convert_variables_to_constants_v2(fn)
    paths = family_paths(name, folder)
    tf.saved_model.save(module, str(paths["saved_model"]), signatures={"serving_default": fn})
    paths["pb"].write_bytes(frozen.graph.as_graph_def().SerializeToString())
    model.save(str(paths["keras"]))
    paths["tflite"].write_bytes(_tflite(tf, frozen, fp16=False))
    paths["tflite_fp16"].write_bytes(_tflite(tf, frozen, fp16=True))
    x = np.random.default_rng(SEED + 1).standard_normal((1, *spec.shape[1:])).astype(np.float32)
    keras_out = np.asarray(model(x, training=False))
    expected = {fmt: keras_out for fmt in ("saved_model", "pb", "keras")}
    expected.update({fmt: interpret(paths[fmt], x) for fmt in ("tflite", "tflite_fp16")})
    tmp = folder / f"{name}_oracle.tmp.npz"
    np.savez(tmp, x=x, **expected)
    tmp.replace(folder / f"{name}_oracle.npz")


@contextmanager
def _locked(folder: Path, name: str, wait: bool) -> Iterator[bool]:
    """An exclusive lock on the family's lock file (True), or False at once if another
    process holds it and not `wait`."""
    with open(folder / f"{name}.lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _done(folder: Path, name: str) -> bool:
    return (folder / f"{name}_oracle.npz").is_file()


def ensure_family(name: str, folder: Path) -> dict[str, Any]:
    """The family's files, input and oracle outputs, built once in `folder`, which the test
    processes of a session share (pytest-xdist workers): the first to ask builds it under a
    lock; a process that finds it being built builds the next family nobody has claimed while
    it waits, so both cores stay busy."""
    folder.mkdir(parents=True, exist_ok=True)
    if not _done(folder, name):
        with _locked(folder, name, wait=False) as mine:
            if mine and not _done(folder, name):
                save_family(name, folder)
        if not _done(folder, name):
            _build_one_unclaimed(folder, after=name)
            with _locked(folder, name, wait=True):
                if not _done(folder, name):  # its builder failed: build it here, to see the error
                    save_family(name, folder)
    data = np.load(folder / f"{name}_oracle.npz")
    return {
        "paths": family_paths(name, folder),
        "x": data["x"],
        "expected": {fmt: data[fmt] for fmt in FORMATS},
    }


def _build_one_unclaimed(folder: Path, after: str) -> None:
    names = list(FAMILIES)
    for other in names[names.index(after) + 1 :]:
        if _done(folder, other):
            continue
        with _locked(folder, other, wait=False) as mine:
            if mine and not _done(folder, other):
                save_family(other, folder)
                return
