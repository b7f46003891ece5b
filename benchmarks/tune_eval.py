"""Evidence for the cost model and the search, on ResNet-50's heaviest tasks.

    PYTHONPATH=. python -m benchmarks.tune_eval --tasks 4 --trials 40

For each of the first `--tasks` tasks (by weight) it tunes twice, interleaved batch by batch
(so a drifting machine slows both alike), from scratch: random search
with `--random-trials` (default 3 x `--trials`, so that random search's count can be measured
where it needs up to 3x the model's budget), then cost-model-guided search with `--trials`.
`--pretrain-tasks M` first tunes the M next tasks (model-guided, `--pretrain-trials` each)
and starts every model-guided run from that model (transfer); by default each starts fresh.
Reported:

* ranking accuracy: the random runs' measured configs (features, costs) per task, split
  2/3 train / 1/3 held out (10 random splits), pairwise accuracy on the held-out configs of
  a model trained on the train part of every task -- for the rank and the reg objective,
  and for the loop-IR features alone (no knob features) as an ablation;
* search efficiency: trials each search needed to reach 95 % of the best cost either found
  (per task; random's count is censored at random-trials + 1). The ratio model / random is
  summed over the tasks where search matters: those whose default config is not already
  within 5 % of the best (where it is, both searches "reach" it at trial 1 and the ratio
  only measures timing noise); the all-task ratio is reported too.

Results go to benchmarks/results/tune_eval.json, the random runs' samples (features, costs,
task index) to tune_eval.data.npz. Timings are medians of `repeat` runs of each candidate;
run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from autotune.cost_model import CostModel, pairwise_accuracy
from autotune.database import Database
from autotune.features import NUM_FEATURES
from autotune.measure import MeasureOptions, Measurer
from autotune.task import extract_tasks, load_graph
from autotune.tuner import TuneOptions, Tuner
from benchmarks.zoo import build

RESULTS = Path(__file__).parent / "results"


def make_tuner(
    task, search: str, trials: int, seed: int, workdir: Path, data: list, start_model: Path | None = None
) -> Tuner:
    """A one-task tuner; (features, cost) of every measured config is appended to `data`."""
    db = Database(workdir / f"{search}-{seed}.db")
    model_path = workdir / f"model-{search}-{seed}.json"
    if start_model is not None:
        CostModel.load(start_model).save(model_path)
    options = TuneOptions(
        trials=trials,
        batch_size=8,
        early_stopping=None,
        search=search,
        seed=seed,
        model_path=model_path,
        progress=False,
    )

    def keep(st, results):
        data.extend((r.features, r.cost) for r in results if r.features is not None)

    return Tuner([task], db, options, MeasureOptions(workers=2), on_batch=keep)


def tune_interleaved(tuners: list[Tuner], shares: list[int]) -> list[list[float]]:
    """Run the tuners batch by batch in turn (`shares[i]` batches of tuner i per round), so
    a machine whose speed drifts during the run slows every search alike; each tuner's
    best-so-far cost after each of its trials."""
    with contextlib.ExitStack() as stack:
        measurers = [stack.enter_context(Measurer(t.measure_options)) for t in tuners]
        live = [True] * len(tuners)
        while any(live):
            for i, (t, m) in enumerate(zip(tuners, measurers, strict=True)):
                for _ in range(shares[i]):
                    live[i] = live[i] and t.step(m)
    return [[best for _, best in t.states[0].history] for t in tuners]


def trials_to_reach(curve: list[float], target: float) -> int:
    return next((i + 1 for i, c in enumerate(curve) if c <= target), len(curve) + 1)


def ranking_accuracy(
    datasets: list[list], objective: str, splits: int = 10, columns: int | None = None
) -> float:
    """Mean held-out pairwise accuracy; `columns`: use only the first this many features."""
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
                xs.append(f[:columns] if columns else f)
                cs.append(c)
                gs.append(g)
        model = CostModel(objective, seed=s)
        model.update(np.stack(tr_x), np.array(tr_c), np.array(tr_g))
        accs.append(pairwise_accuracy(model.predict(np.stack(te_x)), np.array(te_c), np.array(te_g)))
    return float(np.nanmean(accs))


def pretrain(tasks: list, trials: int, seed: int, workdir: Path) -> Path:
    """Tune `tasks` model-guided into one model file (the transfer source); its path."""
    path = workdir / "pretrained.json"
    for k, task in enumerate(tasks, 1):
        start = path if path.exists() else None
        tuner = make_tuner(task, "model", trials, seed, workdir / f"p{k}", [], start_model=start)
        tuner.run()
        CostModel.load(tuner.model_path).save(path)
        print(f"pretrained on {task} ({trials} trials)", flush=True)
    return path


def save_datasets(path: Path, datasets: list[list]) -> None:
    """The random runs' (features, cost) per task, for offline cost-model experiments."""
    path.parent.mkdir(parents=True, exist_ok=True)
    feats = [f for d in datasets for f, _ in d]
    np.savez_compressed(
        path,
        features=np.stack(feats) if feats else np.zeros((0, 0), np.float32),
        costs=np.array([c for d in datasets for _, c in d]),
        groups=np.array([g for g, d in enumerate(datasets) for _ in d]),
    )


def efficiency(rows: list[dict], informative: bool) -> dict:
    use = [r for r in rows if r["search_matters"] or not informative]
    r_sum = sum(r["random_trials_to_95"] for r in use)
    m_sum = sum(r["model_trials_to_95"] for r in use)
    return {
        "tasks": len(use),
        "random": r_sum,
        "model": m_sum,
        "ratio_model_over_random": m_sum / r_sum if r_sum else math.nan,
    }


def saved_model_accuracy(path: str) -> dict:
    """Held-out pairwise ranking accuracy on the samples a tuning run saved beside its database
    (costmodel-<device>.json.data.npz: features, costs, task groups), with every feature, without
    the GPU features, and with the loop features alone."""
    from autotune.gpu_features import NUM_GPU_FEATURES

    d = np.load(Path(path).with_suffix(".json.data.npz") if path.endswith(".json") else path)
    by_group: dict[str, list] = {}
    for f, c, g in zip(d["features"], d["costs"], d["groups"], strict=True):
        if math.isfinite(c):
            by_group.setdefault(str(g), []).append((f, float(c)))
    datasets = [v for v in by_group.values() if len(v) >= 6]
    gpu = list(range(NUM_FEATURES, NUM_FEATURES + NUM_GPU_FEATURES))
    no_gpu = [[(np.delete(f, gpu), c) for f, c in data] for data in datasets]
    return {
        "tasks": len(datasets),
        "samples": sum(map(len, datasets)),
        "rank_all_features": ranking_accuracy(datasets, "rank"),
        "rank_without_gpu_features": ranking_accuracy(no_gpu, "rank"),
        "rank_loop_features_only": ranking_accuracy(datasets, "rank", columns=NUM_FEATURES),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--saved-model", metavar="JSON", help="only: ranking accuracy on its saved samples")
    p.add_argument("--model", default="resnet50")
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--trials", type=int, default=40)
    p.add_argument("--random-trials", type=int, default=None, help="default: 3 x --trials")
    p.add_argument("--pretrain-tasks", type=int, default=0)
    p.add_argument("--pretrain-trials", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS / "tune_eval.json"))
    args = p.parse_args(argv)
    if args.saved_model:
        print(json.dumps(saved_model_accuracy(args.saved_model), indent=1))
        return
    random_trials = args.random_trials or 3 * args.trials
    all_tasks = extract_tasks(load_graph(build(args.model)))
    tasks = all_tasks[: args.tasks]
    rows, datasets = [], []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tir-eval-") as tmp:
        start = None
        if args.pretrain_tasks:
            extra = all_tasks[args.tasks : args.tasks + args.pretrain_tasks]
            start = pretrain(extra, args.pretrain_trials, args.seed, Path(tmp))
        for k, task in enumerate(tasks, 1):
            work, data = Path(tmp) / f"t{k}", []
            rand = make_tuner(task, "random", random_trials, args.seed, work, data)
            guided = make_tuner(task, "model", args.trials, args.seed, work, [], start_model=start)
            share = max(1, round(random_trials / args.trials))
            rand_curve, model_curve = tune_interleaved([rand, guided], [share, 1])
            datasets.append([(f, c) for f, c in data if math.isfinite(c)])
            best = min(min(rand_curve), min(model_curve))
            default = min(rand_curve[0], model_curve[0])
            row = {
                "task": str(task),
                "best_ms": best * 1e3,
                "default_ms": default * 1e3,
                "search_matters": default > best / 0.95,
                "random_trials_to_95": trials_to_reach(rand_curve, best / 0.95),
                "model_trials_to_95": trials_to_reach(model_curve, best / 0.95),
                "random_best_ms": min(rand_curve) * 1e3,
                "model_best_ms": min(model_curve) * 1e3,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    save_datasets(Path(args.out).with_suffix(".data.npz"), datasets)
    acc = {obj: ranking_accuracy(datasets, obj) for obj in ("rank", "reg")}
    acc["rank_loop_features_only"] = ranking_accuracy(datasets, "rank", columns=NUM_FEATURES)
    report = {
        "model": args.model,
        "trials_model": args.trials,
        "trials_random": random_trials,
        "pretrain_tasks": args.pretrain_tasks,
        "tasks": rows,
        "pairwise_accuracy": acc,
        "samples": [len(d) for d in datasets],
        "trials_to_95_where_search_matters": efficiency(rows, informative=True),
        "trials_to_95_all_tasks": efficiency(rows, informative=False),
        "seconds": time.perf_counter() - t0,
    }
    print(json.dumps({k: v for k, v in report.items() if k != "tasks"}, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
