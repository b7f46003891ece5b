"""Tuning on a real Ray cluster of two nodes on 127.0.0.1 (tests/autotune/ray_cluster.py):
`tir tune --ray` records what a run without Ray records and `tir compile` uses it; a --ray
tuner resumes from the database and, killed -9, keeps its records; two tuner processes share the
devices while the second node is killed, and the database (PostgreSQL) holds every result
they reported, once, and nothing else; a device that stops answering, a candidate that
crashes, a phone on a node through adb. An unreachable cluster is one line, exit 2.

Ray is a dependency of these tests: without it they fail, never skip. The module takes
60-90 s here (2 cores shared with other work): two `ray start`s, six tuner processes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import ray  # no ray: this module fails to import and its tests fail, never skip

from autotune.cli_tune import tuning_device
from autotune.db_open import open_database
from autotune.ray_device import NAMESPACE, device_resource
from autotune.task import Task
from tensorir.graph.types import TensorType
from tensorir.ops.workload import workload_key
from tensorir.schedule.space import config_key
from tests.autotune.ray_cluster import RayCluster, ray_env

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "examples" / "tiny_cnn.onnx"
TUNER = Path(__file__).with_name("ray_tuner_main.py")
DEVICE = tuning_device("host")
PHONE = "aarch64-cortex-a76-neon"  # what `--device cortex-a76 --adb` measures
POCL = tuning_device("opencl:pocl")  # the head's OpenCL device (PoCL, on its CPU)
FAKE_ADB = REPO / "tests" / "fixtures" / "fake_adb.py"


# one pytest worker runs this module (quickstart passes --dist loadgroup): one cluster at a time
pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    """A head node and a second node, 1 CPU each, each offering this CPU as a device; the head
    also offers a phone's CPU (tests/fixtures/fake_adb.py plays it)."""
    resources = {device_resource(DEVICE): 1}
    phone = {device_resource(PHONE): 1}  # the head also has a (stand-in) phone attached
    phone[device_resource(POCL)] = 1  # and an OpenCL device
    # a short folder: Ray's socket paths under it must stay within AF_UNIX's 107 bytes, which
    # pytest's temp folders of xdist workers (/tmp/pytest-of-root/pytest-N/popen-gw0/...) exceed
    root = Path(tempfile.mkdtemp(prefix="tir-ray-"))
    c = RayCluster(root, resources | phone)
    try:
        c.add_node(resources)
        yield c
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    assert not [p for node in c.nodes for p in node.stray_pids()], "ray processes left running"


def _env() -> dict[str, str]:
    env = ray_env()  # RAY_ADDRESS and friends unset: the address is always given
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _tir(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tensorir.cli", *argv],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _tune_argv(db: Path, trials: int = 4) -> list[str]:
    flags = ["--batch", "2", "--search", "random", "--seed", "0", "--no-layout", "--no-model-ab"]
    return ["tune", str(MODEL), "--trials", str(trials), "--db", str(db), "--workers", "1", *flags]


def _tune(db: Path, *extra: str, trials: int = 4) -> subprocess.CompletedProcess:
    """`tir tune` in a process of its own (a --ray run: its process is the cluster's driver)."""
    done = _tir(*_tune_argv(db, trials), *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{trials} trials in" in done.stdout, done.stdout
    return done


def _matmul(m: int, k: int, n: int) -> Task:
    ins = (TensorType((m, k)), TensorType((k, n)))
    return Task(key=workload_key("matmul", ins, {}), op="matmul", in_types=ins, attrs={}, flops=2 * m * k * n)


def _valid(records: list[dict]) -> list[dict]:
    return [r for r in records if r["error"] is None and r["timing"] != "model"]


def test_unreachable_cluster_is_one_line_exit_2(capsys, tmp_path):
    from tensorir.cli import main

    db = tmp_path / "x.db"
    assert main(["tune", str(MODEL), "--db", str(db), "--ray", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tir tune: error: --ray 127.0.0.1:1:"), err
    assert "no Ray cluster answers" in err[0]
    assert not db.exists()  # nothing was started


def test_ray_tune_records_as_a_local_run_and_compile_uses_them(cluster, tmp_path, capsys, pg_url):
    """The same trials and seed with and without --ray (this one into the PostgreSQL server,
    as a team would): the same configs measured, all of them valid; `tir compile --records
    postgresql://...` applies them; a second --ray run resumes from the database and, killed
    with SIGKILL, keeps its records."""
    from tensorir.cli import main

    local, remote = tmp_path / "local.db", pg_url
    assert main(_tune_argv(local)) == 0  # here: the process pool, no Ray
    done = _tune(remote, "--ray", cluster.address)
    assert "ray:" not in done.stderr  # no actor was lost or restarted
    with open_database(local) as a, open_database(remote) as b:
        ra, rb = _valid(a.records()), _valid(b.records())
        assert len(rb) == len(ra) == 4 and len(b.records()) == 4
        assert {r["device"] for r in rb} == {DEVICE}
        assert all(r["costs"] and all(math.isfinite(c) and c > 0 for c in r["costs"]) for r in rb)
        same = {(r["workload_key"], config_key(r["config"])) for r in ra}
        assert {(r["workload_key"], config_key(r["config"])) for r in rb} == same

    capsys.readouterr()
    assert main(["compile", str(MODEL), "--records", str(remote), "-o", str(tmp_path / "out")]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "tuning records:" in ln)
    assert DEVICE in line and int(line.split("; ")[1].split()[0]) >= 2, line  # the 2 tuned tasks

    with open_database(remote) as b:
        first = {(r["workload_key"], config_key(r["config"])): r for r in b.records()}
    _kill_9_mid_tune(remote, cluster.address, tmp_path / "killed.log", first)


def _kill_9_mid_tune(db: Path, address: str, log: Path, before: dict) -> None:
    """`tir tune --ray` on a database holding the records `before` resumes from them (measures
    none again: a measurement would replace its record) and, killed with SIGKILL once it has
    added 2 records, keeps what it added."""
    flags = ["--batch", "2", "--search", "random", "--no-layout", "--no-model-ab", "--workers", "1"]
    argv = [sys.executable, "-m", "tensorir.cli", "tune", str(MODEL), "--trials", "200", "--db", str(db)]
    with open(log, "wb") as out:
        argv += [*flags, "--ray", address]
        proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=out, stderr=out, start_new_session=True)
    try:
        deadline, n = time.monotonic() + 40, 0
        while time.monotonic() < deadline and proc.poll() is None and n < 6:
            with open_database(db) as b:
                n = len(b.records())
            time.sleep(0.2)
        assert proc.poll() is None and n >= 6, log.read_text(errors="replace")[-2000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    with open_database(db) as b:
        records = b.records()
    got = {(r["workload_key"], config_key(r["config"])): r for r in records}
    assert len(got) == len(records) >= len(before) + 2
    assert all(got[k] == r for k, r in before.items())  # resumed: none measured again
    assert all(r["error"] is None and r["costs"] for r in records)


def _reported(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _actor_counts(address: str) -> dict[str, int]:
    """Candidates measured so far by each device actor that answers (name -> count), asked as
    a driver of the cluster."""

    ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, logging_level="warning")
    try:
        counts = {}
        for a in ray.util.list_named_actors(all_namespaces=True):
            try:
                handle = ray.get_actor(a["name"], namespace=a["namespace"])
                counts[a["name"]] = ray.get(handle.info.remote(), timeout=10)["measured"]
            except (ValueError, ray.exceptions.RayError):  # gone with its node
                continue
        return counts
    finally:
        ray.shutdown()


def test_two_tuners_share_the_devices_and_a_node_dies(cluster, tmp_path, pg_url):
    """Two tuner processes (two tasks) on both nodes' devices, the second node killed mid-run:
    both finish their trials; the database (a PostgreSQL server) holds every result they
    reported exactly once and nothing they did not report."""
    trials = 12
    shapes = {"a": (16, 32, 24), "b": (8, 48, 16)}
    procs, reports = {}, {}
    for name, (m, k, n) in shapes.items():
        reports[name] = tmp_path / f"{name}.jsonl"
        argv = [cluster.address, DEVICE, pg_url, str(reports[name]), str(m), str(k), str(n), str(trials)]
        log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 (closed below)
        procs[name] = (
            subprocess.Popen([sys.executable, str(TUNER), *argv], env=_env(), stdout=log, stderr=log),
            log,
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = sum(len(_reported(p)) for p in reports.values())
            if done >= 6:
                break
            assert all(p.poll() is None for p, _ in procs.values()), _logs(tmp_path)
            time.sleep(0.2)
        counts = _actor_counts(cluster.address)
        assert len(counts) == 2 and all(c > 0 for c in counts.values()), counts  # both nodes measured
        assert sum(len(_reported(p)) for p in reports.values()) < 2 * trials, "the run ended before the kill"
        cluster.kill_node(1)
        for p, log in procs.values():
            p.wait(120)
            log.close()
        assert [p.returncode for p, _ in procs.values()] == [0, 0], _logs(tmp_path)
    finally:
        for p, log in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
            log.close()
    for name in shapes:
        assert f"{trials} trials" in (tmp_path / f"{name}.log").read_text(), _logs(tmp_path)

    reported = [r for p in reports.values() for r in _reported(p)]
    assert len(reported) == 2 * trials
    with open_database(pg_url) as db:
        records = db.records()
    got = {(r["workload_key"], config_key(r["config"])): r for r in records}
    want = {(r["workload_key"], config_key(r["config"])): r for r in reported}
    assert len(got) == len(records) == len(want) == 2 * trials  # each once, none invented
    assert got.keys() == want.keys()
    for key, r in want.items():
        assert got[key]["error"] == r["error"]
        if r["error"] is None:
            assert got[key]["costs"] == pytest.approx(r["costs"])
    valid = [r for r in reported if r["error"] is None]
    assert len(valid) >= trials  # most survived the node: re-run elsewhere, not written off
    for r in reported:  # what did fail, failed for the cluster's sake (matmuls are not wrong)
        assert r["error"] is None or "cluster" in r["error"] or "device actor" in r["error"], r["error"]
    logs = _logs(tmp_path)
    # the user is told: the actor is dropped once Ray lists its node as dead, or, where the
    # last runs finish before Ray's health checks declare it (a lagging raylet), its lost run
    # is reported and the other devices take its runs (ray_measure._lost)
    told = "dropped: its node left the cluster" in logs or "the other devices take its runs" in logs
    assert told and "Traceback" not in logs, logs
    after = _actor_counts(cluster.address)
    assert len(after) == 1 and sum(after.values()) > 0, after  # the head's device still answers


def _logs(tmp_path: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in tmp_path.glob("*.log"))


def test_an_opencl_device_through_ray(cluster, tmp_path):
    """`tir tune --device pocl --ray`: the GPU template knobs built as OpenCL C on the cluster
    and timed by the head's OpenCL device actor (PoCL): valid records under its key."""
    db = tmp_path / "ocl.db"
    argv = ["tune", str(MODEL), "--device", "pocl", "--trials", "4", "--db", str(db), "--batch", "2"]
    flags = ["--search", "random", "--seed", "0", "--no-model-ab", "--workers", "1"]
    done = _tir(*argv, *flags, "--ray", cluster.address)
    assert done.returncode == 0, done.stderr[-3000:]
    with open_database(db) as b:
        records = b.records()
    assert len(_valid(records)) == len(records) == 4 and {r["device"] for r in records} == {POCL}
    assert all(r["target"].startswith("opencl") for r in records), {r["target"] for r in records}


def test_features_on_the_cluster_and_a_device_no_node_offers(cluster):
    """The measurer's features (computed in Ray tasks) are the local ones; a device key no
    node offers is one line naming the resource to start a node with."""
    from autotune.measure import MeasureOptions, candidate_features_of
    from autotune.ray_measure import RayMeasurer, check_device
    from tensorir.errors import InputError

    ins = (TensorType((8, 16)), TensorType((16, 8)))
    task = Task(
        key=workload_key("matmul", ins, {}), op="matmul", in_types=ins, attrs={}, flops=2 * 8 * 16 * 8
    )
    space = task.space()
    configs = [space.default(), *(space.sample(random.Random(k)) for k in range(3))]
    with RayMeasurer(MeasureOptions(), DEVICE, cluster.address) as m:
        got = m.features(task, configs)
        with pytest.raises(InputError, match=r"no node of the cluster offers device 'nope'.*tir-device:nope"):
            check_device("nope", cluster.address)
    for cfg, f in zip(configs, got, strict=True):
        assert f is not None and np.array_equal(f, candidate_features_of(task, cfg, "host"))


def test_a_device_that_disconnects_is_restarted_then_dropped(cluster, capsys):
    """Device actors whose device does not answer (an rpc server gone): every candidate is an
    error result saying why, and each actor is restarted, then dropped, with one line each."""
    from autotune.measure import MeasureOptions
    from autotune.ray_measure import FAILED_IN_A_ROW, RayMeasurer

    task = _matmul(8, 16, 8)
    space = task.space()
    rng = random.Random(5)
    configs = list(
        {config_key(space.complete(c)): c for c in (space.sample(rng) for _ in range(40))}.values()
    )
    options = MeasureOptions(rpc=("127.0.0.1:1",), run_timeout_s=10.0)  # nothing listens there
    results = []
    with RayMeasurer(options, DEVICE, cluster.address) as m:
        names = {a.name for a in m.actors}
        for k in range(0, 8 * len(names) * FAILED_IN_A_ROW, 4):
            results += m.measure(task, configs[k : k + 4])
            if not m.actors:
                break
        assert not m.actors  # all dropped
        last = m.measure(task, configs[-2:])
    err = capsys.readouterr().err.splitlines()
    gone = f"no device actor left for {DEVICE}"
    assert all(r.error and gone in r.error for r in last)
    for r in results:
        assert not r.costs and r.error, r
        assert any(w in r.error for w in ("127.0.0.1:1", "lost its device actor", gone)), r.error
    other = [ln for ln in err if " restarted: " not in ln and " dropped: " not in ln]
    assert all(" lost a run (" in ln for ln in other), "\n".join(err)  # a call the restart caught
    for name in names:
        restarted = [ln for ln in err if f"{name} restarted: 3 runs in a row failed" in ln]
        dropped = [ln for ln in err if f"{name} dropped: " in ln and "again after a restart" in ln]
        assert len(restarted) == len(dropped) == 1, err


def test_a_candidate_that_crashes_costs_a_child_not_the_device_actor(cluster, tmp_path):
    """A shipped library that segfaults is an error result from the device actor, which goes
    on (same process) and measures the next candidate."""
    import shutil

    from autotune.measure import MeasureOptions
    from autotune.ray_measure import RayMeasurer
    from autotune.rpc_runner import LibraryKernel, RPCBuilder
    from tensorir.target import get_target

    cc = shutil.which("clang-15") or shutil.which("cc")
    assert cc, "a C compiler (clang-15, quickstart.sh installs it)"
    src, lib = tmp_path / "crash.c", tmp_path / "libcrash.so"
    src.write_text("void tir_crash(void) { *(volatile int *)0 = 1; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-O0", "-o", str(lib), str(src)], check=True)
    task = _matmul(8, 16, 8)
    built = RPCBuilder(get_target("host")).build(task, task.space().default())
    crash = dataclasses.replace(built, kernel=LibraryKernel("tir_crash", lib.read_bytes()))
    options = MeasureOptions(repeat=2)
    with RayMeasurer(options, DEVICE, cluster.address) as m:
        actor = m.actors[0].handle
        pid = ray.get(actor.info.remote())["pid"]
        status, why = ray.get(actor.run.remote(task, crash, options))
        assert status == "error" and "crashed the measuring process" in why, why
        status, costs = ray.get(actor.run.remote(task, built, options))
        assert status == "ran" and len(costs) == 2 and all(c > 0 for c in costs)
        assert ray.get(actor.info.remote())["pid"] == pid


def _fake_adb(tmp_path: Path) -> Path:
    """An adb program for the device actors: the stand-in adb with its phone folder (the
    actors run in the cluster's processes, which do not have this test's environment)."""
    root = tmp_path / "phone"
    root.mkdir()
    adb = tmp_path / "adb"
    adb.write_text(f'#!/bin/sh\nFAKE_ADB_ROOT={root} exec {sys.executable} {FAKE_ADB} "$@"\n')
    adb.chmod(0o755)
    return adb


@pytest.mark.arm64  # qemu-aarch64 and the aarch64 glibc run the phone's harness
def test_a_phone_on_a_node_through_adb(cluster, tmp_path):
    """`tir tune --adb SERIAL --ray`: the phone is attached to the node offering its device
    key, its device actor checks and measures it (the tuner's machine need not see it); a
    phone that no actor reaches is one line (InputError: exit 2)."""
    from autotune.measure import MeasureOptions
    from autotune.ray_measure import RayMeasurer
    from tensorir.errors import InputError

    adb = _fake_adb(tmp_path)
    db = tmp_path / "phone.db"
    argv = ["tune", str(MODEL), "--device", "cortex-a76", "--adb", "FAKE", "--ray", cluster.address]
    argv += ["--trials", "2", "--batch", "2", "--search", "random", "--db", str(db)]
    done = _tir(*argv, "--adb-path", str(adb))
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"on {PHONE};" in done.stdout and "2 trials in" in done.stdout, done.stdout
    with open_database(db) as b:
        records = b.records()
    assert {r["device"] for r in records} == {PHONE} and len(records) == 2
    assert all(r["error"] is None for r in records), [r["error"] for r in records]
    runs = [ln for ln in (tmp_path / "phone" / ".adb.log").read_text().splitlines() if "echo TIR_EXIT" in ln]
    # every trial ran the harness on the "phone", and so did the closing re-timing's configs
    retimed = re.search(r"timed again at the end, back to back: .* \((\d+) configs", done.stdout)
    assert retimed and len(runs) == 2 + int(retimed[1]), done.stdout

    bad = MeasureOptions(target="android-arm64", adb="FAKE", adb_path=str(tmp_path / "no-adb"))
    gone = rf"^--adb FAKE: no device actor of {PHONE} reaches it \(.*not found"
    with pytest.raises(InputError, match=gone):
        RayMeasurer(bad, PHONE, cluster.address)


class _NoReference(Task):
    """A task whose reference outputs cannot be computed: each of its runs fails on the
    device actor before anything is timed, while the device itself is fine."""

    def reference(self, inputs):
        raise RuntimeError("no reference for this task")


def test_runs_that_fail_on_a_device_that_answers_keep_the_actor(cluster, capsys):
    """Runs failing in a row have the device checked; a device that answers keeps its actor
    (no restart, no line): the failures were the candidates', as a kernel the driver refuses."""
    from autotune.measure import MeasureOptions
    from autotune.ray_measure import FAILED_IN_A_ROW, RayMeasurer

    base = _matmul(4, 8, 4)  # a task no other test measures: the actors keep none of its data
    task = _NoReference(**{f.name: getattr(base, f.name) for f in dataclasses.fields(Task)})
    space = task.space()
    samples = (space.sample(random.Random(k)) for k in range(40))
    configs = list({config_key(space.complete(c)): c for c in samples}.values())
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors import no tests
    try:
        with RayMeasurer(MeasureOptions(), DEVICE, cluster.address) as m:
            n = len(m.actors)
            results = m.measure(task, configs[: 2 * FAILED_IN_A_ROW * n + 1])
            assert len(m.actors) == n
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    for r in results:
        assert r.error and "no reference for this task" in r.error and not r.costs, r.error
    assert "ray:" not in capsys.readouterr().err
