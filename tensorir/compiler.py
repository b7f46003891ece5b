"""Whole-model compilation: ONNX -> optimized graph -> kernels -> one native library.

    build = compile_model("model.onnx", target="host")
    build.write("out/")        # libmodel.so, model.h, weights.bin (if external), manifest.json

Steps (each in a debug stage): import, graph passes + fusion (pipeline.optimize), one
kernel per op node (compute + default schedule, or a tuning record's), the memory plan
over activations and kernel scratch, argument bindings, the entry module (entry.py),
LLVM objects, the weights blob and the link.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tensorir import debug
from tensorir.codegen.entry import Arg, Copy, KernelCall, entry_ir
from tensorir.errors import TirError
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType
from tensorir.loop.ir import LoopFunc
from tensorir.ops.conv_algorithms import Specialized
from tensorir.ops.kernel import build_kernel
from tensorir.ops.workload import workload_key
from tensorir.passes.memory_plan import ALIGN, plan_memory, storage_root
from tensorir.target import Target, get_target

LIB_NAME = "libmodel.so"


@dataclass
class Build:
    """Everything a compiled model consists of, before it is written to a folder."""

    graph: Graph
    target: Target
    kernels: list[LoopFunc]
    calls: list[KernelCall]
    copies: list[Copy]
    ops: list[str]
    workspace: int
    weights: bytes
    manifest: dict[str, Any] = field(default_factory=dict)

    def write(self, out: str | os.PathLike, weights: str = "embedded") -> Path:
        from tensorir.compiler_link import write_artifact

        return write_artifact(self, Path(out), weights)


def _model_bytes(model: onnx.ModelProto | str | os.PathLike) -> bytes:
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    return Path(model).read_bytes()


class _Weights:
    """Constants the kernels read, packed into one 64-byte aligned blob."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.offsets: dict[Hashable, int] = {}

    def place(self, key: Hashable, make: Callable[[], np.ndarray]) -> int:
        if key not in self.offsets:
            data = np.ascontiguousarray(make()).tobytes()
            self.offsets[key] = self.size
            pad = (-len(data)) % ALIGN
            self.chunks.append(data + b"\0" * pad)
            self.size += len(data) + pad
        return self.offsets[key]

    def blob(self) -> bytes:
        return b"".join(self.chunks)


class _Binder:
    """Resolves every tensor of the graph to its storage: input, output, weight, workspace."""

    def __init__(self, g: Graph, offsets: Mapping[Value, int]) -> None:
        self.g = g
        self.inputs = {nid: k for k, nid in enumerate(g.graph_inputs())}
        self.offsets = offsets
        self.weights = _Weights()
        self.out_of_root: dict[Value, int] = {}
        for k, (_, v) in enumerate(g.outputs):
            root = storage_root(g, v)
            if g.node(root.node).op not in ("input", "constant"):
                self.out_of_root.setdefault(root, k)

    def arg(self, v: Value, transform: Callable | None = None) -> Arg:
        """Where `v` lives; `transform` (a weight the kernel reads rewritten, e.g. Winograd's
        U = G w G^T) places the transformed constant instead, once per (constant, transform)."""
        root = storage_root(self.g, v)
        node = self.g.node(root.node)
        if node.op == "input":
            return Arg("input", self.inputs[root.node])
        if node.op == "constant":
            if transform is not None:
                key = (root.node, getattr(transform, "key", id(transform)))
                return Arg("weight", self.weights.place(key, lambda: transform(node.value)))
            return Arg("weight", self.weights.place(root.node, lambda: node.value))
        if root in self.out_of_root:
            return Arg("output", self.out_of_root[root])
        return Arg("workspace", self.offsets[root])


def model_key(raw: bytes, input_shapes: Mapping[str, Sequence[int]] | None = None) -> str:
    """The workload key of model-level knobs (the layout block): the model bytes' hash and
    any input shapes given."""
    h = hashlib.sha256(raw)
    h.update(repr(sorted((k, list(v)) for k, v in (input_shapes or {}).items())).encode())
    return f"model #{h.hexdigest()[:16]}"


def lookup_config(records: Any, key: str) -> dict | None:
    """The best record's config for a workload: `records` is None, a {key: config} mapping,
    or anything with `best(key) -> config | None` (autotune.records.Records)."""
    if records is None:
        return None
    if isinstance(records, Mapping):
        return records.get(key)
    return records.best(key)


@dataclass
class _Kernel:
    func: LoopFunc
    spec: Specialized
    config: dict | None  # the tuning record's knobs, None for the defaults


def _const_args(g: Graph, nid: int) -> frozenset[int]:
    return frozenset(
        k for k, v in enumerate(g.inputs_of(nid)) if g.node(storage_root(g, v).node).op == "constant"
    )


def _kernels(g: Graph, target: Target, records: Any = None) -> dict[int, _Kernel]:
    """One kernel per op node; with the best tuning record's knobs where there is one.
    A record that no longer builds (an older template) falls back to the defaults."""
    kernels = {}
    for k, nid in enumerate(g.op_nodes()):
        node = g.node(nid)
        if storage_root(g, Value(nid)) != Value(nid):
            continue  # a view (reshape of an op's output): no kernel, no copy
        in_types = [g.type_of(v) for v in g.inputs_of(nid)]
        label = f"node '{node.name or nid}' ({node.op})"
        name = f"tir_k{k}_{node.op}"
        const = _const_args(g, nid)
        config = lookup_config(records, workload_key(node.op, in_types, node.attr))
        try:
            if config is not None:
                try:
                    func, spec = build_kernel(node.op, in_types, node.attr, target, config, name, const)
                    kernels[nid] = _Kernel(func, spec, config)
                    continue
                except TirError as e:
                    debug.log(1, f"{label}: tuning record ignored ({e})")
            func, spec = build_kernel(node.op, in_types, node.attr, target, None, name, const)
            kernels[nid] = _Kernel(func, spec, None)
        except TirError as e:
            raise TirError(f"{label}: {e}") from None
    return kernels


def _scratch_sizes(kernels: Mapping[int, _Kernel]) -> dict[int, list[int]]:
    out = {}
    for nid, kern in kernels.items():
        f = kern.func
        n = f.attrs.get("num_scratch", 0)
        bufs = f.params[len(f.params) - n :] if n else ()
        out[nid] = [TensorType(b.shape, b.dtype).nbytes for b in bufs]
    return out


def _bind(g: Graph, kernels: Mapping[int, _Kernel], plan) -> tuple[list[KernelCall], list[Copy], _Binder]:
    binder = _Binder(g, plan.offsets)
    calls = []
    for nid, kern in kernels.items():
        f, transforms = kern.func, kern.spec.transforms
        args = [binder.arg(v, transforms.get(k)) for k, v in enumerate(g.inputs_of(nid))]
        args += [binder.arg(Value(nid, i)) for i in range(len(g.node(nid).outputs))]
        args += [Arg("workspace", off) for off in plan.scratch_offsets.get(nid, [])]
        if len(args) != len(f.params):
            raise TirError(f"kernel {f.name}: {len(f.params)} parameters but {len(args)} bindings")
        calls.append(KernelCall(f.name, tuple(args)))
    copies = []
    for k, (_, v) in enumerate(g.outputs):
        src = binder.arg(v)
        if src != Arg("output", k):
            copies.append(Copy(Arg("output", k), src, g.type_of(v).nbytes))
    return calls, copies, binder


TUNABLE_ANCHORS = ("conv", "conv2d_nchwc", "dense", "matmul", "gemm", "max_pool", "avg_pool")


def _tunable(op: str, attrs: Mapping[str, Any]) -> bool:
    """Whether a kernel has schedule knobs worth a tuning record (an anchor op)."""
    body = attrs.get("body") if op == "fused" else None
    if body is not None and body.anchor is not None:
        op = body.steps[body.anchor].op
    return op in TUNABLE_ANCHORS


def _in_types(g: Graph, nid: int) -> list[TensorType]:
    return [g.type_of(v) for v in g.inputs_of(nid)]


def _io(g: Graph, values: Sequence[tuple[str, Value]]) -> list[dict[str, Any]]:
    return [{"name": n, "shape": list(g.type_of(v).shape), "dtype": g.type_of(v).dtype} for n, v in values]


def compile_model(
    model: onnx.ModelProto | str | os.PathLike,
    target: Target | str = "host",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    records: Any = None,
    layout_block: int | None = None,
) -> Build:
    """Compile a whole model for `target` (see the module docstring for the steps);
    `records` gives tuned knob configs per workload (see `lookup_config`) and the model-level
    `layout_block` (the NCHW[x]c channel block; argument > record > the target's lanes)."""
    from tensorir import __version__
    from tensorir.frontend.onnx import from_onnx
    from tensorir.pipeline import optimize

    target = get_target(target)
    raw = _model_bytes(model)
    graph_config = lookup_config(records, model_key(raw, input_shapes)) or {}
    block = layout_block or graph_config.get("layout_block")
    graph = optimize(from_onnx(model, input_shapes=input_shapes), target=target, layout_block=block)
    with debug.stage("kernels") as st:
        kernels = _kernels(graph, target, records)
        st.result = "\n\n".join(str(k.func) for k in kernels.values())
    with debug.stage("memory plan") as st:
        plan = plan_memory(graph, scratch=_scratch_sizes(kernels))
        st.result = plan.summary()
    calls, copies, binder = _bind(graph, kernels, plan)
    tuned = sum(k.config is not None for k in kernels.values())
    untuned_workloads = {
        workload_key(graph.node(nid).op, _in_types(graph, nid), graph.node(nid).attr)
        for nid, k in kernels.items()
        if k.config is None and _tunable(graph.node(nid).op, graph.node(nid).attr)
    }
    manifest = {
        "tensorir_version": __version__,
        "target": target.name,
        "triple": target.triple,
        "model_sha256": hashlib.sha256(raw).hexdigest(),
        "layout_block": block,
        "inputs": _io(graph, [(graph.node(n).name, Value(n)) for n in graph.graph_inputs()]),
        "outputs": _io(graph, graph.outputs),
        "workspace_bytes": plan.workspace,
        "workspace_lower_bound": plan.lower_bound,
        "workspace_no_reuse": plan.no_reuse,
        "weights_bytes": binder.weights.size,
        "tuned_kernels": tuned,
        "untuned_kernels": len(kernels) - tuned,
        "untuned_workloads": len(untuned_workloads),
        "kernels": [
            {
                "symbol": c.symbol,
                "op": graph.node(nid).op,
                "args": [a.to_json() for a in c.args],
                "workload": workload_key(graph.node(nid).op, _in_types(graph, nid), graph.node(nid).attr),
                **({"algorithm": kernels[nid].spec.algorithm} if kernels[nid].spec.algorithm else {}),
                **({"config": kernels[nid].config} if kernels[nid].config is not None else {}),
            }
            for c, nid in zip(calls, kernels, strict=True)
        ],
        "copies": [{"dst": c.dst.to_json(), "src": c.src.to_json(), "bytes": c.nbytes} for c in copies],
    }
    return Build(
        graph=graph,
        target=target,
        kernels=[k.func for k in kernels.values()],
        calls=calls,
        copies=copies,
        ops=[graph.node(n).op for n in kernels],
        workspace=plan.workspace,
        weights=binder.weights.blob(),
        manifest=manifest,
    )


def entry_module_ir(build: Build, embedded: bool) -> str:
    from tensorir.codegen.llvm import target_machine

    t = build.target
    layout = str(target_machine(t).target_data)
    sizes = (build.workspace, len(build.weights))
    return entry_ir(t.triple, layout, build.calls, build.copies, *sizes, embedded)
