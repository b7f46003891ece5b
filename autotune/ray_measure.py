"""Measuring on a Ray cluster (`tir tune --ray auto|ADDRESS`): builds as Ray tasks on the
cluster's CPUs, runs on the device actors of autotune/ray_device.py.

    connect("auto")                                  # InputError (one line) if unreachable
    with RayMeasurer(MeasureOptions(), device_key) as m:
        results = m.measure(task, configs)           # as measure.Measurer's

Device actors are named after their device key, node and slot, detached and shared: every
tuner connected to the cluster finds the same actors (get_if_exists), so several tuners (of
several models or people) measure on the same devices one candidate at a time, queued by
Ray. A node offering N units of `tir-device:<key>` gets N actors.

Each batch drops the actors of nodes that left and attaches the devices of nodes that
joined. Each candidate's build goes to the cluster as soon as the batch is proposed; when it
is built, its run goes to the device actor with the fewest of this tuner's runs in flight,
then given so far (the built library moves from the building node to the measuring one
through Ray's object store).

Faults, none of them lost silently or invented:
- a node lost mid-build: Ray runs the build again elsewhere (max_retries); a build that
  crashes its worker BUILD_RETRIES + 1 times is an error result;
- a device actor lost (its process crashed, or its node died) mid-run: the candidate is run
  again once, on another actor when there is one; lost twice, it is an error result. An
  actor whose node has died is dropped with one line on stderr; a built candidate lost with
  its node before it ran (and not rebuilt by Ray's lineage) is built again, once;
- FAILED_IN_A_ROW runs in a row that the runner could not do: those candidates are error
  results, and the actor checks its device; one that does not answer (disconnected, adb or
  the rpc servers gone) gets the actor restarted with one line, and dropped with one line
  when it happens again;
- a run with no answer within its time-out: an error result, and the actor is restarted;
- no device actor left: the batch's remaining candidates are error results saying so.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from autotune.measure import MeasureOptions, MeasureResult, OnResult
from autotune.ray_device import NAMESPACE, DeviceActor, build_candidate, device_resource, features_chunk
from autotune.task import Task
from tensorir.errors import InputError

BUILD_RETRIES = 2  # a build whose worker died (crash, node lost) is run again this often
FAILED_IN_A_ROW = 3  # runner failures in a row that have the device checked
RUN_TRIES = 2  # times a run whose actor was lost is tried


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs the ray package (pip install 'ray>=2.9')") from None
    return ray


def connect(address: str) -> bool:
    """Connect this process to the Ray cluster at `address` ("auto": the local one); True
    when this call connected (False: already connected). InputError when none answers."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    if address != "auto":
        _check_reachable(address)
    try:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"--ray {address}: cannot connect to a Ray cluster ({first})") from None
    return True


def _check_reachable(address: str) -> None:
    """One line (InputError) when nothing listens at HOST:PORT, before Ray's long retries."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise InputError(f"--ray {address}: expected auto or HOST:PORT (the head node's GCS address)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5.0).close()
    except OSError as e:
        raise InputError(f"--ray {address}: no Ray cluster answers there ({e.strerror or e})") from None


def device_slots(device: str) -> list[tuple[str, str]]:
    """(node id, actor name) of every attached device of this key on the cluster's live nodes."""
    import ray

    res = device_resource(device)
    slots = []
    for node in ray.nodes():
        if node.get("Alive"):
            for j in range(int(node.get("Resources", {}).get(res, 0))):
                slots.append((node["NodeID"], f"{res}@{node['NodeID'][:16]}#{j}"))
    return slots


def check_device(device: str, address: str) -> None:
    """InputError (one line) unless some live node offers the device."""
    if not device_slots(device):
        raise InputError(
            f"--ray {address}: no node of the cluster offers device {device!r} "
            f"(start one with: ray start --resources '{{\"{device_resource(device)}\": 1}}')"
        )


@dataclasses.dataclass
class _Actor:
    name: str
    node: str
    handle: Any
    in_flight: int = 0
    sent: int = 0  # runs this tuner gave it
    failed: int = 0  # runner failures in a row
    restarts: int = 0
    suspect: bool = False  # a call to it was lost: others are preferred until it answers


@dataclasses.dataclass
class _Job:
    """A candidate's build (actor None) or run (on `actor`) in flight."""

    index: int
    built: Any  # ObjectRef of the Built
    deadline: float
    tries: int  # builds, or runs, of this candidate so far, this one included
    actor: _Actor | None = None
    restarts: int = 0  # the actor's restarts by this tuner when the run was sent


@dataclasses.dataclass
class _Batch:
    """One measure() call: the task (an ObjectRef), its results, the builds and runs out."""

    task: Any
    results: list[MeasureResult]
    builds: dict[Any, _Job] = dataclasses.field(default_factory=dict)
    runs: dict[Any, _Job] = dataclasses.field(default_factory=dict)


class RayMeasurer:
    """The tuner's measurer on a Ray cluster (measure.MeasurerLike)."""

    def __init__(self, options: MeasureOptions, device: str, address: str = "auto") -> None:
        from tensorir.target import get_target

        self.options = options
        self.device = device
        self.target = get_target(options.target)  # resolved here: build nodes may be other CPUs
        self.owns_connection = connect(address)
        import ray

        self.ray = ray
        self.actors: list[_Actor] = []
        self.dropped: set[str] = set()  # names of actors this tuner no longer uses
        self._build = ray.remote(num_cpus=1, max_retries=BUILD_RETRIES)(build_candidate)
        self._features = ray.remote(num_cpus=1, max_retries=BUILD_RETRIES)(features_chunk)
        self._actor_class = ray.remote(DeviceActor)
        self._attach()
        try:
            if not self.actors:
                check_device(device, address)
            if options.adb:
                self._check_phones()
        except InputError:
            self.close()
            raise

    def __enter__(self) -> RayMeasurer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Disconnect (the device actors stay: other tuners may be using them)."""
        self.actors = []
        if self.owns_connection and self.ray.is_initialized():
            self.ray.shutdown()

    # ---- device actors ----------------------------------------------------------------
    def _attach(self) -> None:
        """Find or start the actor of every device slot on a live node not attached yet."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        known = {a.name for a in self.actors} | self.dropped
        for node, name in device_slots(self.device):
            if name in known:
                continue
            options = dict(
                name=name,
                namespace=NAMESPACE,
                get_if_exists=True,
                lifetime="detached",
                num_cpus=0,
                resources={device_resource(self.device): 1},
                max_restarts=-1,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            )
            try:
                handle = self._actor_class.options(**options).remote(self.device)
            except ValueError:  # another tuner created it at the same moment
                handle = self.ray.get_actor(name, namespace=NAMESPACE)
            self.actors.append(_Actor(name, node, handle))

    def _check_phones(self) -> None:
        """Drop (one line each) the actors whose node does not reach the --adb phone; an
        InputError (one line) when none does."""
        replies = self.ray.get([a.handle.check.remote(self.options) for a in self.actors], timeout=120)
        if all(replies):
            why = f"no device actor of {self.device} reaches it ({replies[0]})"
            raise InputError(f"--adb {self.options.adb}: {why}")
        for actor, why in zip(list(self.actors), replies, strict=True):
            if why:
                self._drop(actor, why)

    def _live_nodes(self) -> set[str]:
        return {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}

    def _drop(self, actor: _Actor, why: str) -> None:
        if actor in self.actors:
            self.actors.remove(actor)
            self.dropped.add(actor.name)
            print(f"ray: device actor {actor.name} dropped: {why}", file=sys.stderr, flush=True)

    def _restart(self, actor: _Actor, why: str) -> None:
        actor.restarts += 1
        actor.failed = 0
        if actor.restarts > 1:
            self._drop(actor, f"{why}, again after a restart")
            return
        print(f"ray: device actor {actor.name} restarted: {why}", file=sys.stderr, flush=True)
        actor.suspect = True  # until it answers: runs lost meanwhile were said lost here
        self.ray.kill(actor.handle, no_restart=False)

    def _pick(self, avoid: _Actor | None = None) -> _Actor | None:
        """The live actor with the fewest of this tuner's runs in flight, then given so far
        (not `avoid`, nor a suspect one, while another is there)."""
        if not self.actors:
            return None
        return min(self.actors, key=lambda a: (a is avoid, a.suspect, a.in_flight, a.sent))

    # ---- measuring --------------------------------------------------------------------
    def features(self, task: Task, configs: Sequence[dict]) -> list[np.ndarray | None]:
        """Features of many configs, in chunks over the cluster's CPUs (a chunk that fails
        or times out comes back as None)."""
        if not configs:
            return []
        cpus = max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        chunks = [list(range(k, len(configs), cpus)) for k in range(cpus)]
        task_ref = self.ray.put(task)
        refs = {
            self._features.remote(task_ref, [configs[i] for i in idx], self.target): idx
            for idx in chunks
            if idx
        }
        out: list[np.ndarray | None] = [None] * len(configs)
        ready, late = self.ray.wait(list(refs), num_returns=len(refs), timeout=self.options.build_timeout_s)
        for ref in ready:
            try:
                got = self.ray.get(ref)
            except Exception:  # a chunk whose worker or node was lost: no features
                continue
            for i, f in zip(refs[ref], got, strict=True):
                out[i] = f
        for ref in late:
            self.ray.cancel(ref, force=True)
        return out

    def measure(
        self, task: Task, configs: Sequence[dict], on_result: OnResult | None = None
    ) -> list[MeasureResult]:
        """One MeasureResult per config: built on the cluster, run on the device actors;
        `on_result` gets each as soon as it is final (nothing of it pending), not lost."""
        live = self._live_nodes()
        for actor in [a for a in self.actors if a.node not in live]:
            self._drop(actor, "its node left the cluster; its runs go to the other devices")
        self._attach()  # nodes that joined since
        batch = _Batch(self.ray.put(task), [MeasureResult(dict(c)) for c in configs])
        for i in range(len(configs)):
            self._submit_build(batch, i, 1)
        reported: set[int] = set()
        while batch.builds or batch.runs:
            ready, _ = self.ray.wait([*batch.builds, *batch.runs], num_returns=1, timeout=1.0)
            for ref in ready:
                if ref in batch.builds:
                    build = batch.builds.pop(ref)
                    if self._built(ref, batch.results[build.index]):
                        self._dispatch(batch, build.index, build.built, build.tries)
                else:
                    self._ran(batch, ref, batch.runs.pop(ref))
            self._expire(batch)
            if on_result is not None:
                pending = {job.index for job in (*batch.builds.values(), *batch.runs.values())}
                for i in sorted(set(range(len(configs))) - pending - reported):
                    reported.add(i)
                    if not batch.results[i].lost:
                        on_result(batch.results[i])
        return batch.results

    def _submit_build(self, batch: _Batch, i: int, tries: int) -> None:
        config = batch.results[i].config
        build = self._build.options(num_returns=2)
        meta, built = build.remote(batch.task, config, self.options, self.target)
        batch.builds[meta] = _Job(i, built, time.monotonic() + self.options.build_timeout_s, tries)

    def _built(self, ref: Any, res: MeasureResult) -> bool:
        try:
            status, build_s, features, why = self.ray.get(ref)
        except Exception as e:  # the build's worker died BUILD_RETRIES + 1 times
            res.error = f"build failed on the cluster: {_first_line(e)}"
            return False
        if status != "built":
            res.error = why
            return False
        res.build_s, res.features = build_s, features
        return True

    def _dispatch(self, batch: _Batch, i: int, built: Any, tries: int, avoid: _Actor | None = None) -> None:
        actor = self._pick(avoid)
        if actor is None:
            batch.results[i].error = f"no device actor left for {self.device} on the cluster"
            return
        actor.in_flight += 1
        actor.sent += 1
        timeout = self.options.run_timeout_s * (1 + actor.in_flight)  # its queue ahead of it
        ref = actor.handle.run.remote(batch.task, built, self.options)
        batch.runs[ref] = _Job(i, built, time.monotonic() + timeout, tries, actor, actor.restarts)

    def _ran(self, batch: _Batch, ref: Any, run: _Job) -> None:
        actor, res = run.actor, batch.results[run.index]
        assert actor is not None  # a run's job names its actor
        actor.in_flight -= 1
        errors = self.ray.exceptions
        try:
            reply = self.ray.get(ref)
        except (errors.RayActorError, errors.ActorUnschedulableError) as e:
            self._lost(batch, run, e)
            return
        except errors.ObjectLostError as e:  # the built candidate was lost with its node
            if run.tries >= RUN_TRIES:
                res.error = f"run failed on the cluster: {_first_line(e)}"
            else:
                self._submit_build(batch, run.index, run.tries + 1)
            return
        except Exception as e:  # neither the actor's death nor the candidate's loss
            res.error = f"run failed on the cluster: {_first_line(e)}"
            return
        if run.restarts == actor.restarts:  # an answer of the instance running now
            actor.suspect = False
        if reply[0] == "ran":
            res.costs = list(reply[1])
            actor.failed = 0
            return
        res.error = reply[1]
        if reply[0] == "failed":
            actor.failed += 1
            if actor.failed >= FAILED_IN_A_ROW:
                self._check(actor, f"{actor.failed} runs in a row failed (last: {reply[1]})")

    def _check(self, actor: _Actor, failures: str) -> None:
        """After runs failing in a row: restart (then drop) the actor unless its device still
        answers (then they were the candidates' failures: a kernel the driver refuses)."""
        actor.failed = 0
        timeout = self.options.run_timeout_s * (2 + actor.in_flight)  # behind its queue
        try:
            why = self.ray.get(actor.handle.check.remote(self.options), timeout=timeout)
        except Exception as e:  # lost or silent: as good as a device that does not answer
            why = _first_line(e)
        if why:
            self._restart(actor, f"{failures}; its device: {why}")

    def _lost(self, batch: _Batch, run: _Job, e: Exception) -> None:
        """The actor died (or cannot be placed) under the run: drop it if its node is gone;
        run the candidate again (on another actor if there is one) unless it was lost before."""
        actor = run.actor
        assert actor is not None
        if actor.node not in self._live_nodes():
            self._drop(actor, "its node left the cluster; its runs go to the other devices")
        elif actor in self.actors and not actor.suspect and run.restarts == actor.restarts:
            print(
                f"ray: device actor {actor.name} lost a run ({type(e).__name__}); "
                "the other devices take its runs until it answers again",
                file=sys.stderr,
                flush=True,
            )
        actor.suspect = True
        if run.tries >= RUN_TRIES:
            batch.results[run.index].error = f"run lost its device actor {RUN_TRIES} times: {_first_line(e)}"
            return
        self._dispatch(batch, run.index, run.built, run.tries + 1, avoid=actor)

    def _expire(self, batch: _Batch) -> None:
        now = time.monotonic()
        for ref, build in list(batch.builds.items()):
            if now > build.deadline:
                batch.builds.pop(ref)
                self.ray.cancel(ref, force=True)
                limit = self.options.build_timeout_s
                batch.results[build.index].error = f"build timed out after {limit:.0f} s"
        for ref, run in list(batch.runs.items()):
            if now > run.deadline:
                batch.runs.pop(ref)
                actor = run.actor
                assert actor is not None
                actor.in_flight -= 1
                batch.results[run.index].error = "run timed out (no answer from its device actor)"
                if actor in self.actors:
                    if actor.node not in self._live_nodes():
                        self._drop(actor, "its node left the cluster")
                    else:
                        self._restart(actor, "a run had no answer in time")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(e).__name__)
    return line[:300]
