"""TensorFlow and PoCL in one process: TensorFlow makes its LLVM symbols global when imported,
and PoCL (which links LLVM) loaded after it crashed the process (SIGSEGV in clGetPlatformIDs,
seen in a test worker that had imported TensorFlow first). The TF frontend loads the OpenCL
drivers before it imports TensorFlow (tensorir.devices.preload_opencl)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.tf  # with the TensorFlow tests (their pytest session: quickstart.sh)

SCRIPT = """
from tensorir.frontend.tensorflow import import_tf
tf = import_tf()
assert float(tf.constant(1.0) + 1) == 2.0
from tensorir.devices import select_device
print("device:", select_device().name)
"""


def test_a_tensorflow_import_then_an_opencl_device_in_one_process():
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    assert "device:" in p.stdout
