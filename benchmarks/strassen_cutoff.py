"""Where one level of Strassen (ops/dense_strassen.py) beats the direct dense kernel.

    PYTHONPATH=. python -m benchmarks.strassen_cutoff --threads 1
    PYTHONPATH=. python -m benchmarks.strassen_cutoff --threads 2 --shapes 512x768x3072 1024x1024x1024

For each dense shape M x K -> N (x: (M, K), a constant w: (N, K)) the tuner's Measurer times
the "direct" and the "strassen" algorithm with their default knobs (cold caches, result
checked against the reference, median of `repeat` timings), `--rounds` times in turn;
printed: the medians over rounds, strassen / direct, and what MNN's rule (the analytic
default, dense_strassen.strassen_default) says. Rows go to
benchmarks/results/strassen_cutoff_t<threads>.json. Run it on a quiet machine.
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


def dense_task(m: int, k: int, n: int) -> Task:
    types = (TensorType((m, k)), TensorType((n, k)))
    return Task(f"dense {m}x{k}x{n}", "dense", types, {}, 2 * m * n * k, const_args=frozenset({1}))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="*", default=SHAPES, help="MxKxN")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
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
            rule = strassen_default(m, n, k)
            rows.append({"shape": shape, "direct_ms": direct, "strassen_ms": strassen, "mnn_rule": rule})
            print(
                f"{shape:>16}  direct {direct:8.3f} ms  strassen {strassen:8.3f} ms  "
                f"ratio {strassen / direct:5.2f}  MNN rule: {'strassen' if rule else 'direct'}",
                flush=True,
            )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"strassen_cutoff_t{args.threads}.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
