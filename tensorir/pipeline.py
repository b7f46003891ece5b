"""The compiler pipeline, top to bottom: read this file to learn the compiler.

A compile (`compile_model`, then `write_build`), stage by stage:

    import           frontend/: the model -> graph IR (onnx.py, tensorflow.py: one converter per op)
    graph passes     `optimize` below (list follows)
    lowering         compiler.lower_kernels: per op node, the algorithm choice, the compute
                     definition and the schedule of the target's kind (a tuning record's
                     knobs where one exists) -> one loop function (ops/kernel.py,
                     schedule/lower.py)
    loop passes      loop/passes.py optimize_loops: simplify, vectorize, unroll
    memory plan      passes/memory_plan.py: static offsets in one workspace
    bind             compiler.bind_plan: every kernel argument -> input / output / weight /
                     prepared / workspace (the backend-neutral plan, tensorir/plan.py)
    prepare kernels  compiler_prepare.lower_prepares (CPU builds): the kernels tir_create runs
                     once to compute the weight transforms not stored (Winograd's U)
    codegen          the target's backend (backends/, chosen by Target.kind): render every
                     kernel (LLVM: one object; OpenCL: OpenCL C)
    package          the backend again: one shared library + C header + manifest

Graph passes (tensorir/passes/, one file each; API in passes/__init__.py):

    fold_qdq         QDQ uint8 x int8 matmul / gemm / 1x1 / depthwise conv (+ bias, relu, clip) ->
                     integer qdense / qconv1x1 / qdwconv (once, first; with int8 convs the
                     layout pass stays off by default; on ARM with dotprod the products read
                     x - 128 for sdot, the bias making up for it)
    canonicalize     gemm/matmul -> dense, sub/div by constants -> add/mul, no identity
    fold_constants   nodes with constant inputs -> constants (numpy references)
    fold_batchnorm   batch_norm -> into conv/dense weights, else mul + add
    simplify         algebraic identities (reshape/transpose chains, x*1, clip -> relu, ...)
    transpose_sink   transposes down through elementwise/pad/reduce/concat so NHWC pairs cancel
    conv1d_lift      1-D convs and pools as 2-D ones of unit height
    convt_unshuffle  a k x k stride-k conv_transpose -> 1x1 conv + depth_to_space (CPU)
      (these repeat until none changes the graph: folding a transposed weight
       makes a matmul canonicalize can turn into dense, and so on)
    dead_code        drop nodes no output depends on
    cse              merge duplicate nodes and small duplicate constants
    layout           NCHW -> NCHW[x]c for the target's vector lanes (passes/layout.py; TIR_LAYOUT=0 off)
    fuse_ops         elementwise/activation/bias/residual into conv/dense/matmul epilogues
    fuse_dwpw        a depthwise conv group into the 1x1 conv that alone reads it (CPU;
                     TIR_FUSE_DWPW=0 off): the block's widest tensor stays on the stack
    fuse_expand      and the 1x1 expand in front of it, where the expanded tensor is large
                     (TIR_FUSE_EXPAND=0 off): a whole inverted-residual block per kernel
    memory_plan      static buffer reuse (passes/memory_plan.py), run by the compiler

Each stage runs in a `debug.stage`: TIR_DEBUG=1 prints its name and time, TIR_DEBUG=2 the
IR after it (graph, loop IR, memory plan, kernel list; "(unchanged)" when a pass did
nothing), TIR_DUMP_DIR=dir writes one file per stage. The graph is verified after every
pass, loop IR after the loop passes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx

from tensorir import debug
from tensorir.compiler import (
    Build,
    bind_plan,
    lookup_config,
    lower_kernels,
    make_manifest,
    model_bytes,
    model_key,
    optimize_kernels,
    scratch_sizes,
)
from tensorir.compiler_loop import LoopKernel
from tensorir.compiler_prepare import Prepared, lower_prepares, sources_last
from tensorir.config import fuse_dwpw_enabled, fuse_expand_enabled
from tensorir.errors import ModelError, TirError
from tensorir.graph.graph import Graph
from tensorir.graph.printer import print_graph
from tensorir.graph.verify import verify
from tensorir.ops.nn_compute import half_sums
from tensorir.passes import Pass, copy_graph
from tensorir.passes.canonicalize import canonicalize
from tensorir.passes.concat_in_place import ConcatSlices, concat_slices
from tensorir.passes.conv1d_lift import conv1d_lift
from tensorir.passes.convt_unshuffle import convt_unshuffle
from tensorir.passes.cse import cse
from tensorir.passes.dead_code import dead_code
from tensorir.passes.fold_batchnorm import fold_batchnorm
from tensorir.passes.fold_constants import fold_constants
from tensorir.passes.fold_qdq import fold_qdq, has_int8_convs
from tensorir.passes.fuse_dwpw import PLAN_LEVELS, apply_plan
from tensorir.passes.fuse_dwpw import fuse_dwpw as merge_dwpw
from tensorir.passes.fuse_dwpw import fuse_expand as merge_expand
from tensorir.passes.fuse_ops import fuse_ops
from tensorir.passes.hard_swish import hard_swish
from tensorir.passes.layout import layout_enabled, make_layout_pass
from tensorir.passes.memory_plan import plan_memory
from tensorir.passes.precision import native_fp16, to_fp16
from tensorir.passes.simplify import simplify
from tensorir.passes.transpose_sink import transpose_sink
from tensorir.target import Target, get_target

PRECISIONS = ("fp32", "fp16")
MAX_ROUNDS = 4  # of the loop below; a round runs only if the one before changed the graph


def optimize(
    g: Graph,
    fuse: bool = True,
    target: Target | str = "host",
    layout: bool | None = None,
    layout_block: int | Sequence[int] | None = None,
    precision: str = "fp32",
    fuse_dwpw: bool | str | None = None,
) -> Graph:
    """Run the graph passes on a copy of `g` and return it (`g` is left as it was).
    `fuse=False` stops before operator fusion (one kernel per op); `layout` packs
    activations NCHW -> NCHW[x]c for `target` (default: on unless TIR_LAYOUT=0), with channel
    blocks up to `layout_block` (default: the target's float32 lanes, float16 ones under
    fp16 where the target computes in float16); `precision` "fp16": float32 tensors become
    float16 (passes/precision.py; the ops kept in float32 are listed in `float32_ops`);
    `layout_block` may also be a list, a cap per layout segment (passes/layout_segments.py);
    `fuse_dwpw` merges depthwise convs into the 1x1 conv after them on CPUs, and "block" also
    the 1x1 expand in front of them (default: TIR_FUSE_DWPW and TIR_FUSE_EXPAND, both on); a
    merge plan (a string of N / T / B, one per depthwise conv: passes/fuse_dwpw.py) chooses
    per block."""
    g = copy_graph(g)
    # QDQ matmul / gemm / conv -> integer qdense / qconv1x1 / qdwconv, on the importer's form
    run(lambda graph: fold_qdq(graph, target), g, "fold qdq")
    for round_ in range(1, MAX_ROUNDS + 1):
        tag = "" if round_ == 1 else f" (round {round_})"
        changed = run(canonicalize, g, "canonicalize" + tag)
        changed |= run(fold_constants, g, "fold constants" + tag)
        changed |= run(fold_batchnorm, g, "fold batchnorm" + tag)
        changed |= run(simplify, g, "simplify" + tag)
        changed |= run(hard_swish, g, "hard swish" + tag)
        changed |= run(transpose_sink, g, "transpose sink" + tag)
        changed |= run(conv1d_lift, g, "conv1d lift" + tag)
        if get_target(target).kind == "llvm":  # a stride-k k x k conv_transpose: 1x1 conv + shuffle
            changed |= run(convt_unshuffle, g, "conv_transpose unshuffle" + tag)
        if not changed:
            break
    run(dead_code, g, "dead code")
    run(cse, g, "cse")
    if precision == "fp16":  # float32 -> float16 but for the ops that need float32 sums
        run(_to_fp16, g, "fp16")
        target = get_target(target)
        layout_block = layout_block or (target.vector_lanes("float16") if native_fp16(target) else None)
    if layout is None:  # int8 convs run on plain NCHW: packing the float ops between them costs more
        layout = layout_enabled() and not has_int8_convs(g)
    if layout:  # NCHW -> NCHW[x]c, transforms at boundaries
        run(make_layout_pass(target, layout_block), g, "layout")
    if fuse:  # anchor ops (conv, dense, matmul, pool) + elementwise epilogues -> fused groups
        diamonds = get_target(target).kind != "llvm"  # SiLU into a conv epilogue: GPUs only
        run(lambda graph: fuse_ops(graph, anchor_diamonds=diamonds), g, "fuse ops")
        if fuse_dwpw is None:
            fuse_dwpw = fuse_dwpw_enabled() and ("block" if fuse_expand_enabled() else True)
        if is_plan(fuse_dwpw) and get_target(target).kind == "llvm":  # a tuned plan per block
            run(lambda graph: apply_plan(graph, fuse_dwpw), g, "fuse dwpw (plan)")
        elif fuse_dwpw and get_target(target).kind == "llvm":  # depthwise + 1x1 as one kernel
            run(merge_dwpw, g, "fuse dwpw")
            if fuse_dwpw == "block":  # and the 1x1 expand in front: the whole block
                run(merge_expand, g, "fuse expand")
    # memory_plan: static offsets for every intermediate in one workspace
    #   (passes/memory_plan.py: plan_memory(g)), after the graph is final.
    return g


def _to_fp16(g: Graph) -> bool:
    g.float32_ops = [f"{op} (node '{g.node(nid).name or nid}')" for nid, op in to_fp16(g)]
    return True


def run(pass_: Pass, g: Graph, name: str) -> bool:
    """Run one pass in a debug stage, verify the graph after it; True if it changed `g`."""
    with debug.stage(name) as st:
        changed = pass_(g)
        verify(g)
        st.result, st.changed = g, changed
    return changed


def compile_model(
    model: onnx.ModelProto | str | os.PathLike,
    target: Target | str = "host",
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    records: Any = None,
    layout_block: int | Sequence[int] | None = None,
    override_shapes: bool = True,
    signature: str = "serving_default",
    precision: str = "fp32",
    fuse_dwpw: bool | str | None = None,
) -> Build:
    """Compile a whole model for `target` up to the backend: every stage of the module
    docstring except codegen and packaging, which `write_build` (Build.write) runs.
    `records` gives tuned knob configs per workload (compiler.lookup_config) and the
    model-level `layout_block` (the NCHW[x]c channel block; argument > record > the
    target's lanes) and `fuse_dwpw` (argument > record > TIR_FUSE_DWPW). `override_shapes`:
    as in from_onnx; `signature`: a SavedModel's
    signature (frontend.load_graph_any picks the frontend by the model's format);
    `precision`: "fp32" or "fp16" (optimize)."""
    from tensorir.frontend import load_graph_any

    target = get_target(target)  # a bad target is reported before the import
    check_precision(precision)
    raw = model_bytes(model)
    graph = load_graph_any(model, input_shapes, signature=signature, override_shapes=override_shapes)
    return compile_graph(
        graph, target, records, layout_block, raw, input_shapes, precision=precision, fuse_dwpw=fuse_dwpw
    )


def model_choices(
    records: Any, key: str, layout_block: int | Sequence[int] | None, fuse_dwpw: bool | str | None
) -> tuple[int | Sequence[int] | None, bool | str | None]:
    """The model-level knobs (autotune/graph_tune.py): an argument, else the model's best
    record, else None (the defaults). A record from before the fuse_dwpw knob was measured
    without the merge, so it says False; one from before "block" (the expand merged too)
    says True or False, as it was measured. A whole-model verdict ("kernel_records") holds
    the layout config its build was timed with; where it holds none, that build took the
    rules' (None), and so does this one."""
    cfg = lookup_config(records, key)
    if cfg is None:
        return layout_block, fuse_dwpw
    block = layout_block or cfg.get("layout_block")
    if fuse_dwpw is None and ("fuse_dwpw" in cfg or "kernel_records" not in cfg):
        fuse_dwpw = merge_choice(cfg.get("fuse_dwpw"))
    return block, fuse_dwpw


def merge_choice(value: Any) -> bool | str:
    """A record's "fuse_dwpw": False, True (depthwise + 1x1), "block" (with the expand) or a
    merge plan (per depthwise conv, passes/fuse_dwpw.py)."""
    if value == "block" or is_plan(value):
        return value
    return bool(value)


def is_plan(value: Any) -> bool:
    """Whether a "fuse_dwpw" value is a per-block merge plan ("TTBN..."), not a switch."""
    return isinstance(value, str) and value != "block" and bool(value) and not set(value) - set(PLAN_LEVELS)


IGNORED = "the tuning run's whole-model check timed this model faster without its records"


def kernel_records_pay(records: Any, key: str) -> bool:
    """False where the tuning run's whole-model check (autotune/model_check.py) timed the
    model faster without any records than with them: its best model-level record says
    "kernel_records": False."""
    cfg = lookup_config(records, key)
    return cfg is None or cfg.get("kernel_records", True) is not False


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise TirError(f"--precision {precision!r}: expected one of {', '.join(PRECISIONS)}")


def compile_graph(
    graph: Graph,
    target: Target | str = "host",
    records: Any = None,
    layout_block: int | Sequence[int] | None = None,
    raw: bytes | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    symbol_prefix: str = "tir_",
    precision: str = "fp32",
    fuse_dwpw: bool | str | None = None,
) -> Build:
    """Compile an imported graph (any frontend) for `target`, as compile_model does from the
    graph passes on. `raw`: the model file's bytes, which name the model in the manifest and in
    the records' model-level key (default: the printed graph). `input_shapes`: the shapes given
    at import, part of that key. `symbol_prefix` starts every kernel's symbol (a loop body's
    kernels get their own: compiler_loop.py)."""
    target = get_target(target)
    for n in graph.graph_inputs():  # the reference interpreter runs them; compiled code cannot
        if graph.node(n).outputs[0].dtype == "object":
            name = graph.node(n).name
            raise ModelError(f"input '{name}' is a string tensor; compiled code has no string dtype")
    if raw is None:
        raw = print_graph(graph, constants=True).encode()
    ignored = not kernel_records_pay(records, model_key(raw, input_shapes))
    if ignored:
        records = None  # the whole-model check found the model slower with them
    block, fuse_dwpw = model_choices(records, model_key(raw, input_shapes), layout_block, fuse_dwpw)
    graph = optimize(graph, target=target, layout_block=block, precision=precision, fuse_dwpw=fuse_dwpw)
    slices = concat_slices(graph) if target.kind == "llvm" else ConcatSlices()
    with debug.stage("lowering") as st, half_sums(precision == "fp16" and native_fp16(target)):
        kernels = lower_kernels(graph, target, records, symbol_prefix, slices.nodes)
        st.result = debug.Text(_kernel_text, kernels)
    with debug.stage("loop passes") as st:
        kernels = optimize_kernels(kernels)
        st.result = debug.Text(_kernel_text, kernels)
    with debug.stage("memory plan") as st:
        plan = plan_memory(graph, scratch=scratch_sizes(kernels), slices=slices)
        st.result = debug.Text(plan.summary)
    with debug.stage("bind") as st:
        bound = bind_plan(graph, kernels, plan, Prepared(symbol_prefix) if target.kind == "llvm" else None)
        released = sources_last(bound.binder.weights, bound, bound.binder.prepared)  # weight offsets final
        st.result = debug.Text(_bound_text, bound)
    prepared = bound.binder.prepared
    with debug.stage("prepare kernels") as st:
        prepare_funcs = lower_prepares(prepared, target)
        st.result = debug.Text(lambda: "\n\n".join(str(f) for f in prepare_funcs))
    funcs, ops, nodes = [], [], []
    for nid, k in kernels.items():  # a loop's body kernels stand where its node does
        body = k.body if isinstance(k, LoopKernel) else None
        funcs += body.kernels if body else [k.func]
        ops += body.ops if body else [graph.node(nid).op]
        nodes += [nid] * len(body.kernels) if body else [nid]
        prepare_funcs += body.prepare_kernels if body else []
    return Build(
        graph=graph,
        target=target,
        kernels=funcs,
        calls=bound.calls,
        copies=bound.copies,
        ops=ops,
        workspace=plan.workspace,
        weights=bound.binder.weights.blob(),
        manifest=make_manifest(raw, graph, target, kernels, bound, plan, block, released)
        | _precision(graph, target, precision)
        | ({"tuning_records_ignored": IGNORED} if ignored else {}),
        nodes=nodes,
        loops=bound.loops,
        prepares=prepared.calls if prepared else [],
        prepare_kernels=prepare_funcs,
        prepared=prepared.size if prepared else 0,
        released=released,
    )


def _precision(graph: Graph, target: Target, precision: str) -> dict[str, Any]:
    """The manifest's "precision": what is float16 and where it fell back to float32."""
    if precision != "fp16":
        return {}
    widened = f"float32 (float16 loads and stores: {target.name} has no float16 arithmetic)"
    return {
        "precision": {
            "mode": "fp16",
            "weights": "float16",
            "arithmetic": "float16 (sums in float16)" if native_fp16(target) else widened,
            "float32_ops": graph.float32_ops,
        }
    }


def _bound_text(bound: Any) -> str:
    """The bind stage's text: the prepare calls (run once, at create), then one line per
    call, a loop's calls indented under `loop`."""
    lines = [_call_text(c) for c in bound.calls]
    for s in sorted(bound.loops, key=lambda s: (-s.first, s.end)):
        lines[s.first : s.end] = ["  " + line for line in lines[s.first : s.end]]
    for s in sorted(bound.loops, key=lambda s: (-s.first, s.end - s.first)):  # inner ones first
        head = f"loop while {_arg_text(s.iter)} < {_arg_text(s.trip)} and {_arg_text(s.cond_state)}:"
        lines.insert(s.first, head)
    prepared = bound.binder.prepared
    once = [f"prepare {_call_text(c)}" for c in prepared.calls] if prepared else []
    return "\n".join(once + lines)


def _call_text(c: Any) -> str:
    return f"{c.symbol}({', '.join(_arg_text(a) for a in c.args)})"


def _arg_text(a: Any) -> str:
    return f"{a.kind}:{a.index}"


def _kernel_text(kernels: Mapping[int, Any]) -> str:
    return "\n\n".join(
        f"loop body: {len(k.body.kernels)} kernels" if isinstance(k, LoopKernel) else str(k.func)
        for k in kernels.values()
    )


def write_build(build: Build, out: Path, weights: str = "embedded") -> Path:
    """The backend's stages: codegen (render every kernel), then package (library, header,
    manifest) into the folder `out`."""
    from tensorir.backends import get_backend

    if weights not in ("embedded", "external"):
        raise TirError(f"--weights {weights!r}: expected 'embedded' or 'external'")
    backend = get_backend(build.target)
    with debug.stage(f"codegen ({backend.kind})"):
        rendered = backend.codegen(build, out)
    with debug.stage(f"package ({backend.kind})"):
        return backend.package(build, rendered, out, weights)


def load_folder(directory: str | os.PathLike) -> Any:
    """A compiled folder as a module that runs here (by the backend that wrote it), or an
    export-only artifact for a folder built for another device."""
    from tensorir.backends import backend_for_manifest

    d = Path(directory)
    manifest = read_manifest(d)
    return backend_for_manifest(manifest).load(d, manifest)


_MANIFEST_KEYS = {
    "target": str,
    "triple": str,
    "library": str,
    "inputs": list,
    "outputs": list,
    "kernels": list,
}


def read_manifest(directory: Path) -> dict[str, Any]:
    """A compiled folder's manifest.json, checked for what loading it needs (a TirError
    naming the file and the problem otherwise: missing, not JSON, a key missing)."""
    import json

    path = directory / "manifest.json"
    if not path.is_file():
        raise TirError(f"{directory}: not a compiled model (no manifest.json)")
    try:
        manifest = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TirError(f"{path}: not valid JSON ({e})") from None
    _check_manifest(path, manifest)
    return manifest


def _check_manifest(path: Path, manifest: Any) -> None:
    if not isinstance(manifest, dict):
        raise TirError(f"{path}: expected a JSON object, found {type(manifest).__name__}")
    for key, kind in _MANIFEST_KEYS.items():
        if not isinstance(manifest.get(key), kind):
            raise TirError(f"{path}: '{key}' is missing or not a {kind.__name__} (a broken manifest)")
    for t in manifest["inputs"] + manifest["outputs"]:
        if not (isinstance(t, dict) and {"name", "shape", "dtype"} <= t.keys()):
            raise TirError(f"{path}: each input and output needs a name, shape and dtype; found {t!r}")
    if not (path.parent / manifest["library"]).is_file():
        raise TirError(f"{path}: its library {manifest['library']!r} is missing from the folder")
