"""`tir rpc serve` and the RPC runner, on loopback with servers started here (subprocesses on
free ports): PoCL and host candidates measured through a server match the reference; `tir
tune --rpc` fills the database under the server's key and `tir compile` uses it; wrong tokens,
oversize uploads, garbage, hostile requests, crashing and hanging candidates get error replies
and the server goes on; a killed server becomes failed trials and the tuner finishes on the
other one; kill -9 of the tuner mid-run, then the same command resumes. PoCL must be present."""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from autotune.builders import OpenCLBuilder
from autotune.database import Database
from autotune.device_keys import cpu_key
from autotune.measure import MeasureOptions, Measurer
from autotune.rpc import MAGIC, RPCError, Unreachable, call, decode_array, encode_array, server_info
from autotune.rpc_runner import request
from autotune.rpc_server import MAX_CONNECTIONS
from autotune.runners import kernel_arrays
from autotune.task import Task
from tensorir.graph.types import TensorType
from tensorir.ops.workload import workload_key
from tensorir.plan import GpuKernel, ImageParam
from tensorir.target import get_target, host_target
from tests.autotune.test_measure import WrongReferenceTask

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "examples" / "tiny_cnn.onnx"
TOKEN = "s3cret-token"


def _env() -> dict:
    env = dict(os.environ, TIR_RPC_TOKEN="")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


@contextlib.contextmanager
def _server(tmp: Path, device: str = "pocl", *extra: str) -> Iterator[tuple[subprocess.Popen, str, Path]]:
    """A `tir rpc serve` subprocess on a free loopback port: (process, HOST:PORT, its log)."""
    log = tmp / f"server-{time.monotonic_ns()}.log"
    cmd = [sys.executable, "-m", "tensorir.cli", "rpc", "serve", "--device", device, "--port", "0"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*cmd, "--token", TOKEN, *extra],
            cwd=REPO,
            env=_env(),
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while "serving" not in log.read_text() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        text = log.read_text()
        assert "serving" in text, text[-2000:]
        yield proc, text.split(" on ")[-1].split()[0], log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _dense(cls: type[Task] = Task, m: int = 64, k: int = 48, n: int = 40) -> Task:
    ins = (TensorType((m, k)), TensorType((n, k)))
    return cls(key=workload_key("dense", ins, {}), op="dense", in_types=ins, attrs={}, flops=2 * m * k * n)


def _rpc_options(target: str, *servers: str) -> MeasureOptions:
    return MeasureOptions(
        target=target, workers=1, repeat=3, min_repeat_s=0.001, rpc=servers, rpc_token=TOKEN
    )


def _raw(address: str, data: bytes) -> dict:
    """Send raw bytes, return the reply header."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        with contextlib.suppress(OSError):
            s.sendall(data)
        magic, n = s.recv(4, socket.MSG_WAITALL), s.recv(4, socket.MSG_WAITALL)
        assert magic == MAGIC
        return json.loads(s.recv(struct.unpack(">I", n)[0], socket.MSG_WAITALL))


def _frame(header: dict, payload: bytes = b"") -> bytes:
    data = json.dumps(header).encode()
    return MAGIC + struct.pack(">I", len(data)) + data + payload


def _good_pocl_run(address: str) -> None:
    """A rendered dense kernel measured through the server matches numpy."""
    task = _dense()
    built = OpenCLBuilder(get_target("opencl:pocl")).build(task, {})
    inputs = task.random_inputs(seed=1)
    ins, outs = kernel_arrays(built, inputs)
    header, payloads = request(built, ins, outs, [], _rpc_options("opencl:pocl", address))
    reply, data = call(address, TOKEN, header, payloads)
    (got,) = [decode_array(d) for d in data]
    np.testing.assert_allclose(got, task.reference(inputs)[0], rtol=1e-4, atol=1e-4)
    assert len(reply["times_s"]) == 3 and all(t > 0 for t in reply["times_s"])


def test_gpu_kernel_round_trips_through_json():
    k = GpuKernel("k", "__kernel void k() {}", (64, 2), (16, 1), (("a", "float32"),), (ImageParam(0, 4, 2),))
    assert GpuKernel.from_dict(json.loads(json.dumps(k.to_dict()))) == k


def test_pocl_and_host_candidates_through_servers_match_the_reference(tmp_path):
    """The Measurer with rpc servers: PoCL kernels and host shared libraries are measured on
    the servers; their outputs come back and are checked here (a wrong reference is caught)."""
    task = _dense()
    with _server(tmp_path, "pocl") as (_, gpu, _), _server(tmp_path, "host") as (_, cpu, _):
        assert server_info(gpu, TOKEN)["device_key"].startswith("opencl-pocl-")
        assert server_info(cpu, TOKEN)["device_key"] == cpu_key(host_target())
        for target, address in (("opencl:pocl", gpu), ("host", cpu)):
            space = task.space(target)
            configs = [space.default(), space.sample(random.Random(0))]
            with Measurer(_rpc_options(target, address)) as m:
                results = m.measure(task, configs)
                (wrong,) = m.measure(_dense(WrongReferenceTask, m=32), [{}])  # another key: a new task
            for r in results:
                assert r.error is None, (target, r.config, r.error)
                assert len(r.costs) == 3 and all(0 < c < 1 for c in r.costs)
            assert wrong.error is not None and "wrong result" in wrong.error
            assert server_info(address, TOKEN)["measured"] == 3
        _good_pocl_run(gpu)


def _good_host_run(address: str) -> None:
    """A host candidate (a shared library) measured through the server matches numpy."""
    from autotune.rpc_runner import RPCBuilder
    from tensorir.ops.kernel import scratch_arrays

    task = _dense()
    built = RPCBuilder(host_target()).build(task, {})
    inputs = task.random_inputs(seed=1)
    ins, outs = kernel_arrays(built, inputs)
    header, payloads = request(built, ins, outs, scratch_arrays(built.func), _rpc_options("host", address))
    _, data = call(address, TOKEN, header, payloads)
    np.testing.assert_allclose(decode_array(data[0]), task.reference(inputs)[0], rtol=1e-4, atol=1e-4)


def _library(body: str) -> bytes:
    """A shared library whose `k(ptr)` runs the LLVM IR `body`."""
    import llvmlite.binding as llvm

    from tensorir.codegen.link import link_shared
    from tensorir.codegen.llvm import LLVM_LOCK, target_machine

    t = host_target()
    text = f'target triple = "{t.triple}"\ndefine void @k(ptr %a) {{\nentry:\n{body}\n}}\n'
    with LLVM_LOCK, tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / "k.o"
        obj.write_bytes(target_machine(t).emit_object(llvm.parse_assembly(text)))
        return link_shared([obj], t, Path(tmp) / "libk.so").read_bytes()


def _library_run(address: str, lib: bytes) -> dict:
    header = {"op": "run", "kind": "library", "symbol": "k", "args": [{"role": "in"}], "timeout_s": 3}
    return call(address, TOKEN, header, [lib, encode_array(np.zeros(4, np.float32))], timeout_s=30)[0]


def test_hostile_requests_get_error_replies_and_the_server_goes_on(tmp_path):
    """Wrong/missing token (logged), oversize upload (not read), garbage, bad headers, pickled
    or object arrays, absurd allocations, unknown ops: each an error reply; then a good run."""
    with _server(tmp_path, "host", "--max-upload-mb", "1") as (proc, address, log):
        ok = {"op": "info", "token": TOKEN}
        assert _raw(address, _frame(ok))["ok"] is True
        for header in ({"op": "info", "token": "wrong"}, {"op": "info"}, {"op": "info", "token": 7}):
            reply = _raw(address, _frame(header))
            assert reply["ok"] is False and reply["refused"] and "token" in reply["error"]
        assert log.read_text().count("wrong or missing token") == 3
        big = _frame({"op": "run", "token": TOKEN, "sizes": [2 << 20]}, b"x" * (256 << 10))
        assert "over the limit" in _raw(address, big)["error"]
        assert "not a tir rpc message" in _raw(address, b"GET / HTTP/1.1\r\n\r\n")["error"]
        assert "over the limit" in _raw(address, MAGIC + b"\xff\xff\xff\xff")["error"]
        assert "not JSON" in _raw(address, MAGIC + struct.pack(">I", 5) + b"{{{{{")["error"]
        assert "sizes" in _raw(address, _frame({"token": TOKEN, "sizes": [-1]}))["error"]
        pickled = io.BytesIO()
        np.save(pickled, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        for args, payloads, words in [
            ([{"role": "in"}], [pickled.getvalue()], "bad .npy"),
            ([{"role": "in"}], [b"\x93NUMPY garbage"], "bad .npy"),
            ([{"role": "out", "shape": [1 << 40], "dtype": "float32"}], [], "allocation limit"),
            ([{"role": "out", "shape": [4], "dtype": "object"}], [], "not accepted"),
            ([{"role": "sideways"}], [], "role"),
        ]:
            header = {"op": "run", "kind": "library", "symbol": "k", "args": args}
            with pytest.raises(RPCError, match=words):
                call(address, TOKEN, header, [b"lib", *payloads])
        with pytest.raises(RPCError, match="unknown op"):
            call(address, TOKEN, {"op": "shell"})
        with pytest.raises(RPCError, match="not 'opencl'"):
            call(address, TOKEN, {"op": "run", "kind": "opencl", "args": []})
        with pytest.raises(RPCError, match="OSError"):  # not a shared library
            _library_run(address, b"\x7fELF not really")
        assert proc.poll() is None
        _good_host_run(address)
        # idle connections cannot pile up: past MAX_CONNECTIONS they are closed at once
        host, port = address.rsplit(":", 1)
        idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(MAX_CONNECTIONS + 1)]
        assert idle[-1].recv(1) == b""
        for s in idle:
            s.close()
        time.sleep(0.5)
        assert server_info(address, TOKEN)["ok"] is True


def test_crashing_and_hanging_candidates_kill_only_the_child(tmp_path):
    with _server(tmp_path, "host", "--run-timeout", "3") as (proc, address, _):
        with pytest.raises(RPCError, match="crashed the measuring process"):
            _library_run(address, _library("  store volatile i32 0, ptr null\n  ret void"))
        t0 = time.monotonic()
        with pytest.raises(RPCError, match="timed out after 3 s"):
            _library_run(address, _library("  br label %loop\nloop:\n  br label %loop"))
        assert time.monotonic() - t0 < 20
        assert proc.poll() is None
        _good_host_run(address)
        assert _library_run(address, _library("  ret void"))["ok"] is True
        # the server itself dies while a candidate runs: the client's call fails at once
        spin = _library("  br label %loop\nloop:\n  br label %loop")  # built before the clock starts
        threading.Timer(1.0, os.killpg, (proc.pid, signal.SIGKILL)).start()
        t0 = time.monotonic()
        with pytest.raises(Unreachable, match="connection lost"):
            _library_run(address, spin)
        assert time.monotonic() - t0 < 3
        proc.wait(10)  # its sockets close as it exits: until then a connect may still be reset
        with pytest.raises(Unreachable, match="cannot connect"):
            server_info(address, TOKEN)


def test_a_wrong_token_stops_tir_tune_with_one_line(tmp_path):
    with _server(tmp_path, "pocl") as (_, address, log):
        cmd = [sys.executable, "-m", "tensorir.cli", "tune", str(MODEL), "--device", "pocl"]
        cmd += ["--rpc", address, "--token", "not-the-token", "--db", str(tmp_path / "t.db")]
        p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, p.stderr
        assert p.stderr.strip().splitlines() == [
            f"tir tune: error: rpc server {address}: wrong or missing token"
        ], p.stderr
        assert "refused a request from 127.0.0.1" in log.read_text()
        cmd[cmd.index("not-the-token")] = TOKEN
        cmd[cmd.index("pocl")] = "host"
        p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and "measures 'opencl:pocl', not 'host'" in p.stderr, p.stderr


def _tune(address: str, db: Path, trials: int) -> list[str]:
    return [
        *(sys.executable, "-m", "tensorir.cli", "tune", str(MODEL), "--device", "pocl"),
        *("--rpc", address, "--token", TOKEN, "--db", str(db), "--trials", str(trials)),
        *("--batch", "2", "--workers", "1", "--search", "random"),
    ]


def _wait_records(db: Path, n: int, proc: subprocess.Popen, seconds: float = 120) -> int:
    """Wait until the tuner has recorded `n` trials (or exited); returns how many it has."""
    deadline, got = time.monotonic() + seconds, 0
    while time.monotonic() < deadline and proc.poll() is None and got < n:
        with contextlib.suppress(Exception), Database(db) as d:  # the file may not be ready yet
            got = len(d.records())
        time.sleep(0.2)
    return got


def test_tir_tune_through_a_server_then_compile_uses_its_records(tmp_path, capsys):
    """`tir tune --device pocl --rpc` measures on the server (it counts them) and keeps the
    records under the server's device key; `tir compile --target opencl:pocl` picks them."""
    from tensorir.cli import main

    db, out = tmp_path / "t.db", tmp_path / "build"
    with _server(tmp_path, "pocl") as (_, address, _):
        key = server_info(address, TOKEN)["device_key"]
        assert main(_tune(address, db, 10)[3:]) == 0
        assert f"on {key};" in capsys.readouterr().out
        measured = server_info(address, TOKEN)["measured"]
    assert Database(db).devices() == [key]
    good = [r for r in Database(db).records() if r["error"] is None]
    assert good and measured >= len(good)  # every timing came from the server
    assert main(["compile", str(MODEL), "--target", "opencl:pocl", "--records", str(db), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"tuning records: device {key};" in text, text
    assert int(text.split(f"device {key}; ")[1].split(" kernels use one")[0]) >= 1, text


def test_a_server_killed_mid_tune_becomes_failures_and_the_other_goes_on(tmp_path):
    """The dead server's in-flight candidate and the next one sent to it fail; then it is
    skipped for TIR_RPC_DOWN_S (set here past the run's length, so a slow machine does not
    see it retried) and the other server takes every candidate."""
    db, log = tmp_path / "t.db", tmp_path / "tune.log"
    env = {**_env(), "TIR_RPC_DOWN_S": "3600"}
    with _server(tmp_path, "pocl") as (dead, a, _), _server(tmp_path, "pocl") as (_, b, _):
        with open(log, "wb") as f:
            tuner = subprocess.Popen(_tune(f"{a},{b}", db, 12), cwd=REPO, env=env, stdout=f, stderr=f)
        try:
            assert _wait_records(db, 4, tuner) >= 4, log.read_text()[-2000:]
            on_dead = server_info(a, TOKEN)["measured"]
            os.killpg(dead.pid, signal.SIGKILL)
            assert tuner.wait(300) == 0, log.read_text()[-2000:]
        finally:
            if tuner.poll() is None:
                tuner.kill()
        on_alive = server_info(b, TOKEN)["measured"]
    records = sorted(Database(db).records(), key=lambda r: r["timestamp"])  # in the order measured
    good = [r for r in records if r["error"] is None]
    assert on_alive > 0 and on_dead + on_alive >= len(good)  # (a may finish one more before it dies)
    failed = [k for k, r in enumerate(records) if r["error"]]
    errors = [r["error"] for r in records]
    assert failed and all(f"rpc server {a}" in errors[k] for k in failed), errors
    assert len(failed) <= 2 and any(r["error"] is None for r in records[failed[-1] + 1 :])
    assert "trials in" in log.read_text()


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs process groups and SIGKILL")
def test_kill_9_mid_rpc_tune_then_resume(tmp_path):
    """The tuner killed with SIGKILL keeps every finished record; the same command with a
    larger --trials resumes it, with no configuration measured twice."""
    db, log = tmp_path / "k.db", tmp_path / "tune.log"
    with _server(tmp_path, "pocl") as (_, address, _):
        with open(log, "wb") as f:
            tuner = subprocess.Popen(
                _tune(address, db, 400), cwd=REPO, env=_env(), stdout=f, stderr=f, start_new_session=True
            )
        try:
            n = _wait_records(db, 3, tuner)
            assert tuner.poll() is None and n >= 3, log.read_text()[-2000:]
        finally:
            if tuner.poll() is None:
                os.killpg(tuner.pid, signal.SIGKILL)
            tuner.wait(10)
        assert tuner.returncode == -signal.SIGKILL
        n = len(Database(db).records())
        done = subprocess.run(_tune(address, db, n + 4), cwd=REPO, env=_env(), capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    assert f"{n + 4} trials in" in done.stdout
    records = Database(db).records()
    pairs = [(r["workload_key"], json.dumps(r["config"], sort_keys=True)) for r in records]
    assert len(records) == n + 4 and len(set(pairs)) == len(pairs)
