"""`tir run --compare-ort` for the models that are not ONNX: a .tflite is checked against
tf.lite.Interpreter, a SavedModel against TensorFlow (both run in the TensorFlow child process,
tensorir/frontend/tf_child.py), with the figures and tolerance used for ONNX
(tests/cli/test_compare_ort.py): exit 0 on a correct build, 1 when a kernel is made wrong on
purpose (TIR_TEST_BREAK_KERNEL), 2 with one line when TensorFlow is not installed.

A correct fp32 build agrees with the interpreter to a max relative error below 1e-5; the planted
kernel reads the first convolution's input scaled by 1.5, which moves the outputs by more than 10%.
"""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.cli import main
from tensorir.frontend.tf_child import close_child
from tensorir.planted_bug import ENV
from tests.cli.test_compare_ort import _cli, _figures
from tests.frontend import tflite_cases as tc
from tests.frontend.tf_fixtures import save_two_signatures

pytestmark = pytest.mark.tf  # TensorFlow in the process: a session of its own (quickstart.sh)


@pytest.fixture(scope="module")
def tflite_model(tmp_path_factory) -> str:
    """conv + relu, 1x1 conv + relu, mean over H, W, matmul: float32, seeded weights."""
    tf = tc._tf()
    rng = np.random.default_rng(0)
    shapes = ((3, 3, 3, 8), (1, 1, 8, 8), (8, 5))
    w1, w2, fc = (tf.constant(rng.standard_normal(s).astype(np.float32) * 0.5) for s in shapes)

    def fn(x):
        y = tf.nn.relu(tf.nn.conv2d(tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME")), w2, 1, "SAME"))
        return tf.matmul(tf.reduce_mean(y, axis=[1, 2]), fc)

    path = tmp_path_factory.mktemp("compare_tf") / "small.tflite"
    path.write_bytes(tc.convert_function(fn, [(1, 12, 12, 3)]))
    return str(path)


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> str:
    """serving_default: y = x + 1, double: y = x * 2."""
    return save_two_signatures(tmp_path_factory.mktemp("compare_tf") / "saved")


@pytest.fixture(autouse=True)
def _no_planted_bug(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


@pytest.mark.parametrize("backend", ["compiled", "ref"])
def test_tflite_matches_the_interpreter(tflite_model, backend, capsys):
    rc, err, out = _cli(["run", tflite_model, "--backend", backend, "--compare-ort"], capsys)
    assert rc == 0, err
    assert ("for host:" in out) == (backend == "compiled")
    (figs,) = _figures(out)
    assert figs["ok"] and figs["rel"] < 1e-5 and figs["cosine"] > 0.99999 and figs["sqnr"] > 80
    assert " vs tflite: " in out
    assert "compare-ort: ok: 1 outputs within rtol=0.001 atol=0.0001 min-cosine=0.9999" in out


def test_tflite_with_a_broken_kernel_fails(tflite_model, monkeypatch, capsys):
    monkeypatch.setenv(ENV, "conv")
    rc, err, out = _cli(["run", tflite_model, "--records", "none", "--compare-ort"], capsys)
    assert rc == 1, (err, out)
    (figs,) = _figures(out)
    assert not figs["ok"] and figs["rel"] > 0.1
    assert "compare-ort: FAIL: 1 of 1 outputs outside" in out


def test_compiled_folder_is_compared_with_its_tflite_source(tflite_model, tmp_path, capsys):
    folder = str(tmp_path / "build")
    assert main(["compile", tflite_model, "--records", "none", "-o", folder]) == 0
    capsys.readouterr()
    rc, err, out = _cli(["run", folder, "--compare-ort"], capsys)
    assert rc == 0, err
    (figs,) = _figures(out)
    assert figs["ok"] and figs["rel"] < 1e-5 and " vs tflite: " in out


def test_saved_model_signature_matches_tensorflow(saved_model, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], np.float32))
    argv = ["run", saved_model, "--signature", "double", "--input", f"x={tmp_path / 'x.npy'}"]
    rc, err, out = _cli([*argv, "--compare-ort", "--save", str(tmp_path / "out")], capsys)
    assert rc == 0, err
    (figs,) = _figures(out)
    assert figs["ok"] and figs["abs"] == 0 and " vs tensorflow: " in out
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), [[2, -4, 6], [-8, 10, -12]])


def test_without_tensorflow_one_line_exit_2(tflite_model, tmp_path, monkeypatch, capsys):
    fake = tmp_path / "no_tf" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named tensorflow')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))  # the child finds this package first
    close_child()  # a child started before would have TensorFlow already
    try:
        rc, err, out = _cli(["run", tflite_model, "--compare-ort"], capsys)
    finally:
        monkeypatch.undo()
        close_child()
    assert rc == 2, (err, out)
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "tf.lite.Interpreter" in err and "pip install 'tensorir[tf]'" in err, err
    assert "compiled" not in out  # refused before compiling
