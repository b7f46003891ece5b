"""TensorFlow stays out of tensorir's process: it makes its LLVM symbols global when imported, and
PoCL (OpenCL on the CPU, which links LLVM too) then fails or crashes in that process. The TF
frontend loads and freezes models in a child process (tensorir/frontend/tf_child.py).

A fresh Python process imports a Keras model and a SavedModel through tensorir, then compiles and
runs one for PoCL and checks it against Keras; TensorFlow must never have been imported there.
The test process itself has TensorFlow loaded (it builds the models), hence the subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tf  # with the TensorFlow tests (their pytest session: quickstart.sh)

SCRIPT = """
import sys
import numpy as np
import tensorir as tir
from tensorir.frontend import load_graph_any

keras_path, saved_model, x_path, out_path = sys.argv[1:]
load_graph_any(saved_model)
mod = tir.compile(keras_path, target="opencl:pocl")
assert mod.manifest["backend"] == "opencl" and mod.manifest["gpu_kernels"] > 0, mod.manifest
(out,) = mod.run({mod.inputs[0]["name"]: np.load(x_path)})
np.save(out_path, out)
print("tensorflow imported:", "tensorflow" in sys.modules)
"""


def test_a_tensorflow_import_then_pocl_in_one_process(tmp_path: Path) -> None:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((12, 12, 3), name="image")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
    model = keras.Model(inp, keras.layers.GlobalAveragePooling2D()(x))
    model.save(tmp_path / "m.keras")
    model.export(str(tmp_path / "saved"), verbose=False)
    x = np.random.default_rng(0).standard_normal((1, 12, 12, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    argv = [str(tmp_path / f) for f in ("m.keras", "saved", "x.npy", "out.npy")]
    p = subprocess.run([sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    assert "tensorflow imported: False" in p.stdout, p.stdout
    expected = np.asarray(model(x))
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), expected, rtol=1e-4, atol=1e-5)
