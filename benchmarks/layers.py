"""Per-layer GFLOP/s of a compiled zoo model against the measured peak (benchmarks/peak.py).

    python -m benchmarks.layers                     # resnet50, 1 thread
    python -m benchmarks.layers resnet18 --threads 2 --filter 3x3

Compiles the model (tensorir.compiler.compile_model, so the optimized graph is at hand),
profiles every kernel with Module.profile (median of --repeat calls each, over the model's
own memory), and prints per kernel: the op and algorithm (conv2d_nchwc / fused body with
the anchor's kernel shape and stride), its output shape, FLOPs (tensorir.graph.flops.
node_flops of the kernel's graph node; a multiply-add is 2), ms, GFLOP/s, share of the
model's kernel time, and fraction of peak (peak.json for the same thread count; run
`python -m benchmarks.peak` first, else the column is empty). JSON rows go to
benchmarks/results/layers_<model>.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks.peak import load_peak
from benchmarks.zoo import build, sample_inputs

RESULTS = Path(__file__).parent / "results"


def _algorithm(g, nid: int) -> str:
    """The op, and for convs the kernel size / stride / group of the anchor."""
    node = g.node(nid)
    op, attr = node.op, node.attr
    ins = [g.type_of(v) for v in g.inputs_of(nid)]
    desc, w = op, None
    if op == "fused":
        body = attr["body"]
        desc = f"fused[{body}]"
        if body.anchor is not None:
            step = body.steps[body.anchor]
            op, attr = step.op, dict(step.attrs)
            w = ins[step.args[1]] if len(step.args) > 1 and step.args[1] < body.n_inputs else None
    elif len(ins) > 1:
        w = ins[1]
    if op in ("conv2d_nchwc", "conv") and w is not None:
        kh, kw = (w.shape[2], w.shape[3])
        s = attr.get("strides") or (1, 1)
        grp = int(attr.get("group", 1))
        desc += f" {kh}x{kw}/s{s[0]}" + (" dw" if grp != 1 else "")
    return desc


def profile_layers(name: str, threads: int, repeat: int) -> list[dict]:
    from tensorir.compiler import compile_model
    from tensorir.graph.flops import node_flops
    from tensorir.runtime.module import Module

    model = build(name)
    b = compile_model(model)
    mod = Module(b.write(tempfile.mkdtemp(prefix="tir-layers-")))
    mod.set_num_threads(threads)
    nodes = list(b.graph.op_nodes())
    prof = mod.profile(sample_inputs(model), repeat=repeat)
    total = sum(r["seconds"] for r in prof)
    peak = load_peak(threads)
    rows = []
    for r, call in zip(prof, b.calls, strict=True):
        k = int(call.symbol.split("_")[1][1:])  # tir_k{index in op_nodes()}_{op}
        nid = nodes[k]
        flops = node_flops(b.graph, nid)
        gf = flops / r["seconds"] / 1e9
        rows.append(
            {
                "symbol": r["symbol"],
                "node": b.graph.node(nid).name,
                "op": r["op"],
                "algorithm": _algorithm(b.graph, nid),
                "out_shape": list(b.graph.node(nid).outputs[0].shape),
                "flops": flops,
                "ms": r["seconds"] * 1e3,
                "gflops": gf,
                "share": r["seconds"] / total,
                "peak_frac": gf / peak if peak else None,
            }
        )
    return rows


def print_table(rows: list[dict], flt: str | None = None) -> None:
    print(
        f"{'kernel':<22} {'algorithm':<44} {'out':<20} {'MFLOP':>8} {'ms':>7} {'GF/s':>6}"
        f" {'share':>6} {'%peak':>6}"
    )
    for r in rows:
        if flt and flt not in r["algorithm"]:
            continue
        pk = f"{100 * r['peak_frac']:>5.1f}%" if r["peak_frac"] is not None else "     -"
        print(
            f"{r['symbol']:<22} {r['algorithm'][:44]:<44} {r['out_shape']!s:<20} {r['flops'] / 1e6:>8.1f} "
            f"{r['ms']:>7.3f} {r['gflops']:>6.1f} {100 * r['share']:>5.1f}% {pk}"
        )
    sel = [r for r in rows if not flt or flt in r["algorithm"]]
    ms, fl = sum(r["ms"] for r in sel), sum(r["flops"] for r in sel)
    print(
        f"{'total' if not flt else 'selected'}: {len(sel)} kernels, {ms:.2f} ms, {fl / 1e9:.2f} GFLOP, ",
        end="",
    )
    print(f"{fl / ms / 1e6:.1f} GFLOP/s, {100 * sum(r['share'] for r in sel):.1f}% of kernel time")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default="resnet50")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--filter", default=None, help="only rows whose algorithm contains this (e.g. 3x3)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    rows = profile_layers(args.model, args.threads, args.repeat)
    print_table(rows, args.filter)
    out = Path(args.out or RESULTS / f"layers_{args.model}_t{args.threads}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
