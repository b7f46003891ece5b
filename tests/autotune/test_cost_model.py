"""XGBoost cost model: learns a synthetic cost, save/load, warm start, pairwise accuracy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autotune.cost_model import CostModel, normalized_throughput, pairwise_accuracy


def synthetic(n: int, seed: int, n_groups: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Costs a known function of the features; each group (task) has its own scale."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 4, size=(n, 12)).astype(np.float32)
    groups = rng.integers(0, n_groups, size=n)
    log_cost = 0.8 * x[:, 0] - 0.5 * x[:, 1] + 0.3 * x[:, 2] * x[:, 3] + np.where(x[:, 4] > 2, 0.7, 0.0)
    costs = np.exp(log_cost + 0.02 * rng.standard_normal(n)) * (1e-3 * (1 + groups))
    return x, costs, groups


@pytest.mark.parametrize("objective", ["rank", "reg"])
def test_learns_synthetic_cost(objective):
    x, c, g = synthetic(1500, 0)
    xt, ct, gt = synthetic(400, 1)
    c[::50] = math.inf  # failed measurements are fine in the training data
    model = CostModel(objective, seed=0)
    model.update(x, c, g)
    acc = pairwise_accuracy(model.predict(xt), ct, gt)
    assert acc > 0.9, acc


def test_predict_before_training_and_shapes():
    model = CostModel("rank")
    p = model.predict(np.ones((5, 7), np.float32))
    assert p.shape == (5,) and np.all(p == 0)
    with pytest.raises(ValueError):
        CostModel("nope")
    model.update(np.ones((4, 7)), np.array([1.0, 2.0, 3.0, 4.0]))
    with pytest.raises(ValueError):
        model.predict(np.ones((2, 8)))
    with pytest.raises(ValueError):
        model.update(np.ones((3, 7)), np.ones(2))


def test_deterministic_given_seed():
    x, c, g = synthetic(300, 2)
    a, b = CostModel("reg", seed=3), CostModel("reg", seed=3)
    a.update(x, c, g)
    b.update(x, c, g)
    assert np.array_equal(a.predict(x), b.predict(x))


@pytest.mark.parametrize("objective", ["rank", "reg"])
@pytest.mark.parametrize("name", ["model.json", "model.bin"])
def test_save_load_round_trip(tmp_path, objective, name):
    x, c, g = synthetic(300, 3)
    model = CostModel(objective, seed=1, num_rounds=30)
    model.update(x, c, g)
    path = tmp_path / "sub" / name
    model.save(path)
    assert path.read_text().lstrip().startswith("{")  # XGBoost JSON whatever the suffix
    loaded = CostModel.load(path)
    assert loaded.objective == objective and loaded.num_rounds == 30 and loaded.num_samples == 300
    xt, _, _ = synthetic(100, 4)
    assert np.array_equal(model.predict(xt), loaded.predict(xt))


def test_save_load_untrained(tmp_path):
    CostModel("reg").save(tmp_path / "m.json")
    loaded = CostModel.load(tmp_path / "m.json")
    assert loaded.booster is None and loaded.num_samples == 0
    assert np.all(loaded.predict(np.ones((3, 4))) == 0)


def test_warm_start_keeps_old_data(tmp_path):
    x, c, g = synthetic(600, 5)
    model = CostModel("rank", seed=0)
    model.update(x[:400], c[:400], g[:400])
    model.save(tmp_path / "m.json")
    loaded = CostModel.load(tmp_path / "m.json")
    loaded.update(x[400:], c[400:], g[400:])
    assert loaded.num_samples == 600
    fx, fc, fg = loaded.training_data()
    assert np.array_equal(fx, x) and np.array_equal(fc, c) and list(fg) == [str(v) for v in g]
    # the same as training on everything at once
    fresh = CostModel("rank", seed=0)
    fresh.update(x, c, g)
    xt, _, _ = synthetic(100, 6)
    assert np.allclose(loaded.predict(xt), fresh.predict(xt))


def test_string_groups_and_failures_rank_last():
    x, c, _ = synthetic(400, 7)
    g = np.array(["conv_a", "matmul_b"])[np.arange(400) % 2]
    c[x[:, 5] > 3.0] = math.inf  # a feature that predicts failure
    model = CostModel("reg", seed=0)
    model.update(x, c, g)
    p = model.predict(x)
    assert p[~np.isfinite(c)].mean() < p[np.isfinite(c)].mean()


def test_normalized_throughput():
    y = normalized_throughput(np.array([2.0, 4.0, math.inf, 1.0, 3.0]), np.array([0, 0, 0, 1, 1]))
    assert np.allclose(y, [1.0, 0.5, 0.0, 1.0, 1 / 3])


def test_pairwise_accuracy_hand_cases():
    costs = np.array([1.0, 2.0, 3.0])
    assert pairwise_accuracy(np.array([3.0, 2.0, 1.0]), costs) == 1.0
    assert pairwise_accuracy(np.array([1.0, 2.0, 3.0]), costs) == 0.0
    assert pairwise_accuracy(np.array([3.0, 1.0, 2.0]), costs) == pytest.approx(2 / 3)
    # ties in pred count as wrong; equal costs and inf costs make no pair
    assert pairwise_accuracy(np.array([1.0, 1.0]), np.array([1.0, 2.0])) == 0.0
    assert math.isnan(pairwise_accuracy(np.array([0.0, 9.0]), np.array([1.0, math.inf])))
    assert math.isnan(pairwise_accuracy(np.array([0.0, 9.0]), np.array([1.0, 1.0])))
    # pairs only within a group: across groups the order is ignored
    pred = np.array([2.0, 1.0, 20.0, 10.0])
    costs = np.array([1.0, 2.0, 10.0, 20.0])
    assert pairwise_accuracy(pred, costs, np.array([0, 0, 1, 1])) == 1.0
    assert pairwise_accuracy(pred, costs) == pytest.approx(2 / 6)  # (0,1) and (2,3) right
