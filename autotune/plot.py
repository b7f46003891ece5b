"""`tir tune --plot`: best-so-far curves per task and for the whole model."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def model_curve(summary: Any) -> tuple[list[int], list[float]]:
    """(global trial, estimated tuned-kernel latency in ms) after each trial: the sum over
    tasks of count x best-so-far (a task not measured yet counts its first result)."""
    events = sorted((t, k, best) for k, st in enumerate(summary.tasks) for t, best in st.history)
    first = {
        k: next((b for _, b in st.history if math.isfinite(b)), math.inf)
        for k, st in enumerate(summary.tasks)
    }
    best = dict(first)
    xs, ys = [], []
    for t, k, b in events:
        if math.isfinite(b):
            best[k] = b
        total = sum(summary.tasks[j].task.count * v for j, v in best.items() if math.isfinite(v))
        xs.append(t)
        ys.append(total * 1e3)
    return xs, ys


def plot_curves(summary: Any, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for k, st in enumerate(summary.tasks, 1):
        pts = [(i + 1, st.task.flops / b / 1e9) for i, (_, b) in enumerate(st.history) if math.isfinite(b)]
        if pts:
            ax1.plot(*zip(*pts, strict=True), label=f"{k}. {st.task.label}"[:40], linewidth=1)
    ax1.set_xlabel("trials of the task")
    ax1.set_ylabel("best GFLOP/s so far")
    ax1.set_title("per task")
    if len(summary.tasks) <= 20:
        ax1.legend(fontsize=6)
    xs, ys = model_curve(summary)
    ax2.plot(xs, ys)
    ax2.set_xlabel("trials (all tasks)")
    ax2.set_ylabel("tuned kernels, ms per run (sum of count x best)")
    ax2.set_title("model")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
