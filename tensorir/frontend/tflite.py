"""TFLite frontend: a `.tflite` flatbuffer -> the graph IR, without TensorFlow.

    graph = from_tflite("model.tflite", input_shapes={"input": (1, 224, 224, 3)})

The file is read into plain records (`TflTensor`, `TflOp`: tflite_reader.py), checked (every
quantized tensor of a supported kind, every op with a converter), then every operator of the
main subgraph, in dependency order, goes through the converter of its builtin code
(`tflite_ops.py`) on one `TfliteContext` (tflite_context.py: the graph being built, and the
NHWC / NCHW twin scheme that keeps transposes out from between convolutions). Graph inputs
and outputs keep TFLite's NHWC shapes and names.

Supported: float32 models, fp16-weight models (DEQUANTIZE of float16 constants) and fully
quantized int8 / uint8 models (TensorFlow's full-integer post-training quantization): each
quantized tensor becomes float arithmetic on its integer values (tflite_quant.py), every op runs
as its float op between a dequantize of its inputs and a quantize of its output. Other
quantized tensors (int16 activations of 16x8 models, int64 biases) are refused with one line
naming the first one.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import networkx as nx
import numpy as np

from tensorir.debug import stage
from tensorir.errors import ModelError, TirError, UnsupportedOpError
from tensorir.frontend import tflite_quant as tq
from tensorir.frontend.tflite_context import TO_NCHW, TO_NHWC, TfliteContext, to_cf, to_cl
from tensorir.frontend.tflite_quant import QuantParams
from tensorir.frontend.tflite_reader import QUANT_DTYPES, TflModel, TflOp, TflTensor, read_tflite
from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType

# what this module offered before the reader and the context moved out (tflite_ops_*.py and the
# tests import these from here)
__all__ = [
    "TO_NCHW",
    "TO_NHWC",
    "QuantParams",
    "TfliteContext",
    "TflModel",
    "TflOp",
    "TflTensor",
    "check_quantization",
    "check_supported",
    "from_tflite",
    "read_tflite",
    "to_cf",
    "to_cl",
]


# ---- checks ----------------------------------------------------------------------------
def check_quantization(m: TflModel) -> None:
    """Refuse quantized tensors other than int8 / uint8 activations (per tensor) and int8 / uint8 /
    int32 constants (per tensor or per channel), with one line naming the first one."""
    for t in m.tensors:
        if not t.quantization or t.dtype not in QUANT_DTYPES or t.qparams is None:
            continue
        what = (
            f"{m.path}: quantized model: tensor #{t.index} '{t.name}' is {t.dtype} "
            f"with {t.quantization} quantization"
        )
        p = t.qparams
        if not np.all(np.isfinite(p.scale)) or np.any(p.scale <= 0):
            raise ModelError(f"{what} and a scale that is not positive and finite")
        if t.data is not None:
            if t.dtype not in tq.CONSTANT_DTYPES:
                raise UnsupportedOpError(
                    f"{what}; tensorir imports int8 / uint8 weights and int32 biases "
                    "(16x8 quantization, int64 biases, is not supported)"
                )
            if p.per_channel and not (0 <= p.axis < len(t.shape) and t.shape[p.axis] == p.scale.size):
                raise ModelError(f"{what}: {p.scale.size} scales do not fit its shape {list(t.shape)}")
        elif t.dtype not in tq.ACTIVATION_DTYPES:
            raise UnsupportedOpError(
                f"{what}; tensorir imports int8 / uint8 activations only "
                "(16x8 quantization, int16 activations, is not supported)"
            )
        elif p.per_channel:
            raise UnsupportedOpError(f"{what}; activations must be quantized per tensor")


def check_supported(m: TflModel) -> None:
    """One error listing every unsupported op (builtin: name and index; custom: its code)."""
    from tensorir.frontend.tflite_ops import CONVERTERS

    missing: dict[str, list[int]] = collections.defaultdict(list)
    for op in m.ops:
        if op.key in CONVERTERS:
            continue
        missing[f"custom op '{op.custom_code}'" if op.code == "CUSTOM" else op.code].append(op.index)
    if missing:
        parts = [
            f"{k} (op #{', #'.join(map(str, v[:3]))}{', ...' if len(v) > 3 else ''})"
            for k, v in missing.items()
        ]
        raise UnsupportedOpError(f"{m.path}: unsupported TFLite ops: {'; '.join(parts)}")


def _sorted_ops(m: TflModel) -> list[TflOp]:
    """Ops in dependency order (the file's order is one, but nothing guarantees it)."""
    producer = {o: op.index for op in m.ops for o in op.outputs}
    dag = nx.DiGraph()
    dag.add_nodes_from(range(len(m.ops)))
    for op in m.ops:
        for i in op.inputs:
            if i in producer:
                dag.add_edge(producer[i], op.index)
            elif i >= 0 and m.tensors[i].data is None and i not in m.inputs:
                raise ModelError(
                    f"{m.path}: {op.label} reads tensor '{m.tensors[i].name}', which nothing defines"
                )
    try:
        order = list(nx.lexicographical_topological_sort(dag))
    except nx.NetworkXUnfeasible:
        raise ModelError(f"{m.path}: the graph has a cycle") from None
    return [m.ops[k] for k in order]


# ---- import ---------------------------------------------------------------------------------
def _input_type(t: TflTensor, input_shapes: Mapping[str, Sequence[int]]) -> TensorType:
    shape = tuple(int(d) for d in input_shapes.get(t.name, t.shape))
    if any(d < 0 for d in shape):
        raise ModelError(
            f"input '{t.name}' has an unknown dimension {list(shape)}; give it with input_shapes"
        )
    return TensorType(shape, t.dtype)


def _add_inputs(ctx: TfliteContext, m: TflModel, input_shapes: Mapping[str, Sequence[int]]) -> None:
    names = {m.tensors[i].name for i in m.inputs}
    unknown = sorted(set(input_shapes) - names)
    if unknown:
        raise ModelError(f"{m.path}: --input-shape names '{unknown[0]}', which is not a model input")
    for i in m.inputs:
        t = m.tensors[i]
        ctx.values[i] = ctx.graph.add_input(t.name, _input_type(t, input_shapes))
        if ctx.quant(i) is not None:
            ctx.qvalues[i] = (ctx.values[i], False)
            ctx.values[i] = tq.dequantize(ctx.graph, ctx.values[i], ctx.quant(i), name=f"{t.name}/dq")


def _convert(ctx: TfliteContext, op: TflOp, fn: Callable[[TfliteContext, TflOp], None]) -> None:
    try:
        fn(ctx, op)
    except TirError as e:
        raise type(e)(f"{ctx.model.path}: {e}") from None
    except Exception as e:  # a converter bug or a malformed op: name the op
        raise ModelError(f"{ctx.model.path}: {op.label}: cannot convert: {type(e).__name__}: {e}") from e


def from_tflite(path: str | os.PathLike, input_shapes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Import a .tflite model (float32, fp16 weights, or int8 / uint8 quantized) into a Graph.

    input_shapes: {input tensor name: shape} to replace an input's stored shape (NHWC, as
    TFLite declares it; e.g. another batch size or image size)."""
    with stage("import tflite") as st:
        st.result = _import(path, dict(input_shapes or {}))
    return st.result


def _import(path: str | os.PathLike, input_shapes: dict[str, Sequence[int]]) -> Graph:
    from tensorir.frontend.tflite_ops import CONVERTERS

    m = read_tflite(path)
    check_quantization(m)
    check_supported(m)
    ops = _sorted_ops(m)
    graph = Graph(Path(path).stem or "main")
    ctx = TfliteContext(graph, m)
    _add_inputs(ctx, m, input_shapes)
    for op in ops:
        _convert(ctx, op, CONVERTERS[op.key])
    for i in m.outputs:
        if i not in ctx.values and i not in ctx.twins and m.tensors[i].data is None:
            raise ModelError(f"{m.path}: graph output '{m.tensors[i].name}' is produced by no op")
    graph.set_outputs((m.tensors[i].name, ctx.output(i)) for i in m.outputs)
    _prune(graph)
    return graph


def _prune(graph: Graph) -> None:
    """Drop nodes no output depends on (unused twins, folded shape computations)."""
    live: set[int] = set()
    for _, v in graph.outputs:
        live |= {v.node} | nx.ancestors(graph.nx, v.node)
    for nid in list(graph.nx.nodes):
        if nid not in live and graph.node(nid).op != "input":
            graph.remove_node(nid)
