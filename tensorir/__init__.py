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
    layout_block=None,
):
    """Compile a model (path or onnx.ModelProto) to a native library; returns a loaded
    Module for host targets (`.run`, `.profile`, `.export`, `.set_num_threads`).
    `records`: tuned configs per workload key — a {key: config} dict or anything with
    `best(key)` (autotune.records.Records); workloads without one use the defaults."""
    import tempfile

    from tensorir.compiler import compile_model
    from tensorir.runtime.module import Module

    build = compile_model(model, target, input_shapes, records=records, layout_block=layout_block)
    out = build.write(tempfile.mkdtemp(prefix="tir-build-"), weights)
    if build.target.arch == "x86_64":
        return Module(out)
    from tensorir.runtime.qemu import QemuModule

    return QemuModule(out)


def load(directory):
    """Load a compiled host artifact (a folder written by `tir compile` or `.export`)."""
    from tensorir.runtime.module import Module

    return Module(directory)
