"""What Ray adds per candidate when tuning with `--ray`, beside what a candidate costs anyway.

    python -m benchmarks.ray_overhead [--address HOST:PORT] [--repeat 200]

Without --address the script starts a two-node cluster on 127.0.0.1 as the tests do
(tests/autotune/ray_cluster.py: 1 CPU and this CPU's device resource per node) and stops it.
It prints one table of medians (and 90th percentiles) in milliseconds:

- task round trip: an empty Ray task submitted and its result fetched (ray.get);
- task with a candidate: a task that returns a typical built candidate (the Built of
  tiny_cnn's first conv: loop function, spec and shared library), fetched to the driver;
- actor call: an empty call on an actor on the other node (placed as the device actors of
  autotune/ray_device.py are) and its answer;
- actor call with a candidate: the same with the Built as its argument (what a run adds in
  transfer; Ray sends objects under 100 KiB inline with the call);
- without Ray: one build of that candidate in this process (the shared library `--ray`
  ships, and the JIT kernel the process-pool Measurer builds) and one measurement by the
  CPU runner with the tuner's default options (5 cold timings, outputs checked); and the
  same measurement by the device actor's LibraryRunner (the library in a child process).

The last line says how much of a candidate's build + run Ray's two round trips and the
measuring child add.

Here (2 cores shared with other work, load 3-8, both nodes on this machine, ray 2.60; medians
of 200, ranges over 3 runs): empty task 1.2-1.5 ms, task returning a candidate (29 KB
pickled, a 9.7 KB library) 5.8-7.0 ms, empty actor call 0.55-0.68 ms, actor call carrying
the candidate 3.2-3.7 ms. Without Ray the shared-library build takes 376-516 ms (the JIT
build 255-343 ms: emitting an object and linking costs ~100-170 ms more) and a measurement
23-33 ms (a ~100 us kernel, 5 cold timings); in the actor's child process it is the same
within the noise. So Ray adds 9-11 ms per candidate, 1.7-2.6% of what it costs anyway.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "examples" / "tiny_cnn.onnx"


def timed(fn: Callable[[], Any], repeat: int, warmup: int = 3) -> list[float]:
    """Seconds of `repeat` calls of fn (after `warmup` untimed ones)."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _row(name: str, times: list[float], note: str = "") -> tuple[str, float, float, str]:
    ms = sorted(t * 1e3 for t in times)
    return name, statistics.median(ms), ms[min(len(ms) - 1, int(0.9 * len(ms)))], note


def candidate() -> tuple[Any, dict]:
    """tiny_cnn's heaviest task and its default config."""
    from autotune.task import extract_tasks, load_graph

    task = extract_tasks(load_graph(MODEL), "host")[0]
    return task, task.space("host").default()


def local_rows(task: Any, config: dict, repeat: int) -> tuple[list, Any]:
    """Build and measure without Ray; returns (rows, the shipped Built)."""
    from autotune.builders import HostBuilder
    from autotune.measure import MeasureOptions
    from autotune.ray_device import LibraryRunner
    from autotune.rpc_runner import RPCBuilder
    from autotune.runners import CpuRunner
    from tensorir.runtime.jit import compile_host
    from tensorir.target import get_target

    target = get_target("host")
    n = max(3, repeat // 20)
    shipped = RPCBuilder(target).build(task, config)
    lib_s = timed(lambda: RPCBuilder(target).build(task, config), n, warmup=1)
    jit_s = []
    for k in range(n):  # the JIT caches by loop function: a fresh name per build
        t0 = time.perf_counter()
        func, _ = task.build(config, target, name=f"bench{k}")
        compile_host(func, target)
        jit_s.append(time.perf_counter() - t0)
    built = HostBuilder(target).build(task, config)
    inputs = task.random_inputs(seed=0)
    reference = task.reference(inputs)
    options = MeasureOptions()
    run_s = timed(lambda: CpuRunner(cold=True).run(built, inputs, reference, options), n, warmup=1)
    kernel_us = float(np.median(CpuRunner(cold=True).run(built, inputs, reference, options))) * 1e6
    child = LibraryRunner()  # what a device actor runs a shipped library with
    child_s = timed(lambda: child.run(shipped, inputs, reference, options), n, warmup=1)
    child.child.close()
    rows = [
        _row("build: shared library (--ray ships it)", lib_s, f"{len(shipped.kernel.data):,} B library"),
        _row("build: JIT kernel (process pool)", jit_s),
        _row("measure: CpuRunner, 5 cold timings", run_s, f"kernel {kernel_us:.0f} us (median timing)"),
        _row("measure: the actor's LibraryRunner (child)", child_s, "the same, in a child process"),
    ]
    return rows, shipped


def ray_rows(address: str, shipped: Any, repeat: int) -> list:
    import ray
    import ray.cloudpickle
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=address, log_to_driver=False, logging_level="warning")
    try:
        here = ray.get_runtime_context().get_node_id()
        others = [n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] != here]
        if not others:
            raise SystemExit("the cluster has one node; the actor rows want a second one")

        @ray.remote(num_cpus=1)
        def empty() -> None:
            return None

        @ray.remote(num_cpus=1)
        def carry(x: Any) -> Any:
            return x

        class Probe:  # an actor placed as the device actors are, on the other node
            def empty(self) -> None:
                return None

            def take(self, built: Any) -> None:
                return None

        strategy = NodeAffinitySchedulingStrategy(others[0], soft=False)
        probe = ray.remote(Probe).options(num_cpus=0, scheduling_strategy=strategy).remote()
        ray.get(probe.empty.remote())
        shipped_ref = ray.put(shipped)
        size = len(ray.cloudpickle.dumps(shipped))
        rows = [
            _row("task round trip (empty)", timed(lambda: ray.get(empty.remote()), repeat)),
            _row(
                "task returning a candidate",
                timed(lambda: ray.get(carry.remote(shipped_ref)), repeat),
                f"{size:,} B pickled",
            ),
            _row("actor call (empty, other node)", timed(lambda: ray.get(probe.empty.remote()), repeat)),
            _row(
                "actor call with a candidate (other node)",
                timed(lambda: ray.get(probe.take.remote(shipped)), repeat),
                "the Built as the argument",
            ),
        ]
        ray.kill(probe)
        return rows
    finally:
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", help="an existing cluster (HOST:PORT) with 2 nodes offering this CPU")
    p.add_argument("--repeat", type=int, default=200, help="timed round trips per row")
    args = p.parse_args(argv)
    task, config = candidate()
    local, shipped = local_rows(task, config, args.repeat)
    cluster = None
    address = args.address
    if address is None:
        from autotune.cli_tune import tuning_device
        from autotune.ray_device import device_resource
        from tests.autotune.ray_cluster import RayCluster

        resources = {device_resource(tuning_device("host")): 1}
        root = Path(tempfile.mkdtemp(prefix="tir-ray-bench-"))
        cluster = RayCluster(root, resources)
        cluster.add_node(resources)
        address = cluster.address
    try:
        remote = ray_rows(address, shipped, args.repeat)
    finally:
        if cluster is not None:
            cluster.stop()
            shutil.rmtree(cluster.root, ignore_errors=True)
    print(f"candidate: {task}, default config; cluster {address}")
    print(f"{'':44s} {'median ms':>10s} {'p90 ms':>8s}")
    for name, med, p90, note in [*remote, *local]:
        print(f"{name:44s} {med:10.3f} {p90:8.3f}  {note}")
    per = {name: med for name, med, _, _ in [*remote, *local]}
    ray_ms = per["task returning a candidate"] + per["actor call with a candidate (other node)"]
    ray_ms += per["measure: the actor's LibraryRunner (child)"] - per["measure: CpuRunner, 5 cold timings"]
    own = per["build: shared library (--ray ships it)"] + per["measure: CpuRunner, 5 cold timings"]
    share = 100 * ray_ms / own
    print(f"added by Ray and the measuring child: {ray_ms:.2f} ms per candidate, {share:.1f}% of build + run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
