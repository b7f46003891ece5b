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
    signature: str = "serving_default",
    precision: str = "fp32",
    fuse_dwpw=None,
):
    """Compile a model (an ONNX path or onnx.ModelProto; a TensorFlow SavedModel folder, frozen
    .pb, .keras / .h5 or .tflite path) to a native library; returns it loaded by
    the target's backend: a Module for this machine (`.run`, `.profile`, `.export`,
    `.set_num_threads`), a qemu-run module for linux-arm64, an export-only Artifact for a
    device that cannot run here (android-arm64).
    `records`: tuned configs per workload key — a {key: config} dict or anything with
    `best(key)` (autotune.records.Records); workloads without one use the defaults.
    `signature`: which of a SavedModel's signatures to compile. `precision` "fp16": weights
    and activations in float16 (inputs and outputs stay float32; manifest "precision" says
    where it fell back to float32). `layout_block`, `fuse_dwpw`: the model-level knobs
    (pipeline.model_choices; default: the model's record in `records`, else the defaults)."""
    import tempfile

    from tensorir.pipeline import compile_model, load_folder

    build = compile_model(
        model,
        target,
        input_shapes,
        records=records,
        layout_block=layout_block,
        signature=signature,
        precision=precision,
        fuse_dwpw=fuse_dwpw,
    )
    return load_folder(build.write(tempfile.mkdtemp(prefix="tir-build-"), weights))


def load(directory):
    """Load a compiled folder (written by `tir compile` or `.export`) with the backend that
    wrote it."""
    from tensorir.pipeline import load_folder

    return load_folder(directory)
