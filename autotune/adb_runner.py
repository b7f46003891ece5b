"""Measuring CPU candidates on an Android phone through adb (no Python on the phone).

    options = MeasureOptions(target="android-arm64", adb="R58M123ABC")
    builder_for(target, options)   # ADBBuilder: the kernel as an android-arm64 shared library
    runner_for(target, options)    # ADBRunner: push, run the harness, pull, check here

Per candidate: the kernel library and the inputs (raw bytes) are pushed to a work folder on
the phone (/data/local/tmp/tir/w<worker pid>), the native timing harness
(autotune/adb_harness.py, pushed once per worker) runs there, the outputs are pulled back and
checked against the reference on this machine, and the harness's TIR_TIMES line gives the
timings. The adb program is `--adb-path`, else $TIR_ADB, else `adb`. Every failure (adb
missing, the device offline or gone, the harness crashing, timing out or printing no
timings, outputs missing) raises ADBError: the measuring worker makes it an error result and
the tuner goes on.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autotune.adb_harness import harness, harness_command, parse_times
from autotune.builders import Built
from autotune.rpc_runner import LibraryKernel, library_kernel
from autotune.runners import check_outputs, kernel_arrays
from autotune.task import Task
from tensorir.errors import TirError
from tensorir.target import Target

WORK_DIR = "/data/local/tmp/tir"
ABI = "arm64-v8a"


class ADBError(TirError):
    """adb failed, the device is not reachable, or the harness failed on it."""


@dataclasses.dataclass
class ADB:
    """`adb -s SERIAL ...` calls; each returns stdout or raises ADBError (one line)."""

    serial: str
    program: str = ""

    def __post_init__(self) -> None:
        self.program = self.program or os.environ.get("TIR_ADB") or "adb"

    def __call__(self, *args: str, timeout: float = 60.0) -> str:
        exe = shutil.which(self.program)
        if exe is None:
            raise ADBError(f"adb program {self.program!r} not found (give --adb-path or set TIR_ADB)")
        cmd = [exe, "-s", self.serial, *args]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ADBError(f"adb -s {self.serial} {args[0]}: no answer in {timeout:.0f} s") from None
        if p.returncode != 0:
            said = (p.stderr.strip() or p.stdout.strip() or "no message").splitlines()[-1][:300]
            raise ADBError(f"adb -s {self.serial} {args[0]}: {said} (exit {p.returncode})")
        return p.stdout

    def push(self, files: Sequence[Path], remote: str, timeout: float) -> None:
        self("push", *map(str, files), remote, timeout=timeout)

    def pull(self, remotes: Sequence[str], local: Path, timeout: float) -> None:
        self("pull", *remotes, str(local), timeout=timeout)

    def shell(self, command: str, timeout: float) -> str:
        return self("shell", command, timeout=timeout)


def check_device(adb: ADB) -> None:
    """Fail early (one line) unless the device answers and is an arm64 Android device."""
    abi = adb.shell("getprop ro.product.cpu.abi", timeout=30.0).strip()
    if abi != ABI:
        raise ADBError(f"adb device {adb.serial} reports ABI {abi!r}; the adb runner measures {ABI} phones")


@dataclasses.dataclass
class ADBBuilder:
    """A CPU candidate as a shared library for the phone's target (android-arm64[:cpu])."""

    target: Target

    def build(self, task: Task, config: dict) -> Built:
        if self.target.kind != "llvm" or not self.target.is_android:
            raise TirError(f"--adb measures Android CPU targets, not {self.target.name}")
        func, spec = task.build(config, self.target)
        return Built(func, spec, library_kernel(func, self.target), task.const_args)


@dataclasses.dataclass
class ADBRunner:
    """Run a candidate library on the phone under the timing harness; outputs checked here."""

    adb: ADB
    _harness: str = ""  # where the harness lies on the phone, once pushed

    def run(
        self, built: Built, inputs: Sequence[np.ndarray], reference: Sequence[np.ndarray], options: Any
    ) -> list[float]:
        from tensorir.ops.kernel import scratch_arrays

        kernel: LibraryKernel = built.kernel
        ins, outs = kernel_arrays(built, inputs)
        remote = f"{WORK_DIR}/w{os.getpid()}"
        timeout = max(5.0, 0.9 * options.run_timeout_s)
        with tempfile.TemporaryDirectory(prefix="tir-adb-") as tmp:
            scratch = scratch_arrays(built.func)
            files, args = _stage(Path(tmp), kernel, ins, outs, scratch, remote, built.const_args)
            exe = self._setup(remote, timeout)
            self.adb.push(files, remote + "/", timeout)
            cmd = harness_command(exe, f"{remote}/kernel.so", kernel.symbol, args, options)
            text = self.adb.shell(f"cd {remote} && {shlex.join(cmd)} 2>&1; echo TIR_EXIT=$?", timeout)
            _check_exit(text)
            times = parse_times(text, options.repeat)
            got = _pull_outputs(self.adb, remote, Path(tmp), outs, timeout)
        if options.check:
            check_outputs(got, reference, options)
        return times

    def _setup(self, remote: str, timeout: float) -> str:
        """Push the harness (once per runner) and make the work folder; its path on the phone."""
        if not self._harness:
            exe = harness()
            on_phone = f"{WORK_DIR}/tir-harness-{exe.parent.name}"
            self.adb.push([exe], on_phone, timeout)
            self.adb.shell(f"chmod 755 {on_phone} && mkdir -p {remote}", timeout)
            self._harness = on_phone
        return self._harness


def _stage(
    tmp: Path,
    kernel: LibraryKernel,
    ins: Sequence[np.ndarray],
    outs: Sequence[np.ndarray],
    scratch: Sequence[np.ndarray],
    remote: str,
    const_args: frozenset[int] = frozenset(),
) -> tuple[list[Path], list[str]]:
    """Write the library and inputs under `tmp`: (files to push, the harness's array arguments)."""
    (tmp / "kernel.so").write_bytes(kernel.data)
    files, args = [tmp / "kernel.so"], []
    for k, a in enumerate(ins):
        np.ascontiguousarray(a).tofile(tmp / f"in{k}.bin")
        files.append(tmp / f"in{k}.bin")
        args.append(f"{'i' if k in const_args else 'a'}:{a.nbytes}:{remote}/in{k}.bin")
    args += [f"o:{o.nbytes}:{remote}/out{k}.bin" for k, o in enumerate(outs)]
    args += [f"s:{s.nbytes}" for s in scratch]
    return files, args


def _check_exit(text: str) -> None:
    """Raise ADBError unless the harness exited 0 (its status comes back as TIR_EXIT=N)."""
    m = re.search(r"^TIR_EXIT=(\d+)\s*$", text, re.M)
    if m is None:
        raise ADBError(f"the device shell gave no exit status: {_tail(text)}")
    code = int(m.group(1))
    if code == 0:
        return
    if code == 128 + signal.SIGALRM:
        raise ADBError("the candidate timed out on the device (the harness's alarm)")
    if code > 128:
        name = signal.Signals(code - 128).name if code - 128 in signal.valid_signals() else str(code - 128)
        raise ADBError(f"the harness died of {name} on the device (exit {code})")
    said = [line for line in text.splitlines() if line.startswith("tir-harness:")]
    raise ADBError(f"the harness failed (exit {code}): {said[-1] if said else _tail(text)}")


def _pull_outputs(adb: ADB, remote: str, tmp: Path, outs: Sequence[np.ndarray], timeout: float) -> list:
    got_dir = tmp / "got"
    got_dir.mkdir()
    adb.pull([f"{remote}/out{k}.bin" for k in range(len(outs))], got_dir, timeout)
    got = []
    for k, o in enumerate(outs):
        path = got_dir / f"out{k}.bin"
        if not path.exists() or path.stat().st_size != o.nbytes:
            raise ADBError(f"output {k} did not come back from the device whole ({path.name})")
        got.append(np.fromfile(path, o.dtype).reshape(o.shape))
    return got


def _tail(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:300] if lines else "(no output)"
