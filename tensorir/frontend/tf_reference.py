"""Reference runs of `tir run --compare-ort` for the models that are not ONNX, in the TensorFlow
child process (tf_child.py; never imported into tensorir's own process):

    .tflite                             tf.lite.Interpreter on the file
    SavedModel, .pb, .keras, .h5        the frozen graph the import reads (tf_load), run by TensorFlow

`open_reference` loads a model and returns a handle; `run_reference(handle, feeds)` gives its
outputs by name (the names the import gives the graph's outputs: TFLite tensor names, the
signature's output names).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from tensorir.errors import ModelError, TirError
from tensorir.frontend.tf_load import freeze_model, import_tf

Runner = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]
_open: dict[int, Runner] = {}
_handles = itertools.count(1)


def open_reference(path: str, signature: str = "serving_default") -> int:
    """Load the model at `path` for reference runs; a handle for run_reference."""
    runner = _tflite_runner(path) if Path(path).suffix.lower() == ".tflite" else _tf_runner(path, signature)
    handle = next(_handles)
    _open[handle] = runner
    return handle


def run_reference(handle: int, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return _open[handle](feeds)


def close_reference(handle: int) -> None:
    _open.pop(handle, None)


def _tflite_runner(path: str) -> Runner:
    tf = import_tf("--compare-ort on a .tflite model runs tf.lite.Interpreter, which needs TensorFlow")
    try:
        interp = tf.lite.Interpreter(model_path=path)
    except (ValueError, RuntimeError) as e:
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"{path}: tf.lite.Interpreter cannot load it: {why}") from None

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        inputs = interp.get_input_details()
        for d in inputs:
            if tuple(d["shape"]) != feeds[d["name"]].shape:  # --input-shape changed it
                interp.resize_tensor_input(d["index"], feeds[d["name"]].shape)
        interp.allocate_tensors()
        for d in inputs:
            interp.set_tensor(d["index"], np.ascontiguousarray(feeds[d["name"]], d["dtype"]))
        try:
            interp.invoke()
        except RuntimeError as e:
            raise TirError(f"--compare-ort: tf.lite.Interpreter fails on {path}: {e}") from None
        return {d["name"]: interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()}

    return run


def _tf_runner(path: str | os.PathLike, signature: str) -> Runner:
    """The model's frozen graph run by TensorFlow."""
    model = freeze_model(path, signature)
    tf = import_tf("TensorFlow models need TensorFlow")

    def body() -> None:
        tf.compat.v1.import_graph_def(model.graph_def, name="")

    names = [n for n, _, _ in model.inputs]
    wrapped = tf.compat.v1.wrap_function(body, [])
    fn = wrapped.prune(feeds=[f"{n}:0" for n in names], fetches=[t for _, t in model.outputs])

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outs = fn(*[tf.constant(feeds[n]) for n in names])
        return {name: np.asarray(o) for (name, _), o in zip(model.outputs, outs, strict=True)}

    return run
