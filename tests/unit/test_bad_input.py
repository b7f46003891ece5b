"""Every kind of bad input is one line naming the culprit, exit status 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorir.cli import main


def _tiny_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    w = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    node = helper.make_node("Add", ["x", "w"], ["y"], name="add0")
    return helper.make_model(helper.make_graph([node], "tiny", [x], [y], [w]))


def _save(model: onnx.ModelProto, path) -> str:
    path.write_bytes(model.SerializeToString())
    return str(path)


def _run_cli(argv: list[str], capsys) -> tuple[int, str]:
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    return rc, err


def _assert_one_line(rc: int, err: str, *words: str) -> None:
    assert rc == 2
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for w in words:
        assert w in err, (w, err)


def test_truncated_file(tmp_path, capsys):
    data = _tiny_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    _assert_one_line(*_run_cli(["run", str(path)], capsys), "cut.onnx")


def test_not_onnx(tmp_path, capsys):
    path = tmp_path / "notes.onnx"
    path.write_text("this is a text file, not a model\n" * 10)
    _assert_one_line(*_run_cli(["inspect", str(path)], capsys), "notes.onnx", "not a valid ONNX")


def test_cycle(tmp_path, capsys):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
    ]
    model = helper.make_model(helper.make_graph(nodes, "loop", [x], [y]))
    _assert_one_line(*_run_cli(["run", _save(model, tmp_path / "c.onnx")], capsys), "cycle", "first")


def test_missing_initializer(tmp_path, capsys):
    model = _tiny_model()
    del model.graph.initializer[:]
    _assert_one_line(*_run_cli(["run", _save(model, tmp_path / "m.onnx")], capsys), "add0", "'w'")


def test_wrong_input_shape(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((3, 3), np.float32))
    argv = ["run", _save(_tiny_model(), tmp_path / "t.onnx"), "--input", f"x={tmp_path / 'x.npy'}"]
    _assert_one_line(*_run_cli(argv, capsys), "'x'", "[3, 3]", "[1, 4]")


def test_unknown_input_name(tmp_path, capsys):
    np.save(tmp_path / "z.npy", np.zeros((1, 4), np.float32))
    argv = ["run", _save(_tiny_model(), tmp_path / "t.onnx"), "--input", f"zz={tmp_path / 'z.npy'}"]
    _assert_one_line(*_run_cli(argv, capsys), "'zz'", "['x']")


def test_unsupported_ops_listed_together(tmp_path, capsys):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [
        helper.make_node("Frobnicate", ["x"], ["a"], name="f1", domain="com.example"),
        helper.make_node("Frobnicate", ["a"], ["b"], name="f2", domain="com.example"),
        helper.make_node("StringNormalizer", ["b"], ["y"], name="norm"),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "u", [x], [y]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
    )
    rc, err = _run_cli(["run", _save(model, tmp_path / "u.onnx")], capsys)
    _assert_one_line(rc, err, "com.example.Frobnicate x2", "f1", "StringNormalizer x1", "norm")


def test_symbolic_dim_needs_input_shape(tmp_path, capsys):
    model = _tiny_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    path = _save(model, tmp_path / "s.onnx")
    _assert_one_line(*_run_cli(["run", path], capsys), "'x'", "batch", "--input-shape")
    assert main(["run", path, "--input-shape", "x=1,4"]) == 0


@pytest.mark.parametrize("debug", ["0", "1"])
def test_process_exit_status_and_traceback_switch(tmp_path, debug):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x00\x01garbage")
    env = dict(os.environ, TIR_DEBUG=debug)
    proc = subprocess.run(
        [sys.executable, "-m", "tensorir.cli", "run", str(path)], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2
    assert ("Traceback" in proc.stderr) == (debug == "1")
    assert proc.stderr.strip().splitlines()[-1].startswith("tir run: error:")


def test_inspect_plan_reports_workspace_bounds(tmp_path, capsys):
    assert main(["inspect", _save(_tiny_model(), tmp_path / "t.onnx"), "--plan"]) == 0
    out = capsys.readouterr().out
    assert "workspace allocated" in out and "no-reuse total" in out and "lower bound" in out
