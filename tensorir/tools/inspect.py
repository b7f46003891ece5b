"""`tir inspect`: a summary of an ONNX model before compiling it."""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnx.helper

from tensorir.errors import TirError
from tensorir.frontend.onnx import check_graph, check_input_shapes, check_supported, from_onnx, load_model
from tensorir.graph.flops import graph_flops
from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType
from tensorir.passes.memory_plan import plan_memory


def _dims(vi: onnx.ValueInfoProto) -> str:
    tt = vi.type.tensor_type
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else "?"
    return f"{dtype}[{','.join(dims)}]"


def _human(n: float, unit: str = "") -> str:
    for suffix in ("", "K", "M", "G", "T"):
        if abs(n) < 1000 or suffix == "T":
            return f"{n:.3g}{suffix}{unit}" if suffix else f"{n:g}{unit}"
        n /= 1000
    return f"{n}{unit}"


def inspect_model(
    path: str,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    plan: bool = False,
    target: str | None = None,
    override_shapes: bool = False,
    signature: str = "serving_default",
    records: Any = None,
) -> str:
    """The summary `tir inspect` prints; with an OpenCL `target`, also which kernels run on
    the GPU and which ops have no GPU schedule (they run on the CPU, with transfers).
    `plan`: also the memory plan of the model compiled for `target` (default host) with
    `records`, as `tir compile` builds it. A malformed graph or a bad `input_shapes` entry is
    an error, not a summary line."""
    from tensorir.frontend import model_format

    if model_format(path) != "onnx":
        return inspect_graph_model(path, input_shapes, plan, target, override_shapes, signature, records)
    model = load_model(path)
    check_graph(model)
    check_input_shapes(model, input_shapes or {}, override_shapes)
    g = model.graph
    inits = {t.name for t in g.initializer}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), "?")
    lines = [f"model: {path}  (ir_version {model.ir_version}, opset {opset}, {len(g.node)} nodes)"]
    lines.append("inputs:")
    lines += [f"  {vi.name}: {_dims(vi)}" for vi in g.input if vi.name not in inits]
    lines.append("outputs:")
    lines += [f"  {vi.name}: {_dims(vi)}" for vi in g.output]
    sizes = [int(np.prod(t.dims, dtype=np.int64)) for t in g.initializer]
    nbytes = sum(
        s * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        for s, t in zip(sizes, g.initializer, strict=True)
    )
    lines.append(f"parameters: {sum(sizes):,} ({_human(nbytes, 'B')}) in {len(sizes)} initializers")
    hist = collections.Counter(n.op_type for n in g.node)
    lines.append("ops:")
    lines += [f"  {op:<24} {count}" for op, count in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))]
    try:
        check_supported(model)
    except TirError as e:
        lines.append(f"unsupported: {str(e).split(': ', 1)[1]}")
        lines.append("FLOPs: n/a (unsupported ops)")
        return "\n".join(lines)
    lines.append("unsupported: none")
    try:
        graph = from_onnx(model, input_shapes=input_shapes, override_shapes=override_shapes)
    except TirError as e:
        lines.append(f"FLOPs: n/a ({e})")
        return "\n".join(lines)
    flops = graph_flops(graph)
    lines.append(f"FLOPs: {_human(flops)} ({flops:,})")
    if plan:
        lines += _plan_lines(path, input_shapes, target, records, override_shapes, signature)
    if target is not None:
        lines += _placement_lines(graph, target)
    return "\n".join(lines)


def _placement_lines(graph: Graph, target_name: str) -> list[str]:
    """Per kernel of the optimized graph for `target`: GPU or CPU (no schedule of that kind)."""
    from tensorir.ops.kernel import default_schedule
    from tensorir.ops.registry import NoScheduleError
    from tensorir.pipeline import optimize
    from tensorir.target import get_target

    target = get_target(target_name)
    if target.kind == "llvm":
        return [f"target {target.name}: every kernel on the CPU"]
    g = optimize(graph, target=target)
    on_gpu, on_cpu = collections.Counter(), collections.Counter()
    for nid in g.op_nodes():
        node = g.node(nid)
        label = node.op
        if node.op == "fused":
            label = "fused(" + "+".join(st.op for st in node.attr["body"].steps) + ")"
        try:
            default_schedule(node.op, node.attr, target)
            on_gpu[label] += 1
        except NoScheduleError as e:
            on_cpu[f"{label}: {e}"] += 1
    lines = [
        f"target {target.name}: {sum(on_gpu.values())} kernels on the GPU, {sum(on_cpu.values())} on the CPU"
    ]
    lines.append("  on the CPU (no GPU schedule; transfers around them):" if on_cpu else "  on the CPU: none")
    lines += [f"    {k}  x{n}" for k, n in sorted(on_cpu.items())]
    return lines


def _plan_lines(
    path: str,
    input_shapes: Mapping[str, Sequence[int]] | None,
    target_name: str | None,
    records: Any,
    override_shapes: bool,
    signature: str,
) -> list[str]:
    """The memory of the model compiled as `tir compile` compiles it (same target, same tuning
    records: they choose the algorithms, hence the kernels' scratch): the workspace tir_create
    allocates (activations between kernels and the kernels' scratch, planned together), beside
    the activations alone, the no-reuse total and the lower bound; and the prepared weights
    tir_create computes, if any (compiler_prepare.py)."""
    from tensorir.pipeline import compile_model
    from tensorir.target import get_target

    target = get_target(target_name or "host")
    build = compile_model(
        path, target, input_shapes, records=records, override_shapes=override_shapes, signature=signature
    )
    m = build.manifest
    ws, nr, lb = m["workspace_bytes"], max(m["workspace_no_reuse"], 1), max(m["workspace_lower_bound"], 1)
    scratch = [n for f in build.kernels for n in scratch_bytes(f)]
    activations = plan_memory(build.graph)
    held = _count(len(activations.buffers), "activation tensor") + ", "
    held += _count(len(scratch), "kernel scratch buffer")
    lines = [
        f"memory plan (compiled for {target.name}; one workspace, allocated once by tir_create):",
        f"  workspace allocated {ws:>14,} B  ({_human(ws, 'B')}: {held}; "
        f"offsets: first fit, {m.get('workspace_order', 'size')})",
        f"    activations alone {activations.workspace:>14,} B  (the plan without the kernels' scratch)",
        f"    kernel scratch    {sum(scratch):>14,} B  in all (the largest {max(scratch, default=0):,} B; "
        "each alive only while its kernel runs)",
        f"  no-reuse total      {m['workspace_no_reuse']:>14,} B  (allocated = {ws / nr:.3f} x)",
        f"  lower bound         {m['workspace_lower_bound']:>14,} B  (allocated = {ws / lb:.3f} x)",
    ]
    if m.get("prepared_bytes"):
        n = len(m["prepare"])
        lines.append(
            f"  prepared weights    {m['prepared_bytes']:>14,} B  (allocated too, filled once by {n} kernel "
            f"calls from the {m['weights_bytes']:,} B of weights: Winograd's transformed weights)"
        )
    if target.kind == "opencl" and any(c.device == "cpu" for c in build.calls):
        lines.append("  (a device buffer of that size, and a host copy of it for the kernels on the CPU)")
    elif target.kind == "opencl":
        lines.append("  (a device buffer of that size)")
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def scratch_bytes(func: Any) -> list[int]:
    """The byte sizes of a kernel's scratch parameters (its last `num_scratch` ones)."""
    n = func.attrs.get("num_scratch", 0)
    return [TensorType(b.shape, b.dtype).nbytes for b in (func.params[len(func.params) - n :] if n else ())]


def inspect_graph_model(
    path: str,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    plan: bool = False,
    target: str | None = None,
    override_shapes: bool = False,
    signature: str = "serving_default",
    records: Any = None,
) -> str:
    """The summary of a model that is not ONNX (TensorFlow, TFLite), read from its imported
    graph: inputs, outputs, graph-op histogram, parameters, FLOPs (unsupported ops are an error
    from the import, listing them all)."""
    from tensorir.frontend import load_graph_any, model_format

    graph = load_graph_any(path, input_shapes, signature=signature, override_shapes=override_shapes)
    consts = [graph.node(n) for n in graph.nx.nodes if graph.node(n).op == "constant"]
    lines = [f"model: {path}  ({model_format(path)}, {len(graph.op_nodes())} graph ops after import)"]
    lines.append("inputs:")
    lines += [f"  {graph.node(n).name}: {graph.node(n).outputs[0]}" for n in graph.graph_inputs()]
    lines.append("outputs:")
    lines += [f"  {name}: {graph.type_of(v)}" for name, v in graph.outputs]
    nbytes = sum(c.outputs[0].nbytes for c in consts)
    params = sum(c.outputs[0].size for c in consts)
    lines.append(f"parameters: {params:,} ({_human(nbytes, 'B')}) in {len(consts)} constants")
    hist = collections.Counter(graph.node(n).op for n in graph.op_nodes())
    lines.append("ops (graph IR):")
    lines += [f"  {op:<24} {count}" for op, count in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))]
    lines.append("unsupported: none")
    flops = graph_flops(graph)
    lines.append(f"FLOPs: {_human(flops)} ({flops:,})")
    if plan:
        lines += _plan_lines(path, input_shapes, target, records, override_shapes, signature)
    if target is not None:
        lines += _placement_lines(graph, target)
    return "\n".join(lines)
