"""Depthwise conv -> 1x1 conv as one kernel: the second half of a MobileNet block.

After `fuse_ops`, a MobileNet block is three kernels: the 1x1 expand, the depthwise 3x3 (with
its activation) and the 1x1 project (with the residual add). The depthwise output is the
block's widest tensor (six times the block's channels) and goes through memory twice: written
by the depthwise kernel, read back by the project. This pass merges a depthwise group and the
1x1 conv that is its only reader into one `fused` node whose body is both chains:

    %5 = fused(%4, %wd, %bd) body=conv2d_nchwc+clip                  (depthwise 3x3)
    %6 = fused(%5, %wp, %bp, %skip) body=conv2d_nchwc+add      ->
    %6 = fused(%4, %wd, %bd, %wp, %bp, %skip) body=conv2d_nchwc+clip+conv2d_nchwc+add

Its anchor is the 1x1 conv step; `ops/dwpw.py` schedules it: per chunk of output rows (the
parallel loop) the depthwise rows of every channel block are computed into a buffer on the
stack, and the 1x1 conv reads them from there (MNN's and TVM's depthwise-pointwise fusion for
mobile CPUs). What is merged (all packed NCHW[x]c, one image):

    - the first: conv2d_nchwc with group = channels (depthwise), then elementwise steps that
      keep its shape; read only by the second;
    - the second: conv2d_nchwc 1x1, stride 1, no padding, group 1, as a plain op or the anchor
      of a fused group, reading the first's output as its input x, with at most
      MAX_WEIGHT_BYTES of weights (every row chunk reads all of them) and at least MIN_ROWS
      rows (the parallel loop runs over rows).

`fuse_expand` then merges the 1x1 expand in front of such a node, where the expanded tensor is
at least MIN_EXPANDED_BYTES (the expand: conv2d_nchwc 1x1 as above, read only by the depthwise):

    %3 = fused(%x, %we, %be) body=conv2d_nchwc+clip                          (1x1 expand)
    %6 = fused(%3, %wd, %bd, %wp, %bp, %x) body=conv2d_nchwc+clip+conv2d_nchwc+add   ->
    %6 = fused(%x, %we, %be, %wd, %bd, %wp, %bp) body=conv2d_nchwc+clip+conv2d_nchwc+clip+conv2d_nchwc+add

CPU (llvm) targets only; `TIR_FUSE_DWPW=0` / `TIR_FUSE_EXPAND=0` turn them off (config.py), and
`tir tune`'s model-level configs measure the model with each ("block", True, False: keeps the
one that wins).
"""

from __future__ import annotations

from tensorir.graph.graph import Graph, Value
from tensorir.ops.fused import FusedBody, Step

# the 1x1 weights are read once per row chunk: merged only while they stay in a core's L2
# (MobileNetV1's 512- and 1024-channel 1x1s, 1-4 MB, ran 17% slower merged at 2 threads)
MAX_WEIGHT_BYTES = 256 << 10
# the merged kernel's parallel loop runs over output rows only: fewer rows than this leave
# two cores unevenly loaded (3 rows: 2 + 1), and such maps are small enough to stay in cache
MIN_ROWS = 8
# the merged block recomputes the expand's halo rows and runs it one channel block at a time
# (8 accumulators): it pays only where the expanded tensor is too big for the caches to hide
# its round trip (MobileNetV2-224, 1 thread: the 96 x 112 x 112 block 0.49 -> 0.45 ms; the
# 144 x 56 x 56 block 0.32 -> 0.36 ms, the 14 x 14 blocks twice as slow)
MIN_EXPANDED_BYTES = 2 << 20


def _as_body(g: Graph, nid: int) -> tuple[FusedBody, list[Value]] | None:
    """(body, inputs) of a conv2d_nchwc node or a fused node anchored on one at step 0."""
    node = g.node(nid)
    ins = g.inputs_of(nid)
    if node.op == "conv2d_nchwc":
        return FusedBody((Step("conv2d_nchwc", node.attrs, tuple(range(len(ins)))),), len(ins), 0), ins
    body = node.attr.get("body") if node.op == "fused" else None
    if isinstance(body, FusedBody) and body.anchor == 0 and body.steps[0].op == "conv2d_nchwc":
        if any(s.op == "conv2d_nchwc" for s in body.steps[1:]):
            return None  # already merged
        return body, ins
    return None


def _is_depthwise(g: Graph, body: FusedBody, ins: list[Value]) -> bool:
    conv = body.steps[0]
    attrs = dict(conv.attrs)
    x = g.type_of(ins[conv.args[0]])
    return int(attrs.get("group", 1)) > 1 and x.ndim == 5 and x.shape[0] == 1


def _is_pointwise(g: Graph, body: FusedBody, ins: list[Value]) -> bool:
    conv = body.steps[0]
    attrs = dict(conv.attrs)
    w = g.type_of(ins[conv.args[1]])
    x = g.type_of(ins[conv.args[0]])
    return (
        w.nbytes <= MAX_WEIGHT_BYTES
        and x.ndim == 5
        and x.shape[2] >= MIN_ROWS
        and int(attrs.get("group", 1)) == 1
        and tuple(w.shape[2:4]) == (1, 1)
        and all(int(v) == 1 for v in attrs.get("strides") or (1, 1))
        and not any(attrs.get("pads") or ())
        and x.shape[0] == 1
    )


def merge_bodies(
    first: FusedBody, first_ins: list[Value], second: FusedBody, second_ins: list[Value], mid: Value
) -> tuple[FusedBody, list[Value]]:
    """The body running `first` then `second`, where `second` reads `first`'s output `mid`
    (its argument positions holding `mid` become the last step of `first`); and its inputs."""
    ins = list(first_ins)
    extra = [v for v in second_ins if v != mid and v not in ins]
    ins += extra
    n = len(ins)
    n1 = len(first.steps)

    def remap_first(a: int) -> int:
        return a if a < first.n_inputs else n + (a - first.n_inputs)

    def remap_second(a: int) -> int:
        if a >= second.n_inputs:
            return n + n1 + (a - second.n_inputs)
        v = second_ins[a]
        return n + n1 - 1 if v == mid else ins.index(v)

    steps = [Step(s.op, s.attrs, tuple(remap_first(a) for a in s.args)) for s in first.steps]
    steps += [Step(s.op, s.attrs, tuple(remap_second(a) for a in s.args)) for s in second.steps]
    return FusedBody(tuple(steps), n, n1 + (second.anchor or 0)), ins


def _merge_pair(g: Graph, nid: int, outputs: set[Value]) -> Value | None:
    """Merge the depthwise group `nid` into the 1x1 conv that alone reads it; the merged
    node's output, or None where they cannot merge."""
    if nid in g.guards:
        return None
    first = _as_body(g, nid)
    if first is None or not _is_depthwise(g, *first):
        return None
    mid = Value(nid)
    users = g.consumers(mid)
    if mid in outputs or len(users) != 1 or len(g.node(nid).outputs) != 1:
        return None
    ((user, _),) = users
    if user in g.guards:
        return None
    second = _as_body(g, user)
    if second is None or not _is_pointwise(g, *second):
        return None
    body2, ins2 = second
    if ins2[body2.steps[0].args[0]] != mid or ins2.count(mid) != 1:
        return None  # mid must be the 1x1 conv's input x, and only that
    body, ins = merge_bodies(*first, body2, ins2, mid)
    names = [g.node(k).name for k in (nid, user) if g.node(k).name]
    (out,) = g.add_node("fused", ins, {"body": body}, name=names[-1] if names else "")
    g.replace_uses(Value(user), out)
    g.remove_node(user)
    g.remove_node(nid)
    return out


def fuse_dwpw(g: Graph) -> bool:
    """Merge each depthwise group into the 1x1 conv that alone reads it (module docstring)."""
    outputs = {v for _, v in g.outputs}
    changed = False
    for nid in list(g.op_nodes()):
        if nid in g.nx:
            changed |= _merge_pair(g, nid, outputs) is not None
    return changed


def _merge_expand(g: Graph, nid: int, outputs: set[Value], min_bytes: int) -> bool:
    """Merge the 1x1 expand in front of the merged depthwise + 1x1 node `nid` into it, where
    the expanded tensor has at least `min_bytes`."""
    from tensorir.ops.dwpw import is_dwpw

    node = g.node(nid)
    if node.op != "fused" or nid in g.guards or not is_dwpw(node.attr.get("body")):
        return False
    body, ins = node.attr["body"], g.inputs_of(nid)
    if sum(s.op == "conv2d_nchwc" for s in body.steps) != 2:
        return False  # already holds its expand
    mid = ins[body.steps[0].args[0]]
    if mid.node not in g.nx or mid in outputs or ins.count(mid) != 1 or mid.node in g.guards:
        return False
    if len(g.consumers(mid)) != 1 or len(g.node(mid.node).outputs) != 1:
        return False
    first = _as_body(g, mid.node)
    if first is None or not _is_pointwise(g, *first):  # (group 1: not a depthwise)
        return False
    if g.type_of(mid).nbytes < min_bytes:
        return False
    merged, merged_ins = merge_bodies(*first, body, ins, mid)
    (out,) = g.add_node("fused", merged_ins, {"body": merged}, name=node.name)
    g.replace_uses(Value(nid), out)
    g.remove_node(nid)
    g.remove_node(mid.node)
    return True


def fuse_expand(g: Graph) -> bool:
    """Merge the 1x1 expand conv in front of each merged depthwise + 1x1 node into it: the
    whole inverted-residual block as one kernel (ops/dwpw.py computes the expand per channel
    block over the rows the depthwise reads, so the expanded tensor never reaches memory)."""
    outputs = {v for _, v in g.outputs}
    changed = False
    for nid in list(g.op_nodes()):
        if nid in g.nx:
            changed |= _merge_expand(g, nid, outputs, MIN_EXPANDED_BYTES)
    return changed


# ---- per-block plans ------------------------------------------------------------------
# A merge plan says, per depthwise conv of the model (in the order of their weights), what
# joins it: N nothing, T the 1x1 conv after it (fuse_dwpw), B that and the 1x1 expand in front
# (fuse_expand, whatever the expanded tensor's size: the plan was measured). The tuner
# (autotune/graph_tune.py) starts from the plan the rules above give and keeps, block by
# block, the level that makes the whole model faster.
PLAN_LEVELS = "NTB"


def _unmerged_depthwise_weight(g: Graph, nid: int) -> int | None:
    """The node id of the weight of `nid` if it is a depthwise conv group not merged yet."""
    first = _as_body(g, nid)
    if first is None or not _is_depthwise(g, *first):
        return None
    body, ins = first
    return ins[body.steps[0].args[1]].node


def depthwise_convs(g: Graph) -> list[int]:
    """The depthwise conv groups of `g` (after fuse_ops, before any merge), in the order of
    their weights' node ids: the positions of a merge plan."""
    found = [(w, nid) for nid in g.op_nodes() if (w := _unmerged_depthwise_weight(g, nid)) is not None]
    return [nid for _, nid in sorted(found)]


def apply_plan(g: Graph, plan: str) -> bool:
    """Merge the depthwise convs of `g` as `plan` says (one letter of PLAN_LEVELS each);
    a level that cannot apply (no 1x1 conv alone after it, no expand in front) merges less."""
    from tensorir.errors import TirError

    convs = depthwise_convs(g)
    if len(plan) != len(convs) or set(plan) - set(PLAN_LEVELS):
        raise TirError(
            f"merge plan {plan!r}: the model has {len(convs)} depthwise convs, so the plan needs "
            f"{len(convs)} letters of {PLAN_LEVELS!r} (N: apart, T: with the 1x1 after, B: the block)"
        )
    outputs = {v for _, v in g.outputs}
    changed = False
    for nid, level in zip(convs, plan, strict=True):
        out = _merge_pair(g, nid, outputs) if level in "TB" else None
        changed |= out is not None
        if out is not None and level == "B":
            _merge_expand(g, out.node, outputs, min_bytes=0)
    return changed


def plan_of(g: Graph) -> str:
    """The merge plan a merged graph follows: per depthwise weight (in node id order), the
    level of the node that reads it."""
    from tensorir.ops.dwpw import is_dwpw

    levels = []
    for nid in g.op_nodes():
        node = g.node(nid)
        body = node.attr.get("body") if node.op == "fused" else None
        if is_dwpw(body):
            convs = [k for k, s in enumerate(body.steps) if s.op == "conv2d_nchwc"]
            dw = body.steps[convs[-2]]  # the depthwise: the conv before the 1x1 anchor
            levels.append((g.inputs_of(nid)[dw.args[1]].node, "B" if len(convs) == 3 else "T"))
            continue
        weight = _unmerged_depthwise_weight(g, nid)
        if weight is not None:
            levels.append((weight, "N"))
    return "".join(level for _, level in sorted(levels))
