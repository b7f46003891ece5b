"""The ADB runner without a phone: tests/fixtures/fake_adb.py plays `adb`, a temp folder the
phone's filesystem, and qemu-aarch64 runs the Android harness and kernel libraries (glibc
standing in for bionic). Timings there mean nothing; the protocol, the output check, the
error handling and the records are what is tested: `tir tune --device cortex-a76 --adb` fills
the database under aarch64-cortex-a76-neon and `tir compile --target android-arm64` uses it;
an offline or unknown device stops it with one line; crashing, hanging, garbage-printing and
wrong candidates are error results; kill -9 then resume measures nothing twice. Remote-only
devices without --rpc/--adb are one line."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autotune.adb_harness import harness, parse_times
from autotune.adb_runner import ADB, ADBError, ADBRunner, _check_exit
from autotune.builders import Built
from autotune.database import Database
from autotune.measure import MeasureOptions, Measurer
from autotune.rpc_runner import LibraryKernel
from tensorir.codegen.link import find_tool
from tests.autotune.test_measure import WrongReferenceTask, _matmul

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "examples" / "tiny_cnn.onnx"
FAKE = REPO / "tests" / "fixtures" / "fake_adb.py"
KEY = "aarch64-cortex-a76-neon"
FAST = {"target": "android-arm64", "adb": "FAKE", "workers": 1, "repeat": 3, "min_repeat_s": 0.001}

# qemu-aarch64, clang-15 and the aarch64 glibc: a missing one fails the test (./quickstart.sh
# test deselects the arm64 tests only for a user who is not root and lacks the ARM64 packages)
pytestmark = pytest.mark.arm64


@pytest.fixture
def phone(tmp_path, monkeypatch) -> Path:
    """The fake phone's filesystem; TIR_ADB names the stand-in adb (workers inherit it)."""
    root = tmp_path / "phone"
    root.mkdir()
    adb = tmp_path / "adb"
    adb.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    adb.chmod(0o755)
    monkeypatch.setenv("TIR_ADB", str(adb))
    monkeypatch.setenv("FAKE_ADB_ROOT", str(root))
    return root


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _tune(db: Path, trials: int, device: str = "cortex-a76", serial: str = "FAKE") -> list[str]:
    return [
        *("tune", str(MODEL), "--device", device, "--adb", serial, "--db", str(db)),
        *("--trials", str(trials), "--batch", "3", "--search", "random"),
    ]


def test_the_harness_is_an_android_executable():
    exe = harness()
    assert harness() == exe  # cached
    readelf = find_tool("llvm-readelf", "llvm-14")
    p = subprocess.run([readelf, "-l", "-d", str(exe)], capture_output=True, text=True, check=True)
    assert "/system/bin/linker64" in p.stdout and "PIE" in p.stdout
    assert "Shared library: [libc.so]" in p.stdout and "Shared library: [libdl.so]" in p.stdout


def test_timings_and_exit_statuses_are_parsed():
    assert parse_times("noise\nTIR_TIMES number=4 ns=4000,8000\nTIR_EXIT=0\n", 2) == [1e-6, 2e-6]
    for text, words in [
        ("TIR_TIMES number=4 ns=4000\n", "1 timings"),
        ("TIR_TIMES number=0 ns=1,2\n", "of 0 calls"),
        ("garbage\n", "no timings: garbage"),
        ("", r"no timings: \(no output\)"),
    ]:
        with pytest.raises(Exception, match=words):
            parse_times(text, 2)
    _check_exit("x\nTIR_EXIT=0\n")
    for text, words in [
        ("TIR_EXIT=139\n", "SIGSEGV"),
        ("TIR_EXIT=142\n", "timed out"),
        ("tir-harness: dlopen: nope\nTIR_EXIT=3\n", "exit 3.*dlopen: nope"),
        ("Segmentation fault\n", "no exit status"),
    ]:
        with pytest.raises(ADBError, match=words):
            _check_exit(text)


@pytest.mark.parametrize(
    ("device", "ways"),
    [("adreno640", "give --rpc HOST:PORT"), ("cortex-a76", "give --rpc HOST:PORT or --adb SERIAL")],
)
def test_a_remote_device_without_a_way_to_reach_it_is_one_line(device, ways, tmp_path, capsys):
    from tensorir.cli import main

    db = tmp_path / "t.db"
    assert main(["tune", str(MODEL), "--device", device, "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"tir tune: error: --device {device} is measured on the device itself: {ways}"]
    assert main(["tune", str(MODEL), "--device", "adreno640", "--adb", "X", "--db", str(db)]) == 2
    assert "--adb measures CPU devices (cortex-a76, cortex-a55)" in capsys.readouterr().err
    assert not db.exists()


def test_tune_through_adb_then_compile_uses_its_records(phone, tmp_path, capsys):
    from tensorir.cli import main

    db, out = tmp_path / "t.db", tmp_path / "build"
    assert main(_tune(db, 6)) == 0
    said = capsys.readouterr().out
    assert f"on {KEY};" in said
    records = Database(db).records()
    assert Database(db).devices() == [KEY] and len(records) == 6  # a re-timing replaces its record
    assert sum(r["error"] is None for r in records) >= 4, [r["error"] for r in records]
    runs = [line for line in (phone / ".adb.log").read_text().splitlines() if "echo TIR_EXIT" in line]
    # every trial ran the harness on the "phone", and so did the closing re-timing's configs
    retimed = re.search(r"timed again at the end, back to back: .* \((\d+) configs", said)
    assert retimed and int(retimed[1]) >= 2 and len(runs) == 6 + int(retimed[1]), said
    assert (
        main(["compile", str(MODEL), "--target", "android-arm64", "--records", str(db), "-o", str(out)]) == 0
    )
    text = capsys.readouterr().out
    assert f"tuning records: device {KEY};" in text, text
    assert int(text.split(f"device {KEY}; ")[1].split(" kernels use one")[0]) >= 1, text


@pytest.mark.parametrize(
    ("serial", "mode", "words"), [("FAKE", "offline", "device offline"), ("NOPE", "", "'NOPE' not found")]
)
def test_an_unreachable_device_stops_tir_tune_with_one_line(phone, tmp_path, serial, mode, words):
    (phone / ".mode").write_text(mode)
    cmd = [sys.executable, "-m", "tensorir.cli", *_tune(tmp_path / "t.db", 6, serial=serial)]
    p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith(f"tir tune: error: adb -s {serial} shell: ")
        and words in lines[0]
    )
    assert not (tmp_path / "t.db").exists()


def test_failing_candidates_are_error_results_and_the_measurer_goes_on(phone):
    """The device going offline, a harness that crashes or prints garbage, a wrong result:
    each an error result; afterwards the same Measurer measures again."""
    task = _matmul(m=8, k=16, n=8)
    default = task.space("android-arm64").default()
    with Measurer(MeasureOptions(**FAST)) as m:
        for mode, words in [("offline", "device offline"), ("crash", "SIGSEGV"), ("garbage", "no timings")]:
            (phone / ".mode").write_text(mode)
            (r,) = m.measure(task, [default])
            assert r.error and words in r.error, (mode, r.error)
        (phone / ".mode").unlink()
        (r,) = m.measure(task, [default])
        assert r.error is None and len(r.costs) == 3 and all(c > 0 for c in r.costs), r.error
    wrong = _matmul(WrongReferenceTask, m=8, k=16, n=8)
    with Measurer(MeasureOptions(**FAST)) as m:
        (r,) = m.measure(wrong, [default])
        assert r.error and "wrong result" in r.error


def _library(body: str) -> bytes:
    """An android-arm64 library whose `k(ptr)` runs the LLVM IR `body`."""
    import llvmlite.binding as llvm

    from tensorir.codegen.link import link_shared
    from tensorir.codegen.llvm import LLVM_LOCK, target_machine
    from tensorir.target import get_target

    t = get_target("android-arm64")
    text = f'target triple = "{t.triple}"\ndefine void @k(ptr %a) {{\nentry:\n{body}\n}}\n'
    with LLVM_LOCK, tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "k.o"
        obj.write_bytes(target_machine(t).emit_object(llvm.parse_assembly(text)))
        return link_shared([obj], t, Path(tmp) / "libk.so").read_bytes()


def test_a_kernel_that_segfaults_or_hangs_on_the_device(phone):
    task = _matmul(m=8, k=16, n=8)
    func, spec = task.build(task.space("android-arm64").default(), "android-arm64")
    inputs = task.random_inputs(seed=0)
    options = MeasureOptions(**FAST, run_timeout_s=3.0)
    runner = ADBRunner(ADB("FAKE"))
    for body, words in [
        ("  store volatile i32 1, ptr null\n  ret void", "died of SIGSEGV"),
        ("  br label %loop\nloop:\n  br label %loop", "timed out"),
    ]:
        built = Built(func, spec, LibraryKernel("k", _library(body)))
        t0 = time.monotonic()
        with pytest.raises(ADBError, match=words):
            runner.run(built, inputs, task.reference(inputs), options)
        assert time.monotonic() - t0 < 15


def _records(db: Path) -> int:
    try:
        with Database(db) as d:
            return len(d.records())
    except Exception:  # the tuner may still be creating the file
        return 0


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs process groups and SIGKILL")
def test_kill_9_mid_adb_tune_then_resume(phone, tmp_path):
    db, log = tmp_path / "k.db", tmp_path / "tune.log"
    cmd = [sys.executable, "-m", "tensorir.cli", *_tune(db, 400)]
    with open(log, "wb") as f:
        tuner = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=f, stderr=f, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and tuner.poll() is None and _records(db) < 3:
            time.sleep(0.2)
        assert tuner.poll() is None and _records(db) >= 3, log.read_text()[-2000:]
    finally:
        if tuner.poll() is None:
            os.killpg(tuner.pid, signal.SIGKILL)
        tuner.wait(10)
    assert tuner.returncode == -signal.SIGKILL
    n = _records(db)
    cmd[cmd.index("400")] = str(n + 3)
    done = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{n + 3} trials in" in done.stdout
    records = Database(db).records()
    pairs = [(r["workload_key"], json.dumps(r["config"], sort_keys=True)) for r in records]
    assert len(records) == n + 3 and len(set(pairs)) == len(pairs)
    assert Database(db).devices() == [KEY]
