"""autotune/idle.py: the busy-core probe, and TIR_IDLE_PROBE, which fixes its answer (the test
suite runs with idle: tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys

import autotune.core_distance
import autotune.idle
from tensorir.config import idle_probe_mode


def test_the_knob_reads_auto_idle_or_busy(monkeypatch):
    for value, mode in [("", "auto"), ("auto", "auto"), ("IDLE", "idle"), ("busy", "busy"), ("yes", "auto")]:
        monkeypatch.setenv("TIR_IDLE_PROBE", value)
        assert idle_probe_mode() == mode
    monkeypatch.delenv("TIR_IDLE_PROBE")
    assert idle_probe_mode() == "auto"


def test_the_knob_fixes_the_probe(monkeypatch):
    """idle: no probe (a timing is trusted); busy: every probe finds a core busy; auto: the FMA
    probe itself. One thread has nothing to probe whatever the knob says."""
    monkeypatch.setenv("TIR_IDLE_PROBE", "idle")
    assert autotune.idle.probe(2) is None
    monkeypatch.setenv("TIR_IDLE_PROBE", "busy")
    assert autotune.idle.probe(2)() is False and autotune.idle.probe(1) is None
    monkeypatch.setenv("TIR_IDLE_PROBE", "auto")
    asked, handed = [], []
    monkeypatch.setattr(autotune.idle, "cores_idle", lambda n: (asked.append(n) or True, 1.0))
    monkeypatch.setattr(autotune.idle, "handover_us", lambda n: handed.append(n) or 1000.0)
    monkeypatch.setattr(autotune.idle, "_HANDOVER_BEST", [float("inf")])
    monkeypatch.setattr(autotune.core_distance, "round_trip_ns", lambda: 100.0)
    assert autotune.idle.probe(3)() is True and asked == [3] and handed == [3]


def test_a_slow_hand_over_makes_the_cores_not_ready(monkeypatch):
    """The probe's second check: a hand-over more than SLOW_HANDOVER times slower than the
    fastest seen in the process reads as not ready, though no core is busy."""
    monkeypatch.setenv("TIR_IDLE_PROBE", "auto")
    pace = iter([1400.0, 1330.0, 2700.0, 1900.0])
    monkeypatch.setattr(autotune.idle, "cores_idle", lambda n: (True, 1.0))
    monkeypatch.setattr(autotune.idle, "handover_us", lambda n: next(pace))
    monkeypatch.setattr(autotune.idle, "_HANDOVER_BEST", [float("inf")])
    monkeypatch.setattr(autotune.core_distance, "round_trip_ns", lambda: 100.0)
    ready = autotune.idle.probe(2)
    assert [ready() for _ in range(4)] == [True, True, False, True]


def test_cores_far_apart_are_not_ready(monkeypatch):
    """The probe's third check: a cache line's round trip over FAR_NS (the two vCPUs on cores
    without a shared L3) reads as not ready though no core is busy and the hand-over is fast;
    one CPU (no round trip to time) does not count as far."""
    monkeypatch.setenv("TIR_IDLE_PROBE", "auto")
    trips = iter([100.0, 450.0, None, autotune.core_distance.FAR_NS + 1])
    monkeypatch.setattr(autotune.idle, "cores_idle", lambda n: (True, 1.0))
    monkeypatch.setattr(autotune.idle, "handover_us", lambda n: 1000.0)
    monkeypatch.setattr(autotune.idle, "_HANDOVER_BEST", [float("inf")])
    monkeypatch.setattr(autotune.core_distance, "round_trip_ns", lambda: next(trips))
    ready = autotune.idle.probe(2)
    assert [ready() for _ in range(4)] == [True, False, True, False]


def test_busy_through_every_try_still_times_once(monkeypatch):
    """retry_while_busy: probes before and after; a busy probe before a try skips its timing,
    but the last try times regardless, and busy is reported."""
    monkeypatch.setattr(autotune.idle, "BUSY_WAIT_S", 0.0)
    timed = []
    result, busy = autotune.idle.retry_while_busy(lambda: timed.append(1) or "t", lambda: False)
    assert (result, busy, len(timed)) == ("t", True, 1)
    result, busy = autotune.idle.retry_while_busy(lambda: timed.append(1) or "u", lambda: True)
    assert (result, busy, len(timed)) == ("u", False, 2)


def test_a_slowed_result_is_timed_again(monkeypatch):
    """retry_while_busy's `slowed`: a try whose result it finds too slow counts as busy (the
    probe said idle), so the timing is taken again; busy when every try was slowed."""
    monkeypatch.setattr(autotune.idle, "BUSY_WAIT_S", 0.0)
    timed = []

    def timing() -> int:
        timed.append(1)
        return len(timed)

    result, busy = autotune.idle.retry_while_busy(timing, lambda: True, lambda r: r < 3)
    assert (result, busy) == (3, False)
    result, busy = autotune.idle.retry_while_busy(timing, None, lambda r: True)
    assert (result, busy, len(timed)) == (6, True, 6)


def test_two_threads_on_one_cpu_read_as_busy():
    """autotune.idle.cores_idle, in a process pinned to one CPU: its two threads share the core,
    so the same work per thread takes about twice as long at two threads as at one."""
    code = (
        "import os\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "from autotune.idle import cores_idle\n"
        "print(*cores_idle(2))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    idle, ratio = out.stdout.split()
    assert idle == "False" and 1.5 < float(ratio) < 3.0, out.stdout
