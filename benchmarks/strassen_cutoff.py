"""Where one level of Strassen (ops/dense_strassen.py) beats the direct dense kernel.

    PYTHONPATH=. python -m benchmarks.strassen_cutoff --threads 1
    PYTHONPATH=. python -m benchmarks.strassen_cutoff --threads 2 --shapes 512x768x3072 1024x1024x1024

For each dense shape M x K -> N (x: (M, K), a constant w: (N, K)) the tuner's Measurer times
the "direct" and the "strassen" algorithm with their default knobs (cold caches, result
checked against the reference, median of `repeat` timings), `--rounds` times in turn;
printed: the medians over rounds, strassen / direct, and what MNN's rule and the default
(dense_strassen.strassen_default) say. Rows go to
benchmarks/results/strassen_cutoff_t<threads>.json. Run it on a quiet machine.

`--ffn TOKENS` times a whole model instead: BERT-base's feed-forward block (dense 768 -> 3072,
relu, dense 3072 -> 768, residual add) at TOKENS rows, compiled with the default algorithms and
with every dense forced to direct, `--rounds` interleaved rounds of 10 runs, medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from autotune.measure import MeasureOptions, Measurer
from autotune.task import Task
from tensorir.graph.types import TensorType
from tensorir.ops.dense_strassen import strassen_default

SHAPES = [
    "128x128x128",
    "256x256x256",
    "512x512x512",
    "1024x1024x1024",
    "128x768x3072",  # BERT-base FFN up-projection at 128 tokens
    "512x768x3072",  # ... at 512 tokens
    "512x3072x768",  # the down-projection
    "196x256x1024",  # a large 1x1 conv as a product (14x14 pixels)
]
RESULTS = Path(__file__).parent / "results"


def mnn_rule(m: int, n: int, k: int) -> bool:
    """MNN's cut-off: the saved multiply-adds against 3mk + 3nk + 5.25mn extra element ops."""
    return m * n * k / 8 > 3 * m * k + 3 * n * k + 5.25 * m * n


def dense_task(m: int, k: int, n: int) -> Task:
    types = (TensorType((m, k)), TensorType((n, k)))
    return Task(f"dense {m}x{k}x{n}", "dense", types, {}, 2 * m * n * k, const_args=frozenset({1}))


def ffn_model(tokens: int):
    """BERT-base's feed-forward block at `tokens` rows (random weights, seed 0)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32), n)
        for n, s in (("w1", (768, 3072)), ("w2", (3072, 768)))
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["g"]),
        helper.make_node("MatMul", ["g", "w2"], ["d"]),
        helper.make_node("Add", ["d", "x"], ["y"]),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [tokens, 768]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "bert_ffn", io[:1], io[1:], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def time_ffn(tokens: int, threads: int, rounds: int) -> None:
    import time

    import numpy as np

    import tensorir as tir
    from autotune.task import extract_tasks, load_graph

    model = ffn_model(tokens)
    tasks = [t for t in extract_tasks(load_graph(model)) if "strassen" in t.space().algorithms]
    direct = {t.key: {"algorithm": "direct"} for t in tasks}
    mods = {"default": tir.compile(model), "direct": tir.compile(model, records=direct)}
    for name, mod in mods.items():
        mod.set_num_threads(threads)
        algos = [k.get("algorithm") for k in mod.manifest["kernels"] if k.get("algorithm")]
        print(f"{name}: kernels' algorithms {algos}")
    x = {"x": np.random.default_rng(1).standard_normal((tokens, 768)).astype(np.float32)}
    outs = {n: m.run(x)[0] for n, m in mods.items()}
    print(f"max |default - direct| = {float(np.max(np.abs(outs['default'] - outs['direct']))):.2e}")
    times: dict[str, list[float]] = {n: [] for n in mods}
    for _ in range(rounds):
        for n, m in mods.items():
            call = m.bind(x)
            for _ in range(10):
                t0 = time.perf_counter()
                call()
                times[n].append(time.perf_counter() - t0)
    med = {n: statistics.median(t) * 1e3 for n, t in times.items()}
    print(
        f"BERT FFN {tokens} tokens, {threads} thread(s): default {med['default']:.2f} ms, "
        f"all direct {med['direct']:.2f} ms, ratio {med['default'] / med['direct']:.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="*", default=SHAPES, help="MxKxN")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ffn", type=int, metavar="TOKENS", help="time BERT-base's FFN block instead")
    args = p.parse_args(argv)
    if args.ffn:
        return time_ffn(args.ffn, args.threads, args.rounds)
    rows = []
    with Measurer(MeasureOptions(target="host", workers=1, threads=args.threads)) as meas:
        for shape in args.shapes:
            m, k, n = (int(d) for d in shape.split("x"))
            task = dense_task(m, k, n)
            configs = [{"algorithm": "direct"}, {"algorithm": "strassen"}]
            times: list[list[float]] = [[], []]
            for _ in range(args.rounds):
                for i, r in enumerate(meas.measure(task, configs)):
                    if r.error:
                        raise SystemExit(f"{shape} {configs[i]}: {r.error}")
                    times[i].append(r.cost)
            direct, strassen = (statistics.median(t) * 1e3 for t in times)
            rule, default = mnn_rule(m, n, k), strassen_default(m, n, k)
            row = {"shape": shape, "direct_ms": direct, "strassen_ms": strassen, "mnn_rule": rule}
            rows.append(row | {"default": default})
            print(
                f"{shape:>16}  direct {direct:8.3f} ms  strassen {strassen:8.3f} ms  "
                f"ratio {strassen / direct:5.2f}  MNN rule: {'strassen' if rule else 'direct'}"
                f"  default: {'strassen' if default else 'direct'}",
                flush=True,
            )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"strassen_cutoff_t{args.threads}.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
