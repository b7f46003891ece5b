"""tensorir: a tensor compiler from ONNX / TensorFlow models to native code."""

from tensorir.errors import TirError
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType
from tensorir.runtime.reference import run_reference

__version__ = "0.1.0"

__all__ = [
    "Graph",
    "TensorType",
    "TirError",
    "Value",
    "__version__",
    "compile",
    "from_onnx",
    "load",
    "run_reference",
]


def compile(  # noqa: A001 - the public name the design promises
    model,
    target: str = "host",
    input_shapes=None,
    records=None,
    weights: str = "embedded",
):
    """Compile a model (path or onnx.ModelProto) to a native library; returns a loaded
    Module for host targets (`.run`, `.profile`, `.export`, `.set_num_threads`)."""
    import tempfile

    from tensorir.compiler import compile_model
    from tensorir.runtime.module import Module

    if records is not None:
        raise TirError("compile(records=...): tuning records are not supported yet")
    build = compile_model(model, target, input_shapes)
    out = build.write(tempfile.mkdtemp(prefix="tir-build-"), weights)
    if build.target.arch == "x86_64":
        return Module(out)
    from tensorir.runtime.qemu import QemuModule

    return QemuModule(out)


def load(directory):
    """Load a compiled host artifact (a folder written by `tir compile` or `.export`)."""
    from tensorir.runtime.module import Module

    return Module(directory)
