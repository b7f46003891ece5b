"""XGBoost cost model over kernel features (autotune/features.py): ranks candidate configs.

    model = CostModel("reg", seed=0)
    model.update(feats, costs, groups)   # retrains on everything seen so far
    scores = model.predict(new_feats)    # higher = predicted faster
    model.save("model.json"); model = CostModel.load("model.json")

Objectives:

* ``"rank"``: ``rank:pairwise`` with one query group per task (workload); only the order
  of the predictions within a group means anything.
* ``"reg"``: squared-error regression of the normalized throughput
  ``min finite cost of the sample's group / cost`` in [0, 1] (1 for the group's best).

Failed measurements (cost inf or nan) get throughput 0, so both objectives learn to rank
them last. `groups` (one id per sample, ints or strings) defaults to a single group.

Persistence: ``save(path)`` writes the booster as XGBoost JSON at `path`, a small JSON of
the settings at ``path + ".meta.json"`` and the training data seen so far at
``path + ".data.npz"``; ``load(path)`` restores all three, so a loaded model that gets
``update``d retrains on the old data plus the new (warm start / transfer across sessions).
Training is deterministic for a given seed (single-threaded ``hist`` trees by default).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import xgboost as xgb

OBJECTIVES = ("rank", "reg")
DEFAULT_PARAMS: dict[str, Any] = {
    "max_depth": 6,
    "eta": 0.2,
    "gamma": 1e-4,
    "min_child_weight": 1.0,
    "subsample": 1.0,
    "colsample_bytree": 1.0,
    "lambda": 1.0,
    "alpha": 0.0,
    "tree_method": "hist",
    "max_bin": 128,
}
# Chosen on the held-out pairwise accuracy of benchmarks/tune_eval.py (ResNet-50's 4 heaviest
# tasks, 120 random configs each, 10 splits): shallower trees and a smaller step than the
# defaults; for rank:pairwise, random pairs within a query (32 per sample) instead of
# XGBoost's top-k pairs. reg 0.811 / rank 0.804 there, vs 0.796 / 0.778 with depth 6 / 4,
# eta 0.2 and 8 pairs.
RANK_PARAMS: dict[str, Any] = {
    "max_depth": 4,
    "eta": 0.1,
    "lambdarank_pair_method": "mean",
    "lambdarank_num_pair_per_sample": 32,
}
REG_PARAMS: dict[str, Any] = {"max_depth": 4, "eta": 0.1}
META_VERSION = 1


def _as_groups(groups: np.ndarray | None, n: int) -> np.ndarray:
    if groups is None:
        return np.full(n, "0", dtype=np.str_)
    g = np.asarray(groups)
    if g.shape != (n,):
        raise ValueError(f"groups has shape {g.shape}, expected ({n},)")
    return g.astype(np.str_)


def normalized_throughput(costs: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """min finite cost of each sample's group / cost, in [0, 1]; 0 for non-finite costs."""
    costs = np.asarray(costs, dtype=np.float64)
    g = _as_groups(groups, len(costs))
    out = np.zeros(len(costs), dtype=np.float64)
    ok = np.isfinite(costs) & (costs > 0)
    for gid in np.unique(g):
        m = (g == gid) & ok
        if m.any():
            out[m] = costs[m].min() / costs[m]
    return out


def pairwise_accuracy(pred: np.ndarray, costs: np.ndarray, groups: np.ndarray | None = None) -> float:
    """Fraction of pairs ordered correctly: pred higher <=> cost lower. Pairs are taken
    within one group, between samples with finite, different costs; a tie in `pred` counts
    as wrong. nan when there is no such pair."""
    pred = np.asarray(pred, dtype=np.float64)
    costs = np.asarray(costs, dtype=np.float64)
    if pred.shape != costs.shape or pred.ndim != 1:
        raise ValueError(f"pred {pred.shape} and costs {costs.shape} must be equal 1-d shapes")
    g = _as_groups(groups, len(costs))
    ok = np.isfinite(costs)
    correct = total = 0
    for gid in np.unique(g):
        m = (g == gid) & ok
        p, c = pred[m], costs[m]
        for s in range(0, len(c), 1024):  # chunks bound the memory of the pair matrices
            dc = np.sign(c[s : s + 1024, None] - c[None, :])  # rows i, columns j
            dp = np.sign(p[s : s + 1024, None] - p[None, :])
            pairs = dc != 0
            total += int(pairs.sum())
            correct += int((pairs & (dp == -dc)).sum())
    return correct / total if total else math.nan


class CostModel:
    """XGBoost model of kernel cost; see the module docstring."""

    def __init__(
        self,
        objective: str = "reg",
        seed: int = 0,
        num_rounds: int = 100,
        nthread: int = 1,
        params: dict[str, Any] | None = None,
    ) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective {objective!r} is not one of {OBJECTIVES}")
        self.objective = objective
        self.seed = int(seed)
        self.num_rounds = int(num_rounds)
        self.nthread = int(nthread)
        base = {**DEFAULT_PARAMS, **(RANK_PARAMS if objective == "rank" else REG_PARAMS)}
        self.params = {**base, **(params or {})}
        self.booster: xgb.Booster | None = None
        self.num_features: int | None = None
        self._x = np.zeros((0, 0), dtype=np.float32)
        self._costs = np.zeros(0, dtype=np.float64)
        self._groups = np.zeros(0, dtype=np.str_)

    # ---- data -------------------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        return len(self._costs)

    def training_data(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(features, costs, groups) of every sample seen so far (copies)."""
        return self._x.copy(), self._costs.copy(), self._groups.copy()

    def _xgb_params(self) -> dict[str, Any]:
        obj = "rank:pairwise" if self.objective == "rank" else "reg:squarederror"
        return {**self.params, "objective": obj, "seed": self.seed, "nthread": self.nthread, "verbosity": 0}

    def update(self, features: np.ndarray, costs: np.ndarray, groups: np.ndarray | None = None) -> None:
        """Add these measurements (cost in seconds, inf for a failure) and retrain on all data."""
        x = np.asarray(features, dtype=np.float32)
        if x.ndim != 2:
            raise ValueError(f"features must be 2-d, got shape {x.shape}")
        c = np.asarray(costs, dtype=np.float64).reshape(-1)
        if len(c) != len(x):
            raise ValueError(f"{len(x)} feature rows but {len(c)} costs")
        if self.num_features is not None and x.shape[1] != self.num_features:
            raise ValueError(f"features have {x.shape[1]} columns, the model has {self.num_features}")
        g = _as_groups(groups, len(c))
        c = np.where(np.isfinite(c), c, np.inf)
        if self.num_features is None:
            self.num_features = x.shape[1]
            self._x = np.zeros((0, x.shape[1]), dtype=np.float32)
        self._x = np.concatenate([self._x, x])
        self._costs = np.concatenate([self._costs, c])
        self._groups = np.concatenate([self._groups.astype(np.str_), g])
        self._train()

    def _train(self) -> None:
        if self.num_samples == 0:
            self.booster = None
            return
        y = normalized_throughput(self._costs, self._groups)
        if self.objective == "rank":
            _, qid = np.unique(self._groups, return_inverse=True)
            order = np.argsort(qid, kind="stable")  # XGBoost wants each query contiguous
            dtrain = xgb.DMatrix(self._x[order], label=y[order], qid=qid[order], nthread=self.nthread)
        else:
            dtrain = xgb.DMatrix(self._x, label=y, nthread=self.nthread)
        self.booster = xgb.train(self._xgb_params(), dtrain, num_boost_round=self.num_rounds)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Scores, higher = predicted faster (comparable within one group); zeros before
        any training."""
        x = np.asarray(features, dtype=np.float32)
        if x.ndim == 1:
            x = x[None, :]
        if self.booster is None:
            return np.zeros(len(x), dtype=np.float64)
        if self.num_features is not None and x.shape[1] != self.num_features:
            raise ValueError(f"features have {x.shape[1]} columns, the model has {self.num_features}")
        return self.booster.inplace_predict(x).astype(np.float64)

    # ---- persistence ------------------------------------------------------------------
    @staticmethod
    def _paths(path: str | Path) -> tuple[Path, Path, Path]:
        p = Path(path)
        return p, Path(str(p) + ".meta.json"), Path(str(p) + ".data.npz")

    def save(self, path: str | Path) -> None:
        """Booster (XGBoost JSON) at `path`, settings beside it, training data in an npz."""
        model_p, meta_p, data_p = self._paths(path)
        model_p.parent.mkdir(parents=True, exist_ok=True)
        meta = {
            "version": META_VERSION,
            "objective": self.objective,
            "seed": self.seed,
            "num_rounds": self.num_rounds,
            "nthread": self.nthread,
            "params": self.params,
            "num_features": self.num_features,
            "num_samples": self.num_samples,
            "has_booster": self.booster is not None,
        }
        if self.booster is not None:
            self.booster.save_model(str(model_p) if model_p.suffix == ".json" else _json_name(model_p))
            if model_p.suffix != ".json":
                Path(_json_name(model_p)).replace(model_p)
        meta_p.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        with data_p.open("wb") as fh:
            np.savez_compressed(fh, features=self._x, costs=self._costs, groups=self._groups.astype(np.str_))

    @classmethod
    def load(cls, path: str | Path) -> CostModel:
        model_p, meta_p, data_p = cls._paths(path)
        meta = json.loads(meta_p.read_text())
        m = cls(meta["objective"], meta["seed"], meta["num_rounds"], meta["nthread"], meta["params"])
        m.num_features = meta["num_features"]
        if data_p.exists():
            with np.load(data_p, allow_pickle=False) as d:
                m._x = d["features"].astype(np.float32)
                m._costs = d["costs"].astype(np.float64)
                m._groups = d["groups"].astype(np.str_)
        if meta.get("has_booster"):
            booster = xgb.Booster(params={"nthread": m.nthread})
            booster.load_model(str(model_p))
            m.booster = booster
        return m


def _json_name(p: Path) -> str:
    # XGBoost picks the format from the file name: write JSON through a ".json" name.
    return str(p) + ".tmp.json"
