"""benchmarks/compare.py's interleaving: every fn in every slot as often, ratios per round."""

from __future__ import annotations

import collections
import itertools
import os

import numpy as np
import pytest

import benchmarks.compare as cmp
from autotune.interleaved import turn_orders


class FakeClock:
    """compare.py's clock in these tests: a sleep moves it on exactly, each reading moves it a
    microsecond (so a wait loop always ends). Real sleeps overshoot on a loaded machine (CI's
    two cores under pytest -n 2) by more than CANARY_SLACK, which made rounds look busy."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1e-6
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


@pytest.fixture(autouse=True)
def fake_clock(monkeypatch) -> FakeClock:
    clock = FakeClock()
    monkeypatch.setattr(cmp, "time", clock)
    return clock


def test_every_fn_takes_every_slot_equally_often():
    for n in (1, 2, 3, 4, 5):
        orders = turn_orders(n)
        slots = collections.Counter((k, slot) for order in orders for slot, k in enumerate(order))
        assert sorted(map(sorted, orders)) == [list(range(n))] * len(orders)
        assert set(slots.values()) == {len(orders) // n}, n
        assert len(slots) == n * n


def test_rounds_make_whole_turns_and_time_each_fn(monkeypatch):
    monkeypatch.setattr(cmp, "PAUSE_S", 0.0)
    monkeypatch.setattr(cmp, "WARM_S", 0.0)
    calls, sequence = collections.Counter(), []

    def fn(k):
        def run():
            calls[k] += 1
            sequence.append(k)

        return run

    blocks = cmp.interleaved_blocks([fn(0), fn(1), fn(2)], runs=7, warmup=1)
    # 7 runs = 2 blocks of 5, made a whole turn of the 6 orders of 3 fns
    assert blocks.shape == (6, 3)
    assert calls == {k: 1 + 6 * (1 + cmp.BLOCK) for k in range(3)}
    firsts = [sequence[3 + r * 3 * (1 + cmp.BLOCK)] for r in range(6)]  # after the warm-up
    assert sorted(firsts) == [0, 0, 1, 1, 2, 2]


def test_short_models_get_more_runs_per_row():
    """A model under SHORT_MODEL_S a run (MobileNetV2-96: 0.5 ms) gets at least
    SHORT_MODEL_RUNS timed runs a row; a longer one keeps --runs, and more asked stays more."""
    assert cmp.row_runs(20, 0.5e-3) == cmp.SHORT_MODEL_RUNS
    assert cmp.row_runs(20, 30e-3) == 20
    assert cmp.row_runs(100, 0.5e-3) == 100


def test_paired_ratio_follows_the_machine_from_round_to_round():
    # a VM fast for three rounds, slow for two, changing state in the middle of round 3;
    # a is 1.1x slower than b throughout
    b = np.array([1.0, 1.0, 1.0, 1.9, 1.9, 1.9])
    a = np.array([1.1, 1.1, 1.1, 1.1, 2.09, 2.09])  # round 3: a ran before the change
    blocks = np.stack([a, b], axis=1)
    assert np.median(a) / np.median(b) < 0.8  # the medians of all rounds land in different states
    assert cmp.paired_ratio(blocks, 0, 1) == pytest.approx(1.1)
    assert cmp.ratio_spread(blocks, 0, 1) == pytest.approx((1.1, 1.1, 1.1))


def test_each_build_time_is_the_mean_of_its_two_files():
    # rounds of (untuned, onnxruntime, tuned, untuned from a second file, tuned from a second
    # file): a file's placement moves a whole build by a few percent
    rounds = np.array([[1.04, 2.0, 1.0, 1.0, 0.96], [1.04, 2.0, 1.0, 1.0, 0.96]])
    three = cmp.untuned_both_orders(rounds)
    assert three.shape == (2, 3)
    assert three[:, 0] == pytest.approx([1.02, 1.02]) and three[:, 2] == pytest.approx([0.98, 0.98])
    assert cmp.paired_ratio(three, 2, 0) == pytest.approx(0.98 / 1.02)
    four = cmp.untuned_both_orders(rounds[:, :4])  # an untuned build in two files, one tuned
    assert four[:, 2] == pytest.approx([1.0, 1.0])
    two = np.array([[1.0, 2.0]])
    assert cmp.untuned_both_orders(two) is two


def test_build_ab_ratio_averages_the_copies_of_each_build():
    from benchmarks.build_ab import ab_ratios

    # rounds of (A, B, A, B, onnxruntime): the copies of each build differ by their placement
    blocks = np.array([[1.04, 0.96, 1.00, 1.00, 2.0], [2.08, 1.92, 2.00, 2.00, 4.0]])
    np.testing.assert_allclose(ab_ratios(blocks), [1.96 / 2.04] * 2)  # a slow round reads the same
    same = np.array([[1.04, 1.00, 1.00, 1.04, 2.0]])  # one build's four copies: the offsets cancel
    np.testing.assert_allclose(ab_ratios(same), [1.0])


def _probes(*scalings):
    """A probe returning (1-thread, 2-thread) GFLOP/s with these scalings, in turn."""
    it = iter(scalings)
    return lambda: (100.0, 100.0 * next(it))


@pytest.mark.parametrize(
    "scalings, measured, expected",
    [
        ((1.9, 1.95), 1, 1.9),  # idle around the row: one measurement
        ((1.9, 1.2, 1.1, 1.92, 1.91, 1.93), 3, 1.91),  # busy, busy, then idle on both sides
        ((1.2, 1.9, 1.9, 1.1, 1.3, 1.4), 3, 1.3),  # still busy after two retries: flagged
    ],
)
def test_a_multi_thread_row_is_taken_again_while_the_second_core_is_busy(
    monkeypatch, scalings, measured, expected
):
    monkeypatch.setattr(cmp, "PAUSE_S", 0.0)
    monkeypatch.setattr(cmp, "WARM_S", 0.0)
    calls = collections.Counter()
    fn = lambda: calls.update("f")  # noqa: E731
    blocks, scaling, dropped, *_ = cmp.blocks_on_idle_cores(
        [fn], 5, 0, threads=2, retries=2, probe=_probes(*scalings), canary=_sleeper([0.001]), apart=_near
    )
    # with the canary, two fns: two rounds (each fn in each slot once)
    assert calls["f"] == measured * 2 * (1 + cmp.BLOCK) and blocks.shape == (2, 1) and dropped == 0
    assert scaling == pytest.approx(expected)


def test_one_thread_rows_take_no_probe(monkeypatch):
    monkeypatch.setattr(cmp, "PAUSE_S", 0.0)
    monkeypatch.setattr(cmp, "WARM_S", 0.0)
    blocks, scaling, dropped, *_ = cmp.blocks_on_idle_cores(
        [lambda: None], 5, 0, threads=1, retries=2, probe=_probes()
    )
    assert scaling is None and blocks.shape == (1, 1) and dropped == 0


def _near() -> bool:  # the two cores are never apart
    return False


def _sleeper(seconds_per_call: list[float]):
    """A fn whose k-th call sleeps seconds_per_call[k] (the last value once they run out)."""
    it = iter(seconds_per_call)
    last = [seconds_per_call[-1]]

    def call() -> None:
        last[0] = next(it, last[0])
        cmp.time.sleep(last[0])

    return call


def test_rounds_where_the_canary_ran_slow_are_dropped(monkeypatch):
    """Between idle probes, a tenant holding a core for a while shows in the canary: the
    rounds where it ran more than CANARY_SLACK slower than its fastest are dropped, and a row
    that keeps fewer than half its rounds is taken again."""
    monkeypatch.setattr(cmp, "PAUSE_S", 0.0)
    monkeypatch.setattr(cmp, "WARM_S", 0.0)
    calls = 1 + cmp.BLOCK  # per round: one untimed call, then the timed block
    canary = _sleeper([0.002] * calls + [0.006] * calls + [0.002] * calls * 2)  # round 2 of 4 slow
    fn = lambda: cmp.time.sleep(0.001)  # noqa: E731
    blocks, scaling, dropped, *_ = cmp.blocks_on_idle_cores(
        [fn], 4 * cmp.BLOCK, 0, threads=2, retries=2, probe=_probes(1.9, 1.9), canary=canary, apart=_near
    )
    assert dropped == 1 and blocks.shape == (3, 1) and scaling == pytest.approx(1.9)
    busy = _sleeper([0.002] * (1 + calls) + [0.006] * calls * 3 + [0.002] * 100)  # 3 of 4 slow, then quiet
    blocks, _, dropped, *_ = cmp.blocks_on_idle_cores(
        [fn],
        4 * cmp.BLOCK,
        0,
        threads=2,
        retries=2,
        probe=_probes(1.9, 1.9, 1.9, 1.9),
        canary=busy,
        apart=_near,
    )
    assert dropped == 0 and blocks.shape == (4, 1)  # taken again: the second try was quiet


def test_rounds_with_the_cores_far_apart_are_marked_and_reported(monkeypatch):
    """The check before each round marks the rounds where the two cores were apart; they stay
    in the row, whose note gives the ratio over them and over the others."""
    monkeypatch.setattr(cmp, "PAUSE_S", 0.0)
    monkeypatch.setattr(cmp, "WARM_S", 0.0)
    trips = itertools.cycle([False, True])  # near, apart, near, ...
    rows = itertools.cycle([(1.0, 2.0), (1.8, 2.0)])  # ms of ours and onnxruntime in that round
    row = [None]

    def apart() -> bool:  # called once before each round: that round's speeds
        row[0] = next(rows)
        return next(trips)

    def ours() -> None:
        cmp.time.sleep(row[0][0] * 1e-3)

    def ort() -> None:
        cmp.time.sleep(row[0][1] * 1e-3)

    got = cmp.blocks_on_idle_cores(
        [ours, ort], 4 * cmp.BLOCK, 0, threads=2, retries=0, probe=_probes(1.9, 1.9),
        canary=_sleeper([0.001]), apart=apart,
    )  # fmt: skip
    assert got.far.tolist() == [False, True] * (len(got.far) // 2) and len(got.far) >= 4
    assert np.allclose(got.blocks[:, 0] / got.blocks[:, 1], np.where(got.far, 0.9, 0.5), rtol=0.1)
    blocks = np.array([[1.0, 2.0], [1.8, 2.0], [1.0, 2.0], [1.8, 2.0]])
    out = cmp.far_apart(blocks, np.array([False, True, False, True]))
    assert out["rounds_far"] == 2
    assert out["ratio_far"] == pytest.approx(0.9) and out["ratio_near"] == pytest.approx(0.5)
    assert "apart in 2 of 4 rounds: ratio 0.90 there, 0.50 in the others" in out["note_far"]
    assert cmp.far_apart(blocks, np.zeros(4, bool)) == {"rounds_far": 0}


def test_core_distance_times_a_round_trip_between_two_cpus():
    """The ping-pong really runs on two CPUs: a round trip takes some tens of ns at least
    (two cache-line transfers) and well under a millisecond; one CPU in the mask gives None."""
    from autotune.core_distance import round_trip_ns

    cpus = os.sched_getaffinity(0)
    if len(cpus) >= 2:
        ns = round_trip_ns(5000)
        assert 10.0 < ns < 1e5, ns
        assert os.sched_getaffinity(0) == cpus  # the caller's mask given back
    os.sched_setaffinity(0, {min(cpus)})
    try:
        assert round_trip_ns(5000) is None
    finally:
        os.sched_setaffinity(0, cpus)


def test_the_hand_over_canary_moves_data_between_the_pools_threads():
    """handover_us runs the add and the transpose on the JIT pool at 2 threads (their results
    are right), gives the pool's thread count back, and takes some time."""
    from autotune import idle as cd
    from tensorir.runtime.jit import get_num_threads, set_num_threads

    set_num_threads(1)
    try:
        us = cd.handover_us(threads=2, calls=2)
        assert get_num_threads() == 1
    finally:
        set_num_threads(None)
    assert 1.0 < us < 1e6, us
    (x, ones, y, *_), (y2, t, *_) = cd._handover_call().kept
    assert y2 is y and np.array_equal(y, x + ones) and np.array_equal(t, y.T)


def test_a_hand_over_slower_than_the_fastest_seen_marks_the_cores_apart(monkeypatch):
    from autotune import idle as cd

    monkeypatch.setattr(cd, "_HANDOVER_BEST", [float("inf")])
    assert [cd.handover_slow(us) for us in (1400.0, 1330.0, 2700.0, 1900.0, 2000.0)] == [
        False, False, True, False, True,
    ]  # fmt: skip
    assert cd._HANDOVER_BEST == [1330.0]


def test_a_row_mostly_far_apart_is_taken_again(monkeypatch):
    """Most rounds with the cores far apart: the row is measured again (within the retries),
    as when a core is busy; the try whose rounds were mostly near is the one kept."""
    monkeypatch.setattr(cmp, "PAUSE_S", 0.0)
    monkeypatch.setattr(cmp, "WARM_S", 0.0)
    trips = iter([True] * 4 + [False] * 100)  # the first try's 4 rounds apart, then near
    got = cmp.blocks_on_idle_cores(
        [lambda: None], 4 * cmp.BLOCK, 0, threads=2, retries=2, probe=_probes(1.9, 1.9, 1.9, 1.9),
        canary=_sleeper([0.001]), apart=lambda: next(trips),
    )  # fmt: skip
    assert len(got.far) == 4 and not got.far.any()


def test_a_canary_slow_for_a_whole_row_is_caught_by_an_earlier_rows_pace(monkeypatch):
    """The canary's fastest block is kept across the rows it runs in: a row during which a
    tenant held the core throughout (every block slow alike) is dropped and taken again."""
    monkeypatch.setattr(cmp, "PAUSE_S", 0.0)
    monkeypatch.setattr(cmp, "WARM_S", 0.0)
    pace = [0.002]
    canary = lambda: cmp.time.sleep(pace[0])  # noqa: E731
    fn = lambda: None  # noqa: E731
    got = cmp.blocks_on_idle_cores(
        [fn], 4 * cmp.BLOCK, 0, threads=2, retries=0, probe=_probes(1.9, 1.9), canary=canary,
        apart=lambda: False,
    )  # fmt: skip
    assert got.dropped == 0 and not got.busy  # a quiet row sets the pace
    pace[0] = 0.006  # the next row: slow throughout
    got = cmp.blocks_on_idle_cores(
        [fn], 4 * cmp.BLOCK, 0, threads=2, retries=0, probe=_probes(1.9, 1.9), canary=canary,
        apart=lambda: False,
    )  # fmt: skip
    assert got.busy and got.blocks.shape[0] == 4 and got.dropped == 0  # kept whole, flagged


def test_an_ab_line_gives_the_ratio_over_the_rounds_apart_and_the_others():
    ratios = np.array([0.95, 1.10, 0.97, 1.20, 0.96])
    far = np.array([False, True, False, True, False])
    note = cmp.split_by_apart(ratios, far, "B / A")
    assert note == "; cores apart in 2 rounds: B / A 1.150 there, 0.960 in the 3 others"
    assert cmp.split_by_apart(ratios, np.zeros(5, bool), "B / A") == ""
