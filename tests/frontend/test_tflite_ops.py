"""TFLite frontend, op by op: one small tf.function per converter (TFLiteConverter, float32),
imported and checked against the TFLite interpreter on the reference path and compiled for the
host; input shapes; the one-line errors for bad files, unsupported and custom ops; and a full
int8 model importing (test_tflite_int8.py covers int8 in depth)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from tensorir.errors import ModelError, UnsupportedOpError
from tensorir.frontend.tflite import from_tflite, read_tflite
from tensorir.graph.graph import Graph
from tensorir.pipeline import compile_graph, load_folder
from tensorir.runtime.reference import run_reference
from tests.frontend import tflite_cases as tc

pytestmark = pytest.mark.tf  # TensorFlow in the process: a session of its own (quickstart.sh)


@pytest.fixture(scope="session")
def tflite_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return tc.build_all(tmp_path_factory.getbasetemp() / "tflite")


def _outputs(g: Graph, outs: list) -> dict:
    return {name: o for (name, _), o in zip(g.outputs, outs, strict=True)}


@pytest.mark.parametrize("name", tc.OP_CASES)
def test_op_reference_and_compiled_match_interpreter(tflite_files, name):
    path = tflite_files[name]
    feeds = tc.seeded_inputs(path)
    refs = tc.interpret(path, feeds)
    g = from_tflite(path)
    tc.close(_outputs(g, run_reference(g, feeds)), refs)
    module = load_folder(compile_graph(g, "host").write(tempfile.mkdtemp(prefix="tir-tflite-")))
    tc.close(_outputs(g, module.run(feeds)), refs)


def test_cases_convert_to_their_builtins(tflite_files):
    for name, builtins in tc.CASE_BUILTINS.items():
        codes = {op.code for op in read_tflite(tflite_files[name]).ops}
        assert builtins <= codes, (name, sorted(codes))


def test_input_shapes_replace_the_stored_shape(tflite_files):
    path = tflite_files["conv_same_stride2_relu"]
    (name,) = tc.seeded_inputs(path)
    feeds = {name: np.random.default_rng(3).standard_normal((2, 12, 10, 4)).astype(np.float32)}
    g = from_tflite(path, input_shapes={name: (2, 12, 10, 4)})
    tc.close(_outputs(g, run_reference(g, feeds)), tc.interpret(path, feeds, resize=True))
    with pytest.raises(ModelError, match="names 'nope', which is not a model input"):
        from_tflite(path, input_shapes={"nope": (1, 2, 3, 4)})


def test_bad_files_are_one_line_errors(tflite_files, tmp_path):
    good = tflite_files["conv_same_stride2_relu"].read_bytes()
    cases = {
        "truncated.tflite": good[: len(good) // 3],
        "foreign.tflite": b"\x08\x07\x12\x04onnx" + bytes(64),
        "empty.tflite": b"",
    }
    for fname, data in cases.items():
        (tmp_path / fname).write_bytes(data)
        with pytest.raises(ModelError) as e:
            from_tflite(tmp_path / fname)
        assert str(tmp_path / fname) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ModelError, match="no such file"):
        from_tflite(tmp_path / "missing.tflite")
    with pytest.raises(ModelError, match="is a directory"):
        from_tflite(tmp_path)


def test_unsupported_and_custom_ops_are_listed(tflite_files):
    with pytest.raises(UnsupportedOpError) as e:
        from_tflite(tflite_files["unsupported"])
    msg = str(e.value)
    assert "unsupported TFLite ops: " in msg and "CUMSUM (op #" in msg and "\n" not in msg
    with pytest.raises(UnsupportedOpError, match=r"custom op 'Igamma' \(op #\d+\)"):
        from_tflite(tflite_files["custom"])


def test_int8_model_imports(tflite_files):
    """A full int8 model (once refused) imports: within one output step of the interpreter."""
    path = tflite_files["int8"]
    feeds = tc.seeded_inputs(path)
    refs = tc.interpret(path, feeds)
    g = from_tflite(path)
    for name, out in _outputs(g, run_reference(g, feeds)).items():
        assert out.dtype == refs[name].dtype == np.int8
        assert np.max(np.abs(out.astype(int) - refs[name].astype(int))) <= 1
