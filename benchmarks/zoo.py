"""A deterministic model zoo for tests and benchmarks: real architectures, seeded weights.

Every model is built with `onnx.helper` alone (no downloads, no torch), at opset 17 with
static shapes, and is byte-for-byte the same on every build. Builders live in
`zoo_cnn.py` (MobileNetV2, ResNet, tiny CNN), `zoo_mobile.py` (SqueezeNet 1.1, MobileNetV1,
MobileNetV3-Small, DenseNet-121), `zoo_yolo.py` (a YOLOv8n-style detector) and `zoo_bert.py`
(BERT encoder).

    from benchmarks import zoo
    model = zoo.build("resnet50")
    feeds = zoo.sample_inputs(model)         # seeded inputs matching the graph inputs
    zoo.model_stats(model)                   # parameters and multiply-accumulates

    python -m benchmarks.zoo resnet50 -o resnet50.onnx
    python -m benchmarks.zoo --list
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
from collections.abc import Callable

import numpy as np
import onnx
import onnx.helper
import onnx.numpy_helper
import onnx.shape_inference

from benchmarks.zoo_bert import bert_encoder
from benchmarks.zoo_cnn import mobilenet_v2, resnet, resnet18, resnet50, tiny_cnn
from benchmarks.zoo_mobile import densenet, mobilenet_v1, mobilenet_v3_small, squeezenet1_1
from benchmarks.zoo_yolo import yolov8n

__all__ = [
    "MODELS",
    "bert_encoder",
    "build",
    "build_for_tests",
    "densenet",
    "mobilenet_v1",
    "mobilenet_v3_small",
    "mobilenet_v2",
    "model_stats",
    "resnet",
    "resnet18",
    "resnet50",
    "sample_inputs",
    "save",
    "squeezenet1_1",
    "tiny_cnn",
    "yolov8n",
]

MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "mobilenet_v2_224": functools.partial(mobilenet_v2, 224),
    "mobilenet_v2_96": functools.partial(mobilenet_v2, 96),
    "resnet18": resnet18,
    "resnet50": resnet50,
    "bert_encoder": bert_encoder,
    "tiny_cnn": tiny_cnn,
    "squeezenet1_1": squeezenet1_1,
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v3_small": mobilenet_v3_small,
    "yolov8n_320": functools.partial(yolov8n, 320),
    "densenet121": densenet,
}

# The tests (tests/e2e, tests/passes) run every zoo model; these build the same architectures
# at sizes that keep compiles, reference and memcheck runs short. SqueezeNet at 72: its last
# ceil-mode pool rounds up (8 -> 4), which none does at 224. The detector at 96: levels of 12, 6
# and 3 pixels. DenseNet: 4 dense blocks of 2-4 layers, channel counts 24 + 16k (blocks of 8,
# 16 and 4 mixed in its concats).
TEST_BUILDS: dict[str, Callable[[], onnx.ModelProto]] = {
    "squeezenet1_1": functools.partial(squeezenet1_1, 72),
    "mobilenet_v1": functools.partial(mobilenet_v1, 96),
    "mobilenet_v3_small": functools.partial(mobilenet_v3_small, 96),
    "yolov8n_320": functools.partial(yolov8n, 96),
    "densenet121": functools.partial(densenet, (2, 3, 4, 2), 16, 24, 64, name="densenet_small"),
}


def build(name: str) -> onnx.ModelProto:
    """Build the zoo model `name` (a key of MODELS)."""
    try:
        builder = MODELS[name]
    except KeyError:
        raise KeyError(f"no zoo model {name!r}; the zoo has {sorted(MODELS)}") from None
    return builder()


def build_for_tests(name: str) -> onnx.ModelProto:
    """The zoo model `name`, at its test size where TEST_BUILDS has one."""
    return TEST_BUILDS[name]() if name in TEST_BUILDS else build(name)


def save(name: str, path: str | os.PathLike) -> None:
    """Build the zoo model `name` and write it to `path` (one .onnx file, weights inside)."""
    onnx.save_model(build(name), os.fspath(path))


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def sample_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs for every graph input, in graph input order.

    Float inputs are standard normal (normalized images, embeddings). An integer input
    named like a mask gets a padding mask: ones, then zeros over a seeded tail of at most
    half its last axis. Other integer inputs are uniform in [0, 2).
    """
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in _graph_inputs(model):
        tt = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        shape = [d.dim_value for d in tt.shape.dim]
        if any(d <= 0 for d in shape):
            raise ValueError(f"input {vi.name!r} has a non-static shape {shape}")
        if np.issubdtype(dtype, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif "mask" in vi.name.lower() and shape:
            valid = shape[-1] - int(rng.integers(0, shape[-1] // 2 + 1))
            feeds[vi.name] = (np.arange(shape[-1]) < valid).astype(dtype) * np.ones(shape, dtype)
        else:
            feeds[vi.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def model_stats(model: onnx.ModelProto) -> dict[str, int]:
    """Parameter count and multiply-accumulates (Conv, Gemm, MatMul) of one inference.

    `params` counts every initializer element; `learnable_params` leaves out BN running
    statistics and scalar/shape constants, which is how torchvision counts parameters.
    """
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        shapes[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    for t in model.graph.initializer:
        shapes[t.name] = list(t.dims)
    stats_inputs = {n.input[i] for n in model.graph.node if n.op_type == "BatchNormalization" for i in (3, 4)}
    params = learnable = 0
    for t in model.graph.initializer:
        size = math.prod(t.dims)
        params += size
        if t.name not in stats_inputs and len(t.dims) >= 1 and t.data_type == onnx.TensorProto.FLOAT:
            learnable += size
    macs = 0
    for n in model.graph.node:
        if n.op_type == "Conv":
            w = shapes[n.input[1]]
            macs += math.prod(shapes[n.output[0]]) * math.prod(w[1:])
        elif n.op_type == "Gemm":
            a = shapes[n.input[0]]
            trans_a = any(x.name == "transA" and x.i for x in n.attribute)
            macs += math.prod(shapes[n.output[0]]) * (a[0] if trans_a else a[1])
        elif n.op_type == "MatMul":
            macs += math.prod(shapes[n.output[0]]) * shapes[n.input[0]][-1]
    return {"params": params, "learnable_params": learnable, "macs": macs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zoo", description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", choices=sorted(MODELS), help="zoo model to write")
    parser.add_argument("-o", "--output", help="output .onnx file (default: NAME.onnx)")
    parser.add_argument("--list", action="store_true", help="list the zoo models with their sizes")
    args = parser.parse_args(argv)
    if args.list:
        for name in MODELS:
            s = model_stats(build(name))
            print(f"{name:18} {s['learnable_params'] / 1e6:8.3f} M params {s['macs'] / 1e9:8.3f} GMACs")
        return 0
    if not args.name:
        parser.error("give a model NAME or --list")
    path = args.output or f"{args.name}.onnx"
    model = build(args.name)
    onnx.save_model(model, path)
    s = model_stats(model)
    print(f"wrote {path}: {args.name}, {s['learnable_params']:,} params, {s['macs']:,} MACs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
