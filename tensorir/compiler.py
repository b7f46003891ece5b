"""The backend-neutral middle of a whole-model compile (the order is in pipeline.py):

    lower_kernels(graph, target, records)   one loop function per op node (compute +
                                            schedule of the target's kind, or a record's)
    bind_plan(graph, kernels, memory_plan)  every kernel argument -> input/output/weight/
                                            prepared/workspace (tensorir/plan.py), weights
                                            blob, prepare calls (compiler_prepare.py)
    make_manifest(...)                      what manifest.json says about the build

`Build` holds the result; `Build.write(out)` hands it to the target's backend
(tensorir/backends/) for code generation and packaging.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx

from tensorir import debug, planted_bug
from tensorir.compiler_loop import LoopKernel, bind_loop, compile_loop
from tensorir.compiler_prepare import Prepared
from tensorir.errors import TirError
from tensorir.graph.graph import Graph, Value
from tensorir.graph.types import TensorType
from tensorir.kernel_cache import optimized
from tensorir.loop.ir import LoopFunc
from tensorir.ops.conv_algorithms import KernelTransform, Specialized
from tensorir.ops.kernel import build_kernel
from tensorir.ops.registry import NoScheduleError, is_tunable
from tensorir.ops.workload import workload_key
from tensorir.passes.memory_plan import storage_root
from tensorir.plan import Arg, Copy, KernelCall, LoopSpan
from tensorir.runtime.lengths import output_specs
from tensorir.target import Target
from tensorir.weight_blob import WeightBlob

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
    nodes: list[int] = field(default_factory=list)  # the graph node of each kernel, in kernel order
    loops: list[LoopSpan] = field(default_factory=list)  # calls run as loops (compiler_loop.py)
    prepares: list[KernelCall] = field(default_factory=list)  # run once by tir_create, in order
    prepare_kernels: list[LoopFunc] = field(default_factory=list)  # what they call
    prepared: int = 0  # bytes of the prepared-weights block (compiler_prepare.py)
    released: tuple[int, int] = (0, 0)  # the weights only prepare calls read (compiler_prepare.sources_last)

    def write(self, out: str | os.PathLike, weights: str = "embedded") -> Path:
        """Code generation and packaging by the target's backend (pipeline.write_build)."""
        from tensorir.pipeline import write_build

        return write_build(self, Path(out), weights)


def model_bytes(model: onnx.ModelProto | str | os.PathLike) -> bytes:
    """The bytes that identify a model (a file's, a SavedModel folder's digest)."""
    from tensorir.frontend import model_bytes as frontend_model_bytes

    return frontend_model_bytes(model)


class _Binder:
    """Resolves every tensor of the graph to its storage: input, output, weight, prepared,
    workspace. `prepared`: where `KernelTransform`s of constants are computed at start-up
    (a CPU build's); None: every transform at compile time, into the weights."""

    def __init__(self, g: Graph, offsets: Mapping[Value, int], prepared: Prepared | None = None) -> None:
        self.g = g
        self.inputs = {nid: k for k, nid in enumerate(g.graph_inputs())}
        self.offsets = offsets
        self.weights = WeightBlob()
        self.prepared = prepared
        self.out_of_root: dict[Value, int] = {}
        for k, (_, v) in enumerate(g.outputs):
            root = storage_root(g, v)
            if g.node(root.node).op not in ("input", "constant"):
                self.out_of_root.setdefault(root, k)

    def arg(self, v: Value, transform: Callable | None = None) -> Arg:
        """Where `v` lives; `transform` (a weight the kernel reads rewritten, e.g. Winograd's
        U = G w G^T) places the transformed constant instead, once per (constant, transform):
        in the weights, or prepared at start-up from the constant (a KernelTransform, when
        the build prepares)."""
        root = storage_root(self.g, v)
        node = self.g.node(root.node)
        if node.op == "input":
            return Arg("input", self.inputs[root.node])
        if node.op == "constant":
            if transform is None:
                return Arg("weight", self.weights.place(root.node, lambda: node.value))
            key = (root.node, getattr(transform, "key", id(transform)))
            if self.prepared is not None and isinstance(transform, KernelTransform):
                w = self.arg(root)
                return self.prepared.place(key, w, self.g.type_of(root), transform)
            return Arg("weight", self.weights.place(key, lambda: transform(node.value)))
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
    device: str = "cpu"  # "gpu": scheduled for an OpenCL target; "cpu": an LLVM kernel


def _const_args(g: Graph, nid: int) -> frozenset[int]:
    return frozenset(
        k for k, v in enumerate(g.inputs_of(nid)) if g.node(storage_root(g, v).node).op == "constant"
    )


def lower_kernels(
    g: Graph, target: Target, records: Any = None, prefix: str = "tir_", in_place: Any = ()
) -> dict[int, Any]:
    """One kernel per op node; with the best tuning record's knobs where there is one.
    A record that no longer builds (an older template) falls back to the defaults. For an
    OpenCL target, an op with no GPU schedule is lowered for the host CPU instead
    (`device` "cpu"; the backend inserts the transfers). The loop functions are as
    lowered, before the loop passes (`optimize_kernels`). A `loop` node's body is compiled
    as a model of its own (a LoopKernel, compiler_loop.py); `prefix` starts every symbol.
    `in_place`: concat nodes whose inputs are written into their slices (no kernel)."""
    kernels = {}
    to_break = planted_bug.wanted()  # TEST ONLY (tensorir/planted_bug.py): None in normal use
    for k, nid in enumerate(g.op_nodes()):
        node = g.node(nid)
        if storage_root(g, Value(nid)) != Value(nid) or nid in in_place:
            continue  # a view (reshape of an op's output), a copy-free concat: no kernel
        label = f"node '{node.name or nid}' ({node.op})"
        try:
            if node.op == "loop":
                kernels[nid] = compile_loop(g, nid, target, records, f"{prefix}l{k}_")
                continue
            kernels[nid] = _lower_node(g, nid, f"{prefix}k{k}_{node.op}", target, records, label)
        except TirError as e:
            raise TirError(f"{label}: {e}") from None
        if to_break and _break_for_test(g, nid, kernels[nid], to_break):
            to_break = None
    return kernels


def _break_for_test(g: Graph, nid: int, kern: _Kernel, text: str) -> bool:
    """TIR_TEST_BREAK_KERNEL: make this kernel wrong on purpose if it is the one named."""
    node = g.node(nid)
    if not planted_bug.matches(text, node.name, node.op, workload_key(node.op, _in_types(g, nid), node.attr)):
        return False
    broken = planted_bug.break_kernel(kern.func, len(_in_types(g, nid)), _const_args(g, nid))
    if broken is not None:
        kern.func = broken
    return broken is not None


def _lower_node(g: Graph, nid: int, name: str, target: Target, records: Any, label: str) -> _Kernel:
    node = g.node(nid)
    in_types = [g.type_of(v) for v in g.inputs_of(nid)]
    const = _const_args(g, nid)
    device = "gpu" if target.kind == "opencl" else "cpu"
    config = lookup_config(records, workload_key(node.op, in_types, node.attr))
    if config is not None:
        try:
            func, spec = build_kernel(node.op, in_types, node.attr, target, config, name, const, passes=False)
            return _Kernel(func, spec, config, device)
        except NoScheduleError:
            pass
        except TirError as e:
            debug.log(1, f"{label}: tuning record ignored ({e})")
    try:
        func, spec = build_kernel(node.op, in_types, node.attr, target, None, name, const, passes=False)
        return _Kernel(func, spec, None, device)
    except NoScheduleError as e:
        if target.kind == "llvm":
            raise
        debug.log(1, f"{label}: on the CPU ({e})")
    cpu = target.cpu_target()
    func, spec = build_kernel(node.op, in_types, node.attr, cpu, None, name, const, passes=False)
    return _Kernel(func, spec, None, "cpu")


def optimize_kernels(kernels: dict[int, Any]) -> dict[int, Any]:
    """The loop passes (simplify, vectorize, unroll; loop/passes.py) over every kernel (a loop
    body's ran when it was compiled), through the cache of optimized kernels (kernel_cache.py)."""
    return {
        nid: k if isinstance(k, LoopKernel) else _Kernel(optimized(k.func), k.spec, k.config, k.device)
        for nid, k in kernels.items()
    }


def scratch_sizes(kernels: Mapping[int, _Kernel]) -> dict[int, list[int]]:
    out = {}
    for nid, kern in kernels.items():
        if isinstance(kern, LoopKernel):
            out[nid] = kern.scratch()
            continue
        f = kern.func
        n = f.attrs.get("num_scratch", 0)
        bufs = f.params[len(f.params) - n :] if n else ()
        out[nid] = [TensorType(b.shape, b.dtype).nbytes for b in bufs]
    return out


@dataclass
class Bound:
    """bind_plan's result: the calls in order, the final copies, the loops among the calls, and
    the manifest entries of the calls inside loops (by call index)."""

    calls: list[KernelCall]
    copies: list[Copy]
    binder: _Binder
    loops: list[LoopSpan] = field(default_factory=list)
    loop_entries: dict[int, dict] = field(default_factory=dict)


def bind_plan(g: Graph, kernels: Mapping[int, Any], plan, prepared: Prepared | None = None) -> Bound:
    """Kernel calls and final copies over the memory plan's storage (tensorir/plan.py);
    `prepared` (a CPU build's): the block its weight transforms are prepared into."""
    binder = _Binder(g, plan.offsets, prepared)
    calls: list[KernelCall] = []
    out = Bound(calls, [], binder)
    for nid, kern in kernels.items():
        if isinstance(kern, LoopKernel):
            scratch = plan.scratch_offsets[nid]
            body, spans, entries = bind_loop(
                g, nid, kern, binder.arg, binder.weights, scratch, len(calls), binder.prepared
            )
            out.loop_entries.update(zip(range(len(calls), len(calls) + len(body)), entries, strict=True))
            calls += body
            out.loops += spans
            continue
        f, transforms = kern.func, kern.spec.transforms
        args = [binder.arg(v, transforms.get(k)) for k, v in enumerate(g.inputs_of(nid))]
        args += [binder.arg(Value(nid, i)) for i in range(len(g.node(nid).outputs))]
        args += [Arg("workspace", off) for off in plan.scratch_offsets.get(nid, [])]
        if len(args) != len(f.params):
            raise TirError(f"kernel {f.name}: {len(f.params)} parameters but {len(args)} bindings")
        sizes = tuple(TensorType(p.shape, p.dtype).nbytes for p in f.params)
        guard = tuple((binder.arg(flag), bool(p)) for flag, p in g.guards.get(nid, ()))
        calls.append(KernelCall(f.name, tuple(args), kern.device, sizes, guard))
    for k, (_, v) in enumerate(g.outputs):
        src = binder.arg(v)
        if src != Arg("output", k):
            out.copies.append(Copy(Arg("output", k), src, g.type_of(v).nbytes))
    return out


def _in_types(g: Graph, nid: int) -> list[TensorType]:
    return [g.type_of(v) for v in g.inputs_of(nid)]


def _io(g: Graph, values: Sequence[tuple[str, Value]]) -> list[dict[str, Any]]:
    return [{"name": n, "shape": list(g.type_of(v).shape), "dtype": g.type_of(v).dtype} for n, v in values]


def _outputs_io(g: Graph) -> list[dict[str, Any]]:
    """The outputs' entries, with the length keys of runtime/lengths.py."""
    specs = output_specs([n for n, _ in g.outputs], g.output_lengths)
    return [{**io, **spec} for io, spec in zip(_io(g, g.outputs), specs, strict=True)]


def make_manifest(
    raw: bytes,
    graph: Graph,
    target: Target,
    all_kernels: Mapping[int, Any],
    bound: Bound,
    plan,
    block: int | None,
    released: tuple[int, int] = (0, 0),
) -> dict[str, Any]:
    """What manifest.json records about a build: target, model hash, inputs and outputs,
    memory, and per kernel (those of loop bodies included) its workload, algorithm and
    tuning config; `released`: the weights' byte range that tir_create gives back after the
    prepare calls (compiler_prepare.sources_last)."""
    from tensorir import __version__

    kernels = {nid: k for nid, k in all_kernels.items() if not isinstance(k, LoopKernel)}
    plain = iter(kernels)
    entries = [
        bound.loop_entries[i]
        if i in bound.loop_entries
        else _kernel_entry(graph, target, kernels, c, next(plain))
        for i, c in enumerate(bound.calls)
    ]
    tuned = sum("config" in e for e in entries)
    untuned_workloads = {
        workload_key(graph.node(nid).op, _in_types(graph, nid), graph.node(nid).attr)
        for nid, k in kernels.items()
        if k.config is None and is_tunable(graph.node(nid).op, graph.node(nid).attr)
    }
    in_bodies = sum(
        k.body.manifest["untuned_workloads"] for k in all_kernels.values() if isinstance(k, LoopKernel)
    )
    return {
        "tensorir_version": __version__,
        "target": target.name,
        "triple": target.triple,
        "model_sha256": hashlib.sha256(raw).hexdigest(),
        "layout_block": block,
        "inputs": _io(graph, [(graph.node(n).name, Value(n)) for n in graph.graph_inputs()]),
        "outputs": _outputs_io(graph),
        "workspace_bytes": plan.workspace,
        "workspace_lower_bound": plan.lower_bound,
        "workspace_no_reuse": plan.no_reuse,
        "workspace_order": plan.order,
        "concats_in_place": plan.concats_in_place,
        "weights_bytes": bound.binder.weights.size,
        **_prepare_entries(bound.binder.prepared),
        **({"weights_released_bytes": released[1] - released[0]} if released[1] else {}),
        "tuned_kernels": tuned,
        "untuned_kernels": len(entries) - tuned,
        "untuned_workloads": len(untuned_workloads) + in_bodies,
        "kernels": entries,
        "copies": [{"dst": c.dst.to_json(), "src": c.src.to_json(), "bytes": c.nbytes} for c in bound.copies],
        **({"loops": [s.to_json() for s in bound.loops]} if bound.loops else {}),
    }


def _prepare_entries(prepared: Prepared | None) -> dict[str, Any]:
    """The manifest's prepared block (a CPU build's): its bytes and the calls tir_create runs
    to fill it, in order."""
    if prepared is None:
        return {}
    return {"prepared_bytes": prepared.size, "prepare": prepared.entries}


def _kernel_entry(
    graph: Graph, target: Target, kernels: Mapping[int, _Kernel], c: KernelCall, nid: int
) -> dict:
    """The manifest's entry of one kernel call of node `nid`."""
    node, kern = graph.node(nid), kernels[nid]
    return {
        "symbol": c.symbol,
        "op": node.op,
        **({"node": node.name} if node.name else {}),
        **({"device": c.device} if target.kind != "llvm" else {}),
        "args": [a.to_json() for a in c.args],
        **({"guard": [[*a.to_json(), p] for a, p in c.guard]} if c.guard else {}),
        "workload": workload_key(node.op, _in_types(graph, nid), node.attr),
        **({"algorithm": kern.spec.algorithm} if kern.spec.algorithm else {}),
        **({"config": kern.config} if kern.config is not None else {}),
    }
