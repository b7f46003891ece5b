"""The TensorFlow child process (tensorir/frontend/tf_child.py): errors raised there reach the user
as the same one-line messages with exit status 2, a child that dies is one line too and the next
call starts a new one, and one child serves every load of a process."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from tensorir.cli import main
from tensorir.errors import TirError
from tensorir.frontend import load_graph_any, tf_child
from tensorir.runtime.reference import run_reference
from tests.frontend.tf_fixtures import save_two_signatures

pytestmark = pytest.mark.tf  # the child needs TensorFlow; the fixture builds with it here


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> str:
    return save_two_signatures(tmp_path_factory.mktemp("tf_child") / "saved")


def _broken_saved_model(folder: Path) -> Path:
    folder.mkdir()
    (folder / "saved_model.pb").write_bytes(b"\x08\x01\x12\x07garbage" * 3)
    return folder


BROKEN = {  # file name -> (writes it, words of the error)
    "truncated.pb": (lambda p: p.write_bytes(b"\x0a\x20\x0a\x05"), "not a valid frozen GraphDef"),
    "foreign.keras": (lambda p: p.write_bytes(b"PK\x03\x04" + bytes(40)), "cannot load the Keras model"),
    "foreign.h5": (lambda p: p.write_bytes(b"not hdf5 at all"), "cannot load the Keras model"),
    "saved": (_broken_saved_model, "cannot load the SavedModel"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_errors_in_the_child_are_one_line_exit_2(name, tmp_path, capsys):
    write, words = BROKEN[name]
    path = tmp_path / name
    write(path)
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(path) in err and words in err, err


def test_unknown_signature_from_the_child(saved_model, capsys):
    assert main(["run", saved_model, "--signature", "nope", "--compare-ort"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no signature 'nope'" in err and "double" in err, err


def test_one_child_serves_every_load(saved_model):
    load_graph_any(saved_model)
    pid = tf_child._child.proc.pid
    g = load_graph_any(saved_model, signature="double")
    assert tf_child._child.proc.pid == pid
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run_reference(g, {"x": x})[0], x * 2)


def test_a_child_that_dies(saved_model):
    child = tf_child.TFChild()
    os.kill(child.proc.pid, signal.SIGKILL)
    with pytest.raises(TirError, match=r"TensorFlow child process ended unexpectedly \(exit status -9\)"):
        child.call("load", saved_model, "serving_default")
    child.close()
    load_graph_any(saved_model)  # the shared child, killed below: the next load starts another
    os.kill(tf_child._child.proc.pid, signal.SIGKILL)
    tf_child._child.proc.wait()
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(run_reference(load_graph_any(saved_model), {"x": x})[0], x + 1)


def test_an_idle_child_ends_unless_a_reference_is_open(saved_model, monkeypatch):
    monkeypatch.setattr(tf_child, "IDLE_S", 0.3)
    load_graph_any(saved_model)
    with tf_child.TFReference(saved_model, "double", ["y"]) as ref:
        time.sleep(1.0)
        x = np.ones((2, 3), np.float32)
        np.testing.assert_array_equal(ref({"x": x})[0], x * 2)  # still there
    deadline = time.monotonic() + 30
    while tf_child._child is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert tf_child._child is None
