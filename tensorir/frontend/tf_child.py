"""TensorFlow in a child process, never in the calling one.

TensorFlow makes its LLVM symbols global when imported, and PoCL (OpenCL on the CPU, which links
LLVM too) fails or crashes in a process that has imported it. So whatever needs TensorFlow runs in
a child Python process (`python -m tensorir.frontend.tf_child`) that sends back plain data:

    load         a SavedModel / .pb / .keras / .h5 read and frozen (tf_load.py): its nodes as plain
                 records, its inputs and outputs; the conversion to the graph IR runs here
    reference    TensorFlow's or tf.lite.Interpreter's outputs for `tir run --compare-ort`
                 (tf_reference.py), the model loaded once, then run per sample

One child per process, started by the first call (a start and the TensorFlow import take about
3.5 s), reused by later ones, ended after IDLE_S without a call (unless a reference is open: it
holds TensorFlow's memory) and with the process (or `close_child()`). A module of ours run by
subprocess rather than multiprocessing's spawn, which would re-import the user's main script.

Protocol: the parent writes pickled requests `(method, args)` to the child's stdin; the child
answers each on its original stdout with a pickled `("ok", value)`, `("error", TirError)` (a user
error, re-raised here as it is: one line, exit 2) or `("bug", traceback text)`. In the child, fd 1
is pointed at stderr, so nothing TensorFlow prints can garble an answer; its stderr goes to a
temporary file whose last line is quoted when the child dies.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

import tensorir
from tensorir.errors import TirError


class TFChild:
    """The child process and its two pipes."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        root = str(Path(tensorir.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (open while the child lives; close())
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tensorir.frontend.tf_child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
        )

    def alive(self) -> bool:
        return self.owner == os.getpid() and self.proc.poll() is None

    def call(self, method: str, *args: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            pickle.dump((method, args), self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.proc.stdin.flush()
            kind, value = pickle.load(self.proc.stdout)
        except (BrokenPipeError, EOFError, pickle.UnpicklingError):
            raise TirError(self._death()) from None
        if kind == "error":
            raise value
        if kind == "bug":
            raise RuntimeError(f"the TensorFlow child process failed ({method}):\n{value}")
        return value

    def _death(self) -> str:
        """What to say when the child ended without an answer (a crash, a kill, out of memory)."""
        rc = self.proc.wait()
        self.log.seek(0)
        lines = [ln for ln in self.log.read().decode(errors="replace").splitlines() if ln.strip()]
        last = f": {lines[-1].strip()}" if lines else ""
        return f"the TensorFlow child process ended unexpectedly (exit status {rc}){last}"

    def close(self) -> None:
        if self.owner != os.getpid():
            return  # a forked copy of the parent: the child is not ours to end
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


IDLE_S = 300.0  # an idle child is ended after this long: it holds TensorFlow's memory (~0.7 GB), and
# a process importing several models compiles each (minutes for a large one) before the next
_lock = threading.Lock()
_child: TFChild | None = None
_uses = 0  # calls so far: an idle timer ends the child only if no call came after it was armed
_open_refs = 0  # open TFReferences: their models live in the child, which then never idles out


def call(method: str, *args: Any) -> Any:
    """Run `method` (one of _methods()) in the shared child, started on first use; its result."""
    global _child, _uses
    with _lock:
        if _child is None or not _child.alive():
            _child = TFChild()
        try:
            return _child.call(method, *args)
        except TirError:
            if not _child.alive():
                _child = None  # died: the next call starts a new one
            raise
        finally:
            _uses += 1
            timer = threading.Timer(IDLE_S, _end_if_idle, (_uses,))
            timer.daemon = True
            timer.start()


def _end_if_idle(uses: int) -> None:
    with _lock:
        if uses == _uses and not _open_refs:
            _close_locked()


def _close_locked() -> None:
    global _child
    child, _child = _child, None
    if child is not None:
        child.close()


def close_child() -> None:
    """End the child process (the next call starts a new one); called at exit."""
    with _lock:
        _close_locked()


atexit.register(close_child)


class TFReference:
    """A model's reference outputs computed in the child (TensorFlow, or tf.lite.Interpreter for
    a .tflite): `ref(feeds)` -> the outputs named `names`, in that order. Close it (or use
    `with`) to free the model there."""

    def __init__(self, path: str | os.PathLike, signature: str, names: Sequence[str]) -> None:
        global _open_refs
        self.names = list(names)
        self.label = "tflite" if Path(path).suffix.lower() == ".tflite" else "tensorflow"
        self.handle = call("reference_open", str(path), signature)
        with _lock:
            self.child = _child
            _open_refs += 1

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        if _child is not self.child:
            raise TirError("--compare-ort: the TensorFlow child process holding the reference ended")
        outs = call("reference_run", self.handle, dict(feeds))
        missing = [n for n in self.names if n not in outs]
        if missing:
            have = ", ".join(sorted(outs))
            raise TirError(f"--compare-ort: the reference has no output '{missing[0]}' (it has {have})")
        return [outs[n] for n in self.names]

    def close(self) -> None:
        global _open_refs
        with _lock:
            child, self.child = self.child, None
            _open_refs -= child is not None
        if child is not None and child is _child and child.alive():
            call("reference_close", self.handle)

    def __enter__(self) -> TFReference:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- the child's side ---------------------------------------------------------------------------
def _methods() -> dict[str, Callable[..., Any]]:
    from tensorir.frontend import tf_load, tf_reference

    return {
        "load": tf_load.load_tf_model,
        "reference_open": tf_reference.open_reference,
        "reference_run": tf_reference.run_reference,
        "reference_close": tf_reference.close_reference,
    }


def _answer(methods: Mapping[str, Callable[..., Any]], method: str, args: Sequence[Any]) -> tuple:
    try:
        return ("ok", methods[method](*args))
    except TirError as e:
        return ("error", e)
    except Exception:
        return ("bug", traceback.format_exc())


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """Answer requests until the parent closes the pipe."""
    methods = _methods()
    while True:
        try:
            method, args = pickle.load(requests)
        except EOFError:
            return
        answers.write(_pickled(_answer(methods, method, args)))
        answers.flush()


def _pickled(answer: tuple) -> bytes:
    try:
        return pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # a result or an error that does not pickle
        return pickle.dumps(("bug", traceback.format_exc()))


def main() -> None:
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what TensorFlow prints goes to the log, not into the answers
    serve(sys.stdin.buffer, answers)
    os._exit(0)  # without TensorFlow's teardown at exit, which takes seconds and saves nothing


if __name__ == "__main__":
    main()
