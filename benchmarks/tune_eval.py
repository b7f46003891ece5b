"""Evidence for the cost model and the search, on ResNet-50's heaviest tasks.

    PYTHONPATH=. python -m benchmarks.tune_eval --tasks 4 --trials 48

For each of the first `--tasks` tasks (by weight) it tunes twice from scratch with the same
trial budget: random search, then cost-model-guided search (a fresh model, no transfer).
Reported:

* ranking accuracy: the random runs' measured configs (features, costs) per task, split
  2/3 train / 1/3 held out (10 random splits), pairwise accuracy on the held-out configs of
  a model trained on the train part of every task — for the rank and the reg objective;
* search efficiency: trials each search needed to reach 95 % of the best cost either found
  (per task), and the ratio model-guided / random.

Results go to benchmarks/results/tune_eval.json. Timings are medians of `repeat` runs of
each candidate; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from autotune.cost_model import CostModel, pairwise_accuracy
from autotune.database import Database
from autotune.measure import MeasureOptions
from autotune.task import extract_tasks, load_graph
from autotune.tuner import TuneOptions, Tuner
from benchmarks.zoo import build

RESULTS = Path(__file__).parent / "results"


def tune_once(task, search: str, trials: int, seed: int, workdir: Path) -> tuple[list[float], list]:
    """Best-so-far cost after each trial, and (features, cost) of every measured config."""
    data: list = []
    db = Database(workdir / f"{search}-{seed}.db")
    options = TuneOptions(
        trials=trials,
        batch_size=8,
        early_stopping=None,
        search=search,
        seed=seed,
        model_path=workdir / f"model-{search}-{seed}.json",
        progress=False,
    )

    def keep(st, results):
        data.extend((r.features, r.cost) for r in results if r.features is not None)

    tuner = Tuner([task], db, options, MeasureOptions(workers=2), on_batch=keep)
    summary = tuner.run()
    curve = [best for _, best in summary.tasks[0].history]
    return curve, data


def trials_to_reach(curve: list[float], target: float) -> int:
    return next((i + 1 for i, c in enumerate(curve) if c <= target), len(curve) + 1)


def ranking_accuracy(datasets: list[list], objective: str, splits: int = 10) -> float:
    accs = []
    for s in range(splits):
        rng = random.Random(s)
        tr_x, tr_c, tr_g, te_x, te_c, te_g = [], [], [], [], [], []
        for g, data in enumerate(datasets):
            idx = list(range(len(data)))
            rng.shuffle(idx)
            cut = len(idx) * 2 // 3
            for pos, i in enumerate(idx):
                f, c = data[i]
                xs, cs, gs = (tr_x, tr_c, tr_g) if pos < cut else (te_x, te_c, te_g)
                xs.append(f)
                cs.append(c)
                gs.append(g)
        model = CostModel(objective, seed=s)
        model.update(np.stack(tr_x), np.array(tr_c), np.array(tr_g))
        accs.append(pairwise_accuracy(model.predict(np.stack(te_x)), np.array(te_c), np.array(te_g)))
    return float(np.nanmean(accs))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--trials", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS / "tune_eval.json"))
    args = p.parse_args(argv)
    tasks = extract_tasks(load_graph(build(args.model)))[: args.tasks]
    rows, datasets = [], []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tir-eval-") as tmp:
        for k, task in enumerate(tasks, 1):
            rand_curve, data = tune_once(task, "random", args.trials, args.seed, Path(tmp) / f"t{k}")
            model_curve, _ = tune_once(task, "model", args.trials, args.seed, Path(tmp) / f"t{k}")
            datasets.append([(f, c) for f, c in data if math.isfinite(c)])
            best = min(min(rand_curve), min(model_curve))
            row = {
                "task": str(task),
                "best_ms": best * 1e3,
                "default_ms": rand_curve[0] * 1e3,
                "random_trials_to_95": trials_to_reach(rand_curve, best / 0.95),
                "model_trials_to_95": trials_to_reach(model_curve, best / 0.95),
                "random_best_ms": min(rand_curve) * 1e3,
                "model_best_ms": min(model_curve) * 1e3,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    acc = {obj: ranking_accuracy(datasets, obj) for obj in ("rank", "reg")}
    r_sum = sum(r["random_trials_to_95"] for r in rows)
    m_sum = sum(r["model_trials_to_95"] for r in rows)
    report = {
        "model": args.model,
        "trials_per_search": args.trials,
        "tasks": rows,
        "pairwise_accuracy": acc,
        "samples": [len(d) for d in datasets],
        "trials_to_95_random": r_sum,
        "trials_to_95_model": m_sum,
        "ratio_model_over_random": m_sum / r_sum,
        "seconds": time.perf_counter() - t0,
    }
    print(json.dumps({k: v for k, v in report.items() if k != "tasks"}, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
