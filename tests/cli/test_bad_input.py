"""Bad input that used to crash or pass silently (issue 14, item 3): each case is one line on
stderr naming the file, node or option, exit status 2, and no traceback."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorir.tools.compile
from tensorir.cli import main


@pytest.fixture(scope="module", autouse=True)
def _own_cache(tmp_path_factory):
    """Compiled kernels and tuning databases go to a temporary folder, never ~/.cache/tensorir."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIR_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("TIR_DEBUG", raising=False)
        yield


def _vi(name: str, dims: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def _model(nodes=None, outputs=("y",), x_dims=(1, 4)) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    nodes = nodes or [helper.make_node("Add", ["x", "w"], ["y"], name="add0")]
    outs = [_vi(o, [1, 4]) for o in outputs]
    graph = helper.make_graph(nodes, "g", [_vi("x", list(x_dims))], outs, [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _save(model: onnx.ModelProto, path) -> str:
    path.write_bytes(model.SerializeToString())
    return str(path)


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.err.strip(), captured.out


def _refused(argv: list[str], capsys, *words: str) -> str:
    """Run the CLI; it must exit 2 with one stderr line holding every word. Returns stdout."""
    rc, err, out = _cli(argv, capsys)
    assert rc == 2, (rc, err)
    assert err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for w in words:
        assert w in err, (w, err)
    return out


def _argv(command: str, model: str, tmp_path) -> list[str]:
    return [command, model] + (["-o", str(tmp_path / "build")] if command == "compile" else [])


@pytest.fixture
def no_compile(monkeypatch):
    """Fails the test if `tir compile` gets as far as compiling."""

    def refuse(*args, **kwargs):
        raise AssertionError("compiled before checking its arguments")

    monkeypatch.setattr(tensorir.tools.compile, "compile_model", refuse)


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, str]:
    """The tiny model compiled for the host."""
    return _build(tmp_path_factory, "host")


def _build(tmp_path_factory, target: str) -> dict[str, str]:
    d = tmp_path_factory.mktemp("builds")
    model = _save(_model(), d / "tiny.onnx")
    out = {"model": model, target: str(d / target)}
    assert main(["compile", model, "--target", target, "--records", "none", "-o", out[target]]) == 0
    return out


# ---- malformed graphs -------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["run", "inspect", "compile"])
def test_graph_output_produced_by_no_node(command, tmp_path, capsys):
    model = _save(_model(outputs=("y", "z")), tmp_path / "m.onnx")
    _refused(_argv(command, model, tmp_path), capsys, "graph output 'z'", "produced by no node")


@pytest.mark.parametrize("command", ["run", "inspect", "compile"])
def test_node_input_that_names_nothing(command, tmp_path, capsys):
    nodes = [helper.make_node("Add", ["x", "w_typo"], ["y"], name="add0")]
    model = _save(_model(nodes), tmp_path / "m.onnx")
    _refused(_argv(command, model, tmp_path), capsys, "node 'add0'", "'w_typo'")


@pytest.mark.parametrize("command", ["run", "inspect", "compile"])
def test_graph_output_listed_twice(command, tmp_path, capsys):
    model = _save(_model(outputs=("y", "y")), tmp_path / "m.onnx")
    _refused(_argv(command, model, tmp_path), capsys, "graph output 'y'", "listed twice")


# ---- tir compile: paths checked before any work ------------------------------------------------
def test_compile_missing_model(tmp_path, capsys, no_compile):
    missing = str(tmp_path / "nope.onnx")
    _refused(["compile", missing, "-o", str(tmp_path / "x")], capsys, missing, "no such file")


def test_compile_a_folder_as_model(tmp_path, capsys, no_compile):
    _refused(["compile", str(tmp_path), "-o", str(tmp_path / "x")], capsys, str(tmp_path), "is a directory")


def test_compile_output_is_an_existing_file(tmp_path, capsys, no_compile):
    model = _save(_model(), tmp_path / "m.onnx")
    (tmp_path / "taken").write_text("keep me")
    _refused(["compile", model, "-o", str(tmp_path / "taken")], capsys, "-o", "taken", "is a file")
    assert (tmp_path / "taken").read_text() == "keep me"


def test_compile_output_below_a_file(tmp_path, capsys, no_compile):
    model = _save(_model(), tmp_path / "m.onnx")
    (tmp_path / "taken").write_text("")
    _refused(["compile", model, "-o", str(tmp_path / "taken" / "sub")], capsys, "taken", "is a file")


# ---- tir run DIR: the folder's manifest -------------------------------------------------------
def test_run_folder_without_manifest(tmp_path, capsys):
    _refused(["run", str(tmp_path)], capsys, str(tmp_path), "no manifest.json")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{not json", ["manifest.json", "not valid JSON"]),
        ("[1, 2]", ["manifest.json", "expected a JSON object"]),
        ("{}", ["manifest.json", "'target'"]),
        (
            json.dumps({"target": "host", "triple": "x86_64-unknown-linux-gnu", "library": "libmodel.so"}),
            ["manifest.json", "'inputs'"],
        ),
        (
            json.dumps(
                {
                    "target": "host",
                    "triple": "x86_64-unknown-linux-gnu",
                    "library": "libmodel.so",
                    "inputs": [{"name": "x"}],
                    "outputs": [],
                    "kernels": [],
                }
            ),
            ["manifest.json", "name, shape and dtype"],
        ),
        (
            json.dumps(
                {
                    "target": "host",
                    "triple": "x86_64-unknown-linux-gnu",
                    "library": "libmodel.so",
                    "inputs": [],
                    "outputs": [],
                    "kernels": [],
                }
            ),
            ["manifest.json", "'libmodel.so' is missing"],
        ),
    ],
)
def test_run_folder_with_broken_manifest(text, words, tmp_path, capsys):
    (tmp_path / "manifest.json").write_text(text)
    _refused(["run", str(tmp_path)], capsys, *words)


# ---- --input-shape and --override-shape ---------------------------------------------------------
@pytest.mark.parametrize("command", ["run", "inspect", "compile"])
def test_input_shape_may_not_change_a_static_dim(command, tmp_path, capsys):
    model = _save(_model(), tmp_path / "m.onnx")
    argv = [*_argv(command, model, tmp_path), "--input-shape", "x=2,4"]
    _refused(argv, capsys, "--input-shape x=2,4", "input 'x'", "[1, 4]", "--override-shape")


def test_input_shape_may_not_change_the_rank_of_a_symbolic_input(tmp_path, capsys):
    model = _save(_model(x_dims=("N", 4)), tmp_path / "m.onnx")
    _refused(["run", model, "--input-shape", "x=1,4,1"], capsys, "input 'x'", "[N, 4]", "--override-shape")


def test_input_array_may_not_change_a_static_dim_of_a_symbolic_input(tmp_path, capsys):
    model = _save(_model(x_dims=("N", 4)), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.zeros((2, 5), np.float32))
    argv = ["run", model, "--input", f"x={tmp_path / 'x.npy'}"]
    _refused(argv, capsys, "--input x", "[2, 5]", "[N, 4]", "--override-shape")


def test_override_shape_lets_input_shape_change_static_dims(tmp_path, capsys):
    model = _save(_model(), tmp_path / "m.onnx")
    rc, err, out = _cli(["run", model, "--input-shape", "x=2,4", "--override-shape"], capsys)
    assert rc == 0, err
    assert "y: float32[2, 4]" in out


def test_override_shape_that_onnxruntime_refuses(tmp_path, capsys):
    model = _save(_model(), tmp_path / "m.onnx")
    argv = ["run", model, "--input-shape", "x=2,4", "--override-shape", "--compare-ort"]
    _refused(argv, capsys, "--compare-ort", "onnxruntime refuses")


# ---- --input dtypes ---------------------------------------------------------------------------
@pytest.mark.parametrize("compare", [[], ["--compare-ort"]])
def test_int_npy_for_a_float_input(compare, tmp_path, capsys):
    model = _save(_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.int32))
    argv = ["run", model, "--input", f"x={tmp_path / 'x.npy'}", *compare]
    _refused(argv, capsys, "input 'x'", "float32", "int32")


def test_int_npy_for_a_float_input_of_a_compiled_folder(builds, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.int32))
    argv = ["run", builds["host"], "--input", f"x={tmp_path / 'x.npy'}", "--compare-ort"]
    _refused(argv, capsys, "input 'x'", "float32", "int32")


def test_float64_npy_for_a_float32_input_is_cast(tmp_path, capsys):
    model = _save(_model(), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.float64))
    rc, err, out = _cli(["run", model, "--input", f"x={tmp_path / 'x.npy'}", "--compare-ort"], capsys)
    assert rc == 0, err
    assert "max_abs_err=0" in out


def test_missing_npy_for_a_compiled_folder(builds, tmp_path, capsys):
    missing = str(tmp_path / "x.npy")
    _refused(["run", builds["host"], "--input", f"x={missing}"], capsys, missing, "cannot read")


# ---- options accepted silently before ----------------------------------------------------------
def test_compile_unknown_device_names_the_devices_with_records(tmp_path, capsys, no_compile):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "x86_64-skylake-avx512.jsonl").write_text("")
    model = _save(_model(), tmp_path / "m.onnx")
    argv = ["compile", model, "--device", "foo", "--records", str(logs), "-o", str(tmp_path / "b")]
    _refused(argv, capsys, "--device 'foo'", "x86_64-skylake-avx512")


def test_compile_device_without_records(tmp_path, capsys, no_compile):
    model = _save(_model(), tmp_path / "m.onnx")
    argv = ["compile", model, "--device", "foo", "--records", "none", "-o", str(tmp_path / "b")]
    _refused(argv, capsys, "--device 'foo'", "--records none")


def test_run_negative_threads(builds, capsys):
    _refused(["run", builds["host"], "--threads", "-1"], capsys, "--threads -1")


@pytest.mark.arm64  # linking for linux-arm64 needs the aarch64 glibc (libc6-dev-arm64-cross)
def test_profile_of_a_linux_arm64_build_is_refused_before_running(tmp_path_factory, capsys):
    builds = _build(tmp_path_factory, "linux-arm64")
    capsys.readouterr()  # the compile's own lines
    out = _refused(["run", builds["linux-arm64"], "--profile"], capsys, builds["linux-arm64"], "--profile")
    assert out == ""  # refused up front: no output was computed
