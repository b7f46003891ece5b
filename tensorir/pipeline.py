"""The compiler pipeline, top to bottom: read this file to learn the compiler.

Graph passes (tensorir/passes/, one file each; API in passes/__init__.py):

    canonicalize     gemm/matmul -> dense, sub/div by constants -> add/mul, no identity
    fold_constants   nodes with constant inputs -> constants (numpy references)
    fold_batchnorm   batch_norm -> into conv/dense weights, else mul + add
    simplify         algebraic identities (reshape/transpose chains, x*1, clip -> relu, ...)
      (these four repeat until none changes the graph: folding a transposed weight
       makes a matmul canonicalize can turn into dense, and so on)
    dead_code        drop nodes no output depends on
    cse              merge duplicate nodes and small duplicate constants
    layout           NCHW -> NCHW[x]c for the target's vector lanes (passes/layout.py; TIR_LAYOUT=0 off)
    fuse_ops         elementwise/activation/bias/residual into conv/dense/matmul epilogues
    memory_plan      static buffer reuse (passes/memory_plan.py), run by the compiler

Each pass runs in a `debug.stage`: TIR_DEBUG=1 prints its name and time, TIR_DEBUG=2 the
graph after it ("(unchanged)" when it did nothing), TIR_DUMP_DIR=dir writes one file per
stage. The graph is verified after every pass.
"""

from __future__ import annotations

from tensorir import debug
from tensorir.graph.graph import Graph
from tensorir.graph.verify import verify
from tensorir.passes import Pass, copy_graph
from tensorir.passes.canonicalize import canonicalize
from tensorir.passes.cse import cse
from tensorir.passes.dead_code import dead_code
from tensorir.passes.fold_batchnorm import fold_batchnorm
from tensorir.passes.fold_constants import fold_constants
from tensorir.passes.fuse_ops import fuse_ops
from tensorir.passes.layout import layout_enabled, make_layout_pass
from tensorir.passes.simplify import simplify
from tensorir.target import Target

MAX_ROUNDS = 4  # of the loop below; a round runs only if the one before changed the graph


def optimize(
    g: Graph,
    fuse: bool = True,
    target: Target | str = "host",
    layout: bool | None = None,
    layout_block: int | None = None,
) -> Graph:
    """Run the graph passes on a copy of `g` and return it (`g` is left as it was).
    `fuse=False` stops before operator fusion (one kernel per op); `layout` packs
    activations NCHW -> NCHW[x]c for `target` (default: on unless TIR_LAYOUT=0), with channel
    blocks up to `layout_block` (default: the target's float32 lanes)."""
    g = copy_graph(g)
    for round_ in range(1, MAX_ROUNDS + 1):
        tag = "" if round_ == 1 else f" (round {round_})"
        changed = run(canonicalize, g, "canonicalize" + tag)
        changed |= run(fold_constants, g, "fold constants" + tag)
        changed |= run(fold_batchnorm, g, "fold batchnorm" + tag)
        changed |= run(simplify, g, "simplify" + tag)
        if not changed:
            break
    run(dead_code, g, "dead code")
    run(cse, g, "cse")
    if layout_enabled() if layout is None else layout:  # NCHW -> NCHW[x]c, transforms at boundaries
        run(make_layout_pass(target, layout_block), g, "layout")
    if fuse:  # anchor ops (conv, dense, matmul, pool) + elementwise epilogues -> fused groups
        run(fuse_ops, g, "fuse ops")
    # memory_plan: static offsets for every intermediate in one workspace
    #   (passes/memory_plan.py: plan_memory(g)), after the graph is final.
    return g


def run(pass_: Pass, g: Graph, name: str) -> bool:
    """Run one pass in a debug stage, verify the graph after it; True if it changed `g`."""
    with debug.stage(name) as st:
        changed = pass_(g)
        verify(g)
        st.result, st.changed = g, changed
    return changed
