"""Per-layer GFLOP/s of a compiled zoo model against the measured peak (benchmarks/peak.py).

    python -m benchmarks.layers                     # resnet50, 1 thread
    python -m benchmarks.layers resnet18 --threads 2 --filter 3x3
    python -m benchmarks.layers resnet50 --algorithm direct    # every conv forced to direct
    python -m benchmarks.layers .wild/captcha_det.onnx         # any .onnx with static input shapes
    python -m benchmarks.layers squeezenet1_1 --scaling 2      # where a second thread does not pay

Compiles the model (tensorir.pipeline.compile_model, so the optimized graph is at hand),
profiles every kernel with Module.profile (median of --repeat calls each, over the model's
own memory), and prints per conv / dense / matmul kernel (--all: every kernel): the ONNX
node name of its anchor, the kind (op, fused body, kernel size / stride), a workload
summary (channels x spatial -> channels x spatial for convs, M x K * K x N for dense and
matmul), the algorithm the compiler chose (the manifest's per-kernel "algorithm"), FLOPs
(tensorir.graph.flops.node_flops of the kernel's graph node; a multiply-add is 2), ms,
GFLOP/s, share of the model's kernel time, and fraction of peak (peak.json for the same
thread count; run `python -m benchmarks.peak` first, else the column is empty).

--algorithm A compiles with tuning records that pin {"algorithm": A} for every conv
workload whose space offers A (autotune.task.extract_tasks); the other knobs keep their
defaults and convs without A keep the default choice. JSON rows (every kernel) go to
benchmarks/results/layers_<model>_t<threads>[_<algorithm>].json.

Node names: the layout pass drops them, so they come from the same model optimized without
layout or fusion, whose anchors (conv / dense / matmul) are matched to the kernels' anchors
by kernel size, stride, group and input / output sizes ("?": no match, "-": ONNX has no name).
FLOPs are the direct algorithm's for every kernel, so a Winograd kernel's GFLOP/s is an
effective rate and can exceed the peak.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autotune.idle import SLOW_HANDOVER
from benchmarks.peak import load_peak
from benchmarks.zoo import build, sample_inputs
from tensorir.graph.graph import Value

RESULTS = Path(__file__).parent / "results"
ANCHORS = ("conv2d_nchwc", "conv", "dense", "matmul", "gemm")


def _anchor(g, nid: int) -> tuple[str, dict[str, Any], list, str]:
    """(anchor op, its attrs, its input types, epilogue "+a+b") of a kernel's graph node."""
    node = g.node(nid)
    ins = [g.type_of(v) for v in g.inputs_of(nid)]
    body = node.attr.get("body") if node.op == "fused" else None
    if body is None or body.anchor is None:
        return node.op, dict(node.attr), ins, ""
    step = body.steps[body.anchor]
    args = [ins[a] if a < body.n_inputs else None for a in step.args]
    epi = "".join(f"+{s.op}" for k, s in enumerate(body.steps) if k != body.anchor)
    return step.op, dict(step.attrs), args, epi


def _algorithm(g, nid: int) -> str:
    """The op (fused body), and for convs the kernel size / stride / group of the anchor."""
    node = g.node(nid)
    op, attr, ins, _ = _anchor(g, nid)
    desc = f"fused[{node.attr['body']}]" if node.op == "fused" else node.op
    w = ins[1] if len(ins) > 1 else None
    if op in ("conv2d_nchwc", "conv") and w is not None:
        kh, kw = (w.shape[2], w.shape[3])
        s = attr.get("strides") or (1, 1)
        grp = int(attr.get("group", 1))
        desc += f" {kh}x{kw}/s{s[0]}" + (" dw" if grp != 1 else "")
    return desc


def _workload(g, nid: int) -> str:
    """Shape summary: C x H x W -> M x OH x OW for convs, M x K * K x N for dense / matmul."""
    op, _, ins, _ = _anchor(g, nid)
    out = g.node(nid).outputs[0].shape
    x = ins[0] if ins else None
    w = ins[1] if len(ins) > 1 else None
    if op == "conv2d_nchwc" and x is not None and len(out) == 5:
        _, cb, h, wd, ib = x.shape
        _, mo, oh, ow, ob = out
        return f"{cb * ib}x{h}x{wd} -> {mo * ob}x{oh}x{ow}"
    if op == "conv" and x is not None and len(out) == 4:
        return f"{x.shape[1]}x{x.shape[2]}x{x.shape[3]} -> {out[1]}x{out[2]}x{out[3]}"
    if op == "dense" and x is not None and w is not None:
        return f"{math.prod(x.shape[:-1])}x{x.shape[-1]} * {x.shape[-1]}x{w.shape[0]}"
    if op == "matmul" and x is not None and w is not None and len(x.shape) >= 2:
        batch = math.prod(out[:-2]) if len(out) > 2 else 1
        mm = f"{x.shape[-2]}x{x.shape[-1]} * {w.shape[-2]}x{w.shape[-1]}"
        return (f"{batch} x " if batch > 1 else "") + mm
    return "x".join(str(d) for d in out)


def _is_anchor_kernel(g, nid: int) -> bool:
    return _anchor(g, nid)[0] in ANCHORS


def _anchor_steps(g, nid: int) -> list[tuple[str, dict[str, Any], list, Any]]:
    """(op, attrs, input types, output type) of every conv / dense / matmul a kernel computes:
    the node itself, or each such step of its fused body (a merged MobileNet block has three)."""
    from tensorir.ops.registry import get_op

    node = g.node(nid)
    ins = [g.type_of(v) for v in g.inputs_of(nid)]
    body = node.attr.get("body") if node.op == "fused" else None
    if body is None:
        return [(node.op, dict(node.attr), ins, node.outputs[0])] if node.op in ANCHORS else []
    values, steps = list(ins), []
    for step in body.steps:
        xs = [values[a] for a in step.args]
        (y,) = get_op(step.op).infer(xs, dict(step.attrs))
        values.append(y)
        if step.op in ANCHORS:
            steps.append((step.op, dict(step.attrs), xs, y))
    return steps


def _signature(op: str, attr: dict[str, Any], ins: list, out: Any) -> tuple:
    """What identifies an anchor across layouts: op family, kernel, stride, group, in/out sizes."""
    family = "conv" if op in ("conv", "conv2d_nchwc") else op
    x, w = [*ins, None, None][:2]
    sizes = (math.prod(x.shape) if x is not None else 0, math.prod(out.shape))
    if family != "conv" or w is None:
        return (family, *sizes)
    stride = tuple(attr.get("strides") or (1, 1))
    return (family, w.shape[2], w.shape[3], stride, int(attr.get("group", 1)), *sizes)


def joined_name(names: list[str]) -> str:
    """One name for the anchors of a merged kernel: the first whole, the others without the
    first's dotted prefix where they share it (features.2.expand+dw+project)."""
    prefix = names[0].rsplit(".", 1)[0] + "." if "." in names[0] else None
    rest = [n.removeprefix(prefix) if prefix and n.startswith(prefix) else n for n in names[1:]]
    return "+".join([names[0], *rest])


def _plain_name(g, nid: int) -> str:
    """A node's ONNX name; an unnamed one made by a rewrite (a Gemm's dense, whose bias add
    took the Gemm's name) takes its only consumer's; "-" where that has none either."""
    name = g.node(nid).name
    users = g.consumers(Value(nid, 0)) if not name else []
    return name or (g.node(users[0][0]).name if len(users) == 1 else "") or "-"


def anchor_members(model, g, nodes: list[int]) -> dict[int, list[str]]:
    """{kernel node: ONNX names of the convs / dense / matmuls it computes}: the layout pass
    drops names, so take them from the model optimized without layout / fusion, matching
    anchors by `_signature` (in order among equal signatures; "?": no match)."""
    from tensorir.frontend.onnx import from_onnx
    from tensorir.pipeline import optimize

    plain = optimize(from_onnx(model), fuse=False, layout=False)
    queues: dict[tuple, list[str]] = {}
    for n in plain.op_nodes():
        if plain.node(n).op in ANCHORS:
            sig = _signature(*_anchor_steps(plain, n)[0])
            queues.setdefault(sig, []).append(_plain_name(plain, n))
    out = {}
    for nid in nodes:
        if _is_anchor_kernel(g, nid):
            out[nid] = [(queues.get(_signature(*step)) or ["?"]).pop(0) for step in _anchor_steps(g, nid)]
    return out


def forced_records(model, algorithm: str) -> dict[str, dict]:
    """Records pinning `algorithm` for every workload whose space offers it."""
    from autotune.task import extract_tasks, load_graph

    tasks = extract_tasks(load_graph(model))
    return {t.key: {"algorithm": algorithm} for t in tasks if algorithm in t.space().algorithms}


def compile_layers(name: str, algorithm: str | None = None):
    """(model, build, Module, op nodes, anchor_members) of a zoo name, a wild model's name
    (benchmarks/wild.py, its input at the shape listed there) or an .onnx file."""
    from benchmarks.wild import WILD, static_model
    from tensorir.pipeline import compile_model
    from tensorir.runtime.module import Module

    if name.endswith(".onnx"):  # any model file with static input shapes
        import onnx

        model = onnx.load(name)
    elif name in WILD:
        model = static_model(name)
    else:
        model = build(name)
    records = None
    if algorithm:
        records = forced_records(model, algorithm)
        print(f"--algorithm {algorithm}: pinned for {len(records)} workloads")
    b = compile_model(model, records=records)
    mod = Module(b.write(tempfile.mkdtemp(prefix="tir-layers-")))
    nodes = list(b.graph.op_nodes())
    return model, b, mod, nodes, anchor_members(model, b.graph, nodes)


def profile_layers(name: str, threads: int, repeat: int, algorithm: str | None = None) -> list[dict]:
    model, b, mod, nodes, members = compile_layers(name, algorithm)
    mod.set_num_threads(threads)
    prof = mod.profile(sample_inputs(model), repeat=repeat)
    return layer_rows(b, mod, nodes, members, prof, threads)


def layer_rows(
    b, mod, nodes: list[int], members: dict[int, list[str]], prof: list[dict], threads: int
) -> list[dict]:
    from tensorir.graph.flops import node_flops

    total = sum(r["seconds"] for r in prof)
    peak = load_peak(threads)
    rows = []
    for r, call, kern in zip(prof, b.calls, mod.manifest["kernels"], strict=True):
        k = int(call.symbol.split("_")[1][1:])  # tir_k{index in op_nodes()}_{op}
        nid = nodes[k]
        flops = node_flops(b.graph, nid)
        gf = flops / r["seconds"] / 1e9
        rows.append(
            {
                "symbol": r["symbol"],
                "node": joined_name(members[nid]) if nid in members else b.graph.node(nid).name,
                "members": members.get(nid, []),
                "op": r["op"],
                "anchor": _is_anchor_kernel(b.graph, nid),
                "kind": _algorithm(b.graph, nid),
                "workload": _workload(b.graph, nid),
                "workload_key": kern.get("workload", ""),
                "algorithm": kern.get("algorithm", ""),
                "out_shape": list(b.graph.node(nid).outputs[0].shape),
                "flops": flops,
                "ms": r["seconds"] * 1e3,
                "gflops": gf,
                "share": r["seconds"] / total,
                "peak_frac": gf / peak if peak else None,
            }
        )
    return rows


WARM_ROUNDS = 2


def profile_scaling(name: str, threads: int, repeat: int, rounds: int = 3) -> list[dict]:
    """Every kernel profiled in place at 1 and at `threads` threads, the two alternating for
    `rounds` rounds (one build, so only the thread count differs); per kernel the median ms
    of each (`ms_1`, `ms_n`), the speed-up and `lost_ms`: what it takes beyond a perfect
    speed-up (ms_n - ms_1 / threads). Sorted by lost_ms, largest first."""
    model, b, mod, nodes, members = compile_layers(name)
    feeds = sample_inputs(model)
    times: dict[int, list[list[float]]] = {1: [], threads: []}
    # untimed rounds first: the first one or two at `threads` threads after compiling in this
    # process ran no faster than one thread (MobileNetV2-96, Zen 5 VM: 0.94-0.97x, then
    # 1.5-1.7x from the next round on, in each of three processes)
    for _ in range(WARM_ROUNDS):
        for n in (1, threads):
            mod.set_num_threads(n)
            mod.profile(feeds, repeat=repeat)
    for _ in range(rounds):
        for n in (1, threads):
            mod.set_num_threads(n)
            prof = mod.profile(feeds, repeat=repeat)
            times[n].append([r["seconds"] * 1e3 for r in prof])
    rows = layer_rows(b, mod, nodes, members, prof, threads)  # the last round's, at `threads`
    return scaling_rows(rows, np.median(times[1], axis=0), np.median(times[threads], axis=0), threads)


def scaling_rows(rows: list[dict], ms_1: Sequence[float], ms_n: Sequence[float], threads: int) -> list[dict]:
    out = [
        {**r, "ms_1": a, "ms_n": b, "speedup": a / b, "lost_ms": b - a / threads}
        for r, a, b in zip(rows, ms_1, ms_n, strict=True)
    ]
    return sorted(out, key=lambda r: -r["lost_ms"])


def print_scaling(rows: list[dict], threads: int, top: int = 25) -> None:
    head = f"{'kernel':<18} {'node':<22} {'kind':<34} {'workload':<24}"
    print(head + f" {'ms@1':>7} {f'ms@{threads}':>7} {'x':>5} {'lost':>6}")
    for r in rows[:top]:
        kind = r["kind"].replace("conv2d_nchwc", "conv")
        print(
            f"{r['symbol'][:18]:<18} {r['node'][-22:]:<22} {kind[:34]:<34} {r['workload'][:24]:<24}"
            f" {r['ms_1']:>7.3f} {r['ms_n']:>7.3f} {r['speedup']:>5.2f} {r['lost_ms']:>6.3f}"
        )
    one, many = sum(r["ms_1"] for r in rows), sum(r["ms_n"] for r in rows)
    lost = sum(max(0.0, r["lost_ms"]) for r in rows)
    shown = sum(max(0.0, r["lost_ms"]) for r in rows[:top])
    print(
        f"{len(rows)} kernels: {one:.2f} ms at 1 thread, {many:.2f} ms at {threads} ({one / many:.2f}x); "
        f"{lost:.2f} ms beyond a perfect speed-up, {shown:.2f} in the rows shown"
    )


def idle_line(before: tuple[bool, float], after: tuple[bool, float], threads: int) -> str:
    """What the busy-core probe (autotune.idle.cores_idle: the same FMA work per thread at 1
    and `threads` threads, ~1.0 idle) read before and after the profile. This VM at times runs
    2 threads no faster than 1 for a while (MobileNetV2-96's kernels all at 0.91-1.04x, the
    next run 1.58x): such a profile says nothing about the code."""
    line = f"busy-core probe at {threads} threads: {before[1]:.2f} before, {after[1]:.2f} after (idle ~1.0)"
    if not (before[0] and after[0]):
        line += ": A CORE WAS BUSY, the speed-ups above are the machine's, not the code's; run it again"
    return line


def handover_line(before_us: float, after_us: float) -> str:
    """What the hand-over canary (autotune.idle.handover_us: 512 KB handed between the threads
    20 times) read before and after the profile. In this VM's slow state it reads about twice
    its usual (Zen 4: 1.3-1.4 ms, 2.6-3.3 in the slow state) and every kernel reading what the
    other thread wrote runs slower; one reading much above the other: the state changed."""
    line = f"hand-over canary: {before_us / 1e3:.2f} ms before, {after_us / 1e3:.2f} ms after"
    if max(before_us, after_us) > SLOW_HANDOVER * min(before_us, after_us):
        line += ": THE CORES HANDED DATA OVER SLOWLY in part of this profile; run it again"
    return line


def _selected(r: dict, flt: str | None, everything: bool) -> bool:
    if not everything and not r["anchor"]:
        return False
    return not flt or any(flt in r[f] for f in ("kind", "workload", "algorithm", "node"))


def print_table(rows: list[dict], flt: str | None = None, everything: bool = False) -> None:
    print(
        f"{'kernel':<18} {'node':<22} {'kind':<34} {'workload':<24} {'algorithm':<9} {'MFLOP':>7}"
        f" {'ms':>7} {'GF/s':>6} {'share':>6} {'%peak':>6}"
    )
    sel = [r for r in rows if _selected(r, flt, everything)]
    for r in sel:
        pk = f"{100 * r['peak_frac']:>5.1f}%" if r["peak_frac"] is not None else "     -"
        kind = r["kind"].replace("conv2d_nchwc", "conv")
        print(
            f"{r['symbol'][:18]:<18} {r['node'][-22:]:<22} {kind[:34]:<34} {r['workload'][:24]:<24}"
            f" {r['algorithm'] or '-':<9} {r['flops'] / 1e6:>7.1f} {r['ms']:>7.3f} {r['gflops']:>6.1f}"
            f" {100 * r['share']:>5.1f}% {pk}"
        )
    ms, fl = sum(r["ms"] for r in sel), sum(r["flops"] for r in sel)
    everything_shown = len(sel) == len(rows)
    print(
        f"{'total' if everything_shown else 'selected'}: {len(sel)} kernels, {ms:.2f} ms, "
        f"{fl / 1e9:.2f} GFLOP, ",
        end="",
    )
    print(f"{fl / ms / 1e6:.1f} GFLOP/s, {100 * sum(r['share'] for r in sel):.1f}% of kernel time")
    if not everything_shown:
        print(f"all kernels: {len(rows)}, {sum(r['ms'] for r in rows):.2f} ms")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default="resnet50")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument(
        "--filter", default=None, help="only rows whose kind/workload/algorithm/node contains this (e.g. 3x3)"
    )
    p.add_argument("--all", action="store_true", help="every kernel, not only conv / dense / matmul")
    p.add_argument(
        "--algorithm",
        default=None,
        help="force this conv algorithm (direct, im2col, winograd2/4/6) where a conv's space has it",
    )
    p.add_argument(
        "--scaling",
        type=int,
        metavar="N",
        help="profile at 1 and N threads (alternating rounds, one build) and list the kernels by the "
        "time they take beyond a perfect N-fold speed-up",
    )
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.scaling:
        from autotune.idle import cores_idle, handover_us

        before, hand_before = cores_idle(args.scaling), handover_us(args.scaling)
        rows = profile_scaling(args.model, args.scaling, args.repeat)
        after, hand_after = cores_idle(args.scaling), handover_us(args.scaling)
        print_scaling(rows, args.scaling)
        print(idle_line(before, after, args.scaling))
        print(handover_line(hand_before, hand_after))
        out = Path(args.out or RESULTS / f"layers_{args.model}_scaling{args.scaling}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(rows, indent=1, default=float) + "\n")
        return
    rows = profile_layers(args.model, args.threads, args.repeat, args.algorithm)
    print_table(rows, args.filter, args.all)
    suffix = f"_{args.algorithm}" if args.algorithm else ""
    out = Path(args.out or RESULTS / f"layers_{args.model}_t{args.threads}{suffix}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
