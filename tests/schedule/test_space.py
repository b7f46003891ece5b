"""Space (tensorir/schedule/space.py): sampling, completion and mutation stay in the space."""

from __future__ import annotations

import random

from tensorir.schedule.space import Knob, Space


def space() -> Space:
    tile = Knob("tile", (1, 2, 4), 2)
    return Space(
        {
            "direct": (Knob("vector", (4, 8, 16), 16), Knob("order", ("a", "b"), "a")),
            "winograd2": (tile, Knob("k_vectors", (1, 2, 4), 2)),
            "winograd4": (Knob("tile", (1, 2, 4, 8), 4), Knob("k_vectors", (1, 2), 1)),
        },
        default_algorithm="direct",
    )


def legal(sp: Space, cfg: dict) -> bool:
    knobs = sp.branches[cfg["algorithm"]]
    names = {k.name for k in knobs} | {"algorithm"}
    return set(cfg) == names and all(cfg[k.name] in k.choices for k in knobs)


def test_mutation_changes_one_knob_or_the_algorithm():
    sp, rng = space(), random.Random(0)
    cfg = sp.complete({"algorithm": "direct", "vector": 8})
    switches = 0
    for _ in range(300):
        new = sp.mutate(cfg, rng)
        assert legal(sp, new)
        if new["algorithm"] != cfg["algorithm"]:
            switches += 1
        else:
            assert sum(new[k] != cfg[k] for k in cfg) == 1
    assert 60 <= switches <= 140  # the algorithm is one of 3 knobs to change


def test_algorithm_switch_keeps_shared_knob_values_where_allowed():
    sp, rng = space(), random.Random(1)
    cfg = {"algorithm": "winograd2", "tile": 4, "k_vectors": 4}
    kept = [sp.mutate(cfg, rng) for _ in range(400)]
    to4 = [c for c in kept if c["algorithm"] == "winograd4"]
    assert to4 and all(legal(sp, c) for c in kept)
    assert all(c["tile"] == 4 for c in to4)  # allowed in winograd4: kept
    assert {c["k_vectors"] for c in to4} == {1, 2}  # 4 is not: resampled
