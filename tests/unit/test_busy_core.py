"""benchmarks/busy_core.py: the busy process it pins and the thread count it sets per call."""

import os
import time

from benchmarks.busy_core import at_threads, busy_process


def test_each_call_sets_its_thread_count_first():
    calls = []
    run = at_threads(lambda: calls.append("run") or 7, lambda n: calls.append(n), 2)
    assert run() == 7 and calls == [2, "run"]


def test_the_busy_process_runs_pinned_to_its_cpu():
    cpu = max(os.sched_getaffinity(0))
    proc = busy_process(cpu, 30)
    try:
        deadline = time.time() + 10
        while time.time() < deadline:  # the child sets its own affinity on start
            if os.sched_getaffinity(proc.pid) == {cpu}:
                break
            time.sleep(0.05)
        assert os.sched_getaffinity(proc.pid) == {cpu}
        assert proc.poll() is None  # still busy
    finally:
        proc.kill()
        proc.wait()
