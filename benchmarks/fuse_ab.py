"""The depthwise + 1x1 merge (passes/fuse_dwpw.py), whole model, side by side: tensorir
merged, tensorir unmerged and onnxruntime, in the same interleaved rounds.

    python -m benchmarks.fuse_ab mobilenet_v2_224 .wild/ocr_cls.onnx --input-shape x=1,3,48,192

A model is a zoo name (benchmarks/zoo.py) or an .onnx file (the trained models of
`python -m benchmarks.wild fetch` are in .wild/); `--input-shape` fixes symbolic input dims.
Prints per model and thread count the medians, merged / unmerged, merged / onnxruntime and
how many kernels are merged.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _model(name: str):
    import onnx

    from benchmarks.zoo import MODELS, build

    return build(name) if name in MODELS else onnx.load(Path(name))


def _feeds(model, shapes: dict[str, list[int]]):
    """Seeded uniform [0, 1) inputs, of `shapes` where given, else of the model's shapes."""
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString())
    rng = np.random.default_rng(0)
    return {
        i.name: rng.uniform(0, 1, shapes.get(i.name, i.shape)).astype(np.float32) for i in sess.get_inputs()
    }


def _merged(mod) -> int:
    labels = [k["workload"].split(" ")[0] for k in mod.manifest["kernels"]]
    return sum(w.split("+").count("conv2d_nchwc") == 2 for w in labels)


def main(argv: list[str] | None = None) -> None:
    import tensorir as tir
    from benchmarks.compare import beside_ort

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--threads", type=int, nargs="+", default=[1])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=1,3,48,192")
    args = p.parse_args(argv)
    shapes = {k: [int(d) for d in v.split(",")] for k, v in (s.split("=") for s in args.input_shape)}
    head = f"{'model':<20} {'thr':>3} {'merged ms':>10} {'unmerged':>9} {'ort ms':>8} {'m/u':>6} {'m/ort':>6}"
    print(head + " merged")
    for name in args.models:
        model = _model(name)
        feeds = _feeds(model, shapes)
        fixed = {k: list(v.shape) for k, v in feeds.items()}
        on = tir.compile(model, input_shapes=fixed, fuse_dwpw=True)
        off = tir.compile(model, input_shapes=fixed, fuse_dwpw=False)
        for n in args.threads:
            t_on, t_off, t_ort = beside_ort([on, off], model, feeds, n, args.runs)
            print(
                f"{Path(name).stem:<20} {n:>3} {t_on * 1e3:>10.3f} {t_off * 1e3:>9.3f} {t_ort * 1e3:>8.3f} "
                f"{t_on / t_off:>6.3f} {t_on / t_ort:>6.3f} {_merged(on)}"
            )


if __name__ == "__main__":
    main()
