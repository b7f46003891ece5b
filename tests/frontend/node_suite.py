"""Which of ONNX's node tests cover the op types tensorir supports, and which are excluded."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import onnx

from tensorir.errors import UnsupportedOpError
from tensorir.frontend.onnx import check_supported

NODE_DATA = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "node"
HERE = Path(__file__).parent


@functools.cache
def supported_node_tests() -> list[str]:
    """Node tests whose model uses only op types in the converter table, or ONNX function
    ops that expand into them."""
    names = []
    for d in sorted(NODE_DATA.iterdir()):
        model = onnx.load(str(d / "model.onnx"), load_external_data=False)
        try:
            check_supported(model)
        except UnsupportedOpError:
            continue
        names.append(d.name)
    return names


def excluded_tests(pattern: str = "node_test_exclusions.txt") -> dict[str, str]:
    """test name -> reason, from the exclusion files beside this one matching `pattern`
    (one test a line: `name  # reason`)."""
    out = {}
    text = "\n".join(p.read_text() for p in sorted(HERE.glob(pattern)))
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition("#")
            out[name.strip()] = reason.strip()
    return out
