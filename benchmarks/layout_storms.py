"""Layout transforms in trained models from the wild: how many, what share of the run, and the
whole model against onnxruntime, untuned, on one thread.

    python -m benchmarks.layout_storms [ocr_cls ocr_det layout_picodet orientation] [--rounds 20]

Per model (benchmarks/wild.py: fetched with pip into .wild/): the kernels of one run, the
`layout_transform` kernels among them and their share of the per-kernel profile (`tir run
--profile`'s medians), and tensorir / onnxruntime whole-model medians of interleaved rounds
(ratio below 1: tensorir faster). Two threads mean something only on an idle machine: this
runs at one.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.wild import WILD, document_image, fetch, input_name


def measure(name: str, rounds: int) -> dict[str, float]:
    import onnxruntime as ort

    import tensorir as tir

    path = fetch([name])[name]
    feeds = {input_name(path): document_image(WILD[name].shape)}
    mod = tir.compile(str(path), input_shapes={k: v.shape for k, v in feeds.items()})
    mod.set_num_threads(1)
    prof = mod.profile(feeds)
    total = sum(p["seconds"] for p in prof)
    lt = [p["seconds"] for p in prof if p["op"] == "layout_transform"]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    ours, theirs = mod.bind(feeds), (lambda: sess.run(None, feeds))
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
        "tensorir_ms": ms[0],
        "onnxruntime_ms": ms[1],
        "ratio": ms[0] / ms[1],
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", default=["ocr_cls", "ocr_det", "layout_picodet", "orientation"])
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args(argv)
    head = f"{'model':<16} {'kernels':>7} {'transforms':>10} {'share':>6}"
    print(head + f" {'tensorir ms':>11} {'ort ms':>8} {'ratio':>6}")
    for name in args.models:
        r = measure(name, args.rounds)
        print(
            f"{name:<16} {r['kernels']:>7} {r['layout_transforms']:>10} {r['transform_share']:>6.1%} "
            f"{r['tensorir_ms']:>11.2f} {r['onnxruntime_ms']:>8.2f} {r['ratio']:>6.2f}"
        )


if __name__ == "__main__":
    main()
