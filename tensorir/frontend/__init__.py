"""Frontends: models of each format -> the graph IR. `load_graph_any` is the one entry the CLI,
the pipeline and the tuner use; it picks the frontend by the model's path:

    .onnx (or an onnx.ModelProto)          -> onnx.from_onnx
    SavedModel folder, .pb, .keras, .h5    -> tensorflow.from_tensorflow (needs TensorFlow, run in
                                              a child process: tf_child.py)
    .tflite                                -> tflite.from_tflite
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import pkgutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorir.errors import ModelError
from tensorir.graph.graph import Graph


@functools.cache
def load_converters(prefix: str) -> None:
    """Import every module of this package named `prefix`* once (each registers its op
    converters when imported): "onnx_" for ONNX, "tf_ops" for TensorFlow."""
    for mod in pkgutil.iter_modules(__path__):
        if mod.name.startswith(prefix):
            importlib.import_module(f"{__name__}.{mod.name}")


def model_format(model: Any) -> str:
    """'onnx', 'tensorflow' or 'tflite' for a model path (or 'onnx' for a ModelProto)."""
    if not isinstance(model, str | os.PathLike):
        return "onnx"
    from tensorir.frontend.tensorflow import is_tf_model

    p = Path(model)
    if p.suffix.lower() == ".tflite":
        return "tflite"
    if is_tf_model(p):
        return "tensorflow"
    return "onnx"


def load_graph_any(
    model: Any,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    signature: str = "serving_default",
    override_shapes: bool = True,
) -> Graph:
    """The graph IR of a model in any supported format (see the module docstring).
    `signature` picks a SavedModel's signature; `override_shapes` as in from_onnx."""
    fmt = model_format(model)
    if fmt == "tensorflow":
        from tensorir.frontend.tensorflow import from_tensorflow

        return from_tensorflow(model, input_shapes, signature=signature, override_shapes=override_shapes)
    if fmt == "tflite":
        try:
            from tensorir.frontend.tflite import from_tflite
        except ModuleNotFoundError as e:
            if e.name != "tensorir.frontend.tflite":
                raise
            raise ModelError(f"{model}: .tflite models are not supported by this version") from None
        return from_tflite(model, input_shapes)
    from tensorir.frontend.onnx import from_onnx

    return from_onnx(model, input_shapes=input_shapes, override_shapes=override_shapes)


def check_model_path(model: str | os.PathLike) -> Path:
    """The model path, if it names a model of a known format (a ModelError otherwise): a file,
    or a SavedModel folder."""
    from tensorir.frontend.onnx import check_model_file

    p = Path(model)
    if p.is_dir() and model_format(p) == "tensorflow":
        return p
    return check_model_file(p)


def model_bytes(model: Any) -> bytes:
    """The bytes that identify a model (its tuning key): the file, a ModelProto serialized, or
    for a SavedModel folder a digest of every file in it."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    p = Path(model)
    if not p.is_dir():
        return p.read_bytes()
    h = hashlib.sha256()
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        h.update(str(f.relative_to(p)).encode())
        h.update(f.read_bytes())
    return h.digest()
