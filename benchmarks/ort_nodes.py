"""Per layer, tensorir's kernels beside onnxruntime's nodes: where one engine is faster.

    python -m benchmarks.ort_nodes resnet50 --threads 2
    python -m benchmarks.ort_nodes .wild/captcha_det.onnx --threads 1 --top 40

tensorir's side is `benchmarks.layers` (every kernel timed in place in model order,
`Module.profile`, named by the ONNX node of its anchor conv / dense / matmul). onnxruntime's is
its own profiler (`SessionOptions.enable_profiling`): each node's `kernel_time` per run, the
median over --runs runs. onnxruntime fuses too and names a fused node after its last member
(`layer4.0.relu2_nchwc`: a Conv with its BatchNorm and Relu, in its NCHWc layout), so both sides
are summed per anchor: the ONNX Conv / Gemm / MatMul that a node's first input leads back to
through single-input ops (BatchNorm, Relu, Add's first input, MaxPool, ...). What leads back to
none (a reshape before the first conv, a reorder) stays under its own name. A tensorir kernel
that computes several anchors (a merged depthwise + 1x1 block: `features.2.expand+dw+project`)
is one row, with every onnxruntime node that leads back to any of them. Rows sorted by
tensorir - 0.8 x onnxruntime, largest first: the layers furthest from issue 16's goal.

onnxruntime's profiler costs it some microseconds a node; the footer compares its profiled sum
with an unprofiled run. Where that overhead is a large part (MobileNetV2-96 at 2 threads ran
slower profiled than at one thread unprofiled), read only the large layers.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx

ANCHORS = {"Conv", "Gemm", "MatMul", "ConvTranspose"}
ORT_SUFFIXES = ("_nchwc", "_token_", "_fused", "/")


def anchor_names(model: onnx.ModelProto) -> dict[str, str]:
    """ONNX node name -> the name of its anchor (itself for an anchor; walking back through
    first inputs otherwise, up to 8 steps; "" where none is found)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    out = {}
    for node in model.graph.node:
        n, steps = node, 0
        while n is not None and n.op_type not in ANCHORS and steps < 8 and n.input:
            n, steps = producer.get(n.input[0]), steps + 1
        out[node.name] = n.name if n is not None and n.op_type in ANCHORS else ""
    return out


def tensor_anchors(model: onnx.ModelProto) -> dict[str, str]:
    """Output tensor name -> the anchor of the node that produces it: onnxruntime names a node
    it rewrites into NCHWc after its output where the model's node names are others
    (ddddocr's detector: node Conv_41, onnxruntime's 877_nchwc)."""
    anchors = anchor_names(model)
    return {o: anchors[n.name] for n in model.graph.node for o in n.output if anchors[n.name]}


def ort_base_name(name: str) -> str:
    """onnxruntime's node name without the suffixes its graph transformers add
    (`layer4.0.relu2_nchwc`, `Mul_43/QuickGeluFusion/`)."""
    for suffix in ORT_SUFFIXES:
        if suffix in name:
            name = name[: name.index(suffix)]
    return name


def ort_node_ms(
    model: onnx.ModelProto, feeds: dict, threads: int, runs: int
) -> tuple[dict[str, float], float]:
    """({onnxruntime node: median ms per run}, median ms of an unprofiled run)."""
    import onnxruntime as ort

    blob = model.SerializeToString()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    plain = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])
    for _ in range(5):
        plain.run(None, feeds)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        plain.run(None, feeds)
        times.append(time.perf_counter() - t0)
    opts.enable_profiling = True
    opts.profile_file_prefix = str(Path(tempfile.mkdtemp(prefix="tir-ort-prof-")) / "ort")
    sess = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        sess.run(None, feeds)
    events = json.loads(Path(sess.end_profiling()).read_text())
    per: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per[e["name"].removesuffix("_kernel_time")].append(e["dur"] / 1e3)
    return {k: float(np.median(v)) for k, v in per.items()}, float(np.median(times)) * 1e3


def join(model: onnx.ModelProto, tir_rows: list[dict], ort_ms: dict[str, float]) -> list[dict]:
    """Per anchor (or unmatched name): tensorir ms, onnxruntime ms; sorted by tir - 0.8 ort."""
    anchors = anchor_names(model)
    by_tensor = tensor_anchors(model)
    ours: dict[str, float] = defaultdict(float)
    theirs: dict[str, float] = defaultdict(float)
    # anchor -> the row of the kernel that computes it with others (a merged block)
    merged = {m: r["node"] for r in tir_rows for m in r.get("members", ()) if m not in ("?", "-")}
    for r in tir_rows:  # a kernel without an anchor (a pool) is named by its own node
        name = r["node"] or r["symbol"]
        anchor = anchors.get(name) or name
        ours[merged.get(anchor, anchor)] += r["ms"]
    for name, ms in ort_ms.items():
        base = ort_base_name(name)
        anchor = anchors.get(base) or by_tensor.get(base) or base
        theirs[merged.get(anchor, anchor)] += ms
    rows = [
        {"node": k, "tir_ms": ours.get(k, 0.0), "ort_ms": theirs.get(k, 0.0)} for k in set(ours) | set(theirs)
    ]
    for r in rows:
        r["ratio"] = r["tir_ms"] / r["ort_ms"] if r["ort_ms"] else None
    return sorted(rows, key=lambda r: -(r["tir_ms"] - 0.8 * r["ort_ms"]))


def main(argv: list[str] | None = None) -> None:
    from benchmarks.layers import profile_layers
    from benchmarks.layout_storms import model_and_feeds

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="zoo model or .onnx file with static input shapes (.wild/NAME.onnx)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args(argv)
    blob, feeds = model_and_feeds(args.model)
    model = onnx.load_from_string(blob)
    tir_rows = profile_layers(args.model, args.threads, repeat=args.runs)
    ort_ms, ort_run = ort_node_ms(model, feeds, args.threads, args.runs)
    rows = join(model, tir_rows, ort_ms)
    print(f"{'node':<34} {'tensorir ms':>11} {'ort ms':>8} {'ratio':>6}")
    for r in rows[: args.top]:
        ratio = f"{r['ratio']:>6.2f}" if r["ratio"] is not None else "     -"
        print(f"{r['node'][-34:]:<34} {r['tir_ms']:>11.3f} {r['ort_ms']:>8.3f} {ratio}")
    ours, theirs = sum(r["tir_ms"] for r in rows), sum(r["ort_ms"] for r in rows)
    print(
        f"sums: tensorir {ours:.3f} ms, onnxruntime {theirs:.3f} ms profiled ({ours / theirs:.2f}); "
        f"onnxruntime unprofiled {ort_run:.3f} ms a run"
    )


if __name__ == "__main__":
    main()
