"""Loading a TensorFlow model, in the TensorFlow child process (tf_child.py) only: TensorFlow is
imported here, never into tensorir's own process (tensorflow.py says why).

A SavedModel signature or a Keras model is traced to a concrete function and its variables frozen
to constants (convert_variables_to_constants_v2); a .pb is read as a frozen GraphDef. `load_tf_model`
returns the frozen graph as plain data for the parent (a TFModel of TFNode records: every attribute
decoded to a Python value or a numpy array); `freeze_model` the GraphDef itself (for the reference
runs of tf_reference.py, which stay in this process).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tensorir.errors import ModelError, TirError
from tensorir.frontend.tensorflow import KERAS_SUFFIXES, TFModel, TFNode, node_of


def import_tf(need: str = "TensorFlow models need TensorFlow at import time") -> Any:
    """The tensorflow module; one line if it is missing, starting with `need` (what needs it)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
    except ImportError:
        raise TirError(f"{need}: pip install 'tensorir[tf]' (tensorflow-cpu)") from None
    return tf


@dataclass
class Frozen:
    """A frozen GraphDef (a protobuf of TensorFlow's) with the model's inputs and outputs, as in
    TFModel."""

    graph_def: Any
    inputs: list[tuple[str, tuple[int | None, ...] | None, str]]
    outputs: list[tuple[str, str]]
    name: str


def load_tf_model(path: str, signature: str = "serving_default") -> TFModel:
    """The model at `path` (checked by tensorflow.load_tf_model) frozen, as plain data."""
    f = freeze_model(path, signature)
    tf = import_tf()
    nodes = [TFNode(n.name, n.op, list(n.input), _attrs(tf, n)) for n in f.graph_def.node]
    return TFModel(nodes, f.inputs, f.outputs, f.name)


def freeze_model(path: str | os.PathLike, signature: str = "serving_default") -> Frozen:
    """Read and freeze a TensorFlow model; a ModelError naming the file when it cannot."""
    p = Path(path)
    tf = import_tf()
    if p.is_dir():
        return _load_saved_model(tf, p, signature)
    if p.suffix.lower() in KERAS_SUFFIXES:
        return _load_keras(tf, p)
    return _load_graph_def(tf, p)


_UNDECODED = object()


def _attrs(tf: Any, node: Any) -> dict[str, Any]:
    """The node's attributes that have a plain value (tensorflow.TFContext.attr reads them)."""
    decoded = {name: attr_value(tf, a) for name, a in node.attr.items()}
    return {k: v for k, v in decoded.items() if v is not _UNDECODED}


def attr_value(tf: Any, a: Any) -> Any:
    """An AttrValue as a Python value: str, int, float, bool, a numpy dtype name, an array, a
    list (its first non-empty field of ints, floats, strings, bools); _UNDECODED for shapes,
    functions and what numpy cannot hold."""
    kind = a.WhichOneof("value")
    try:
        if kind == "s":
            return a.s.decode(errors="replace")
        if kind in ("i", "f", "b"):
            return getattr(a, kind)
        if kind == "type":
            return np.dtype(tf.dtypes.as_dtype(a.type).as_numpy_dtype).name
        if kind == "tensor":
            return tf.make_ndarray(a.tensor)
    except (TypeError, ValueError, KeyError, AttributeError):  # what numpy cannot hold
        return _UNDECODED
    if kind == "list":
        for field in ("i", "f", "s", "b"):
            vals = list(getattr(a.list, field))
            if vals:
                return [v.decode(errors="replace") for v in vals] if field == "s" else vals
        return []
    return _UNDECODED


def _load_saved_model(tf: Any, p: Path, signature: str) -> Frozen:
    try:
        loaded = tf.saved_model.load(str(p))
    except Exception as e:  # TF raises many kinds for a broken folder
        loaded = _load_without_slots(tf, p, e)
    sigs = dict(loaded.signatures)
    if signature not in sigs:
        have = ", ".join(sorted(sigs)) or "none"
        raise ModelError(f"{p}: no signature '{signature}' (--signature); the SavedModel has: {have}")
    fn = sigs[signature]
    outs = fn.structured_outputs
    names = (
        sorted(outs) if isinstance(outs, dict) else [f"output_{i}" for i in range(len(tf.nest.flatten(outs)))]
    )
    return _freeze(tf, fn, names, p.name)


def _load_without_slots(tf: Any, p: Path, error: Exception) -> Any:
    """The SavedModel loaded with its optimizer's slot variables left out of the object graph: a
    Keras 2 model saved with its optimizer names slots that TF >= 2.16 cannot revive ('_UserObject'
    object has no attribute 'add_slot'); inference never reads them. A copy of saved_model.pb
    without them, next to links to the original variables and assets."""
    import tempfile

    from tensorflow.core.protobuf import saved_model_pb2

    failed = ModelError(f"{p}: cannot load the SavedModel: {_first_line(error)}")
    sm = saved_model_pb2.SavedModel()
    try:
        sm.ParseFromString((p / "saved_model.pb").read_bytes())
    except Exception:
        raise failed from None
    nodes = [n for g in sm.meta_graphs for n in g.object_graph_def.nodes if n.slot_variables]
    if not nodes:
        raise failed
    for n in nodes:
        del n.slot_variables[:]
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "saved_model.pb").write_bytes(sm.SerializeToString())
        for sub in p.iterdir():
            if sub.name != "saved_model.pb":
                (Path(d) / sub.name).symlink_to(sub.resolve())
        level = tf.get_logger().level
        tf.get_logger().setLevel("ERROR")  # one warning per slot value left in the checkpoint
        try:
            return tf.saved_model.load(d)
        except Exception:
            raise failed from None
        finally:
            tf.get_logger().setLevel(level)


def _load_keras(tf: Any, p: Path) -> Frozen:
    import keras

    try:
        model = keras.models.load_model(str(p), compile=False)
    except Exception as e:
        raise ModelError(f"{p}: cannot load the Keras model: {_first_line(e)}") from None
    specs = [tf.TensorSpec(t.shape, t.dtype, name=_keras_name(t, i)) for i, t in enumerate(model.inputs)]

    def call(*xs: Any) -> Any:
        return model(list(xs) if len(xs) > 1 else xs[0], training=False)

    fn = tf.function(call).get_concrete_function(*specs)
    names = [_keras_name(t, i, "output") for i, t in enumerate(model.outputs)]
    return _freeze(tf, fn, names, p.stem)


def _keras_name(t: Any, i: int, kind: str = "input") -> str:
    name = str(getattr(t, "name", "") or f"{kind}_{i}")
    return name.split(":")[0].replace("/", "_")


def _freeze(tf: Any, fn: Any, out_names: list[str], name: str) -> Frozen:
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    frozen = convert_variables_to_constants_v2(fn)
    gd = frozen.graph.as_graph_def()
    inputs = [
        (t.name.split(":")[0], _dims(t.shape), t.dtype.as_numpy_dtype().dtype.name) for t in frozen.inputs
    ]
    tensors = [t.name for t in frozen.outputs]
    if len(out_names) != len(tensors):
        out_names = [f"output_{i}" for i in range(len(tensors))]
    return Frozen(gd, inputs, list(zip(out_names, tensors, strict=True)), name)


def _dims(shape: Any) -> tuple[int | None, ...] | None:
    if shape.rank is None:
        return None
    return tuple(None if d is None else int(d) for d in shape.as_list())


def _load_graph_def(tf: Any, p: Path) -> Frozen:
    gd = tf.compat.v1.GraphDef()
    try:
        gd.ParseFromString(p.read_bytes())
    except Exception as e:
        raise ModelError(
            f"{p}: not a valid frozen GraphDef (truncated or not a .pb graph): {_first_line(e)}"
        ) from None
    if not gd.node:
        raise ModelError(f"{p}: not a valid frozen GraphDef (no nodes)")
    inputs = []
    for n in gd.node:
        if n.op == "Placeholder":
            shape = tf.TensorShape(n.attr["shape"].shape) if "shape" in n.attr else tf.TensorShape(None)
            dtype = tf.dtypes.as_dtype(n.attr["dtype"].type).as_numpy_dtype().dtype.name
            inputs.append((n.name, _dims(shape), dtype))
    used = {node_of(i) for n in gd.node for i in n.input}
    sinks = [
        n for n in gd.node if n.name not in used and n.op not in ("NoOp", "Const", "Placeholder", "Assert")
    ]
    if not sinks:
        raise ModelError(f"{p}: the GraphDef has no output node")
    return Frozen(gd, inputs, [(n.name, f"{n.name}:0") for n in sinks], p.stem)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"
