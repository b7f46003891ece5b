"""The Winograd-or-direct default (`FLOPS_PER_BYTE` of tensorir/schedule/algorithms/winograd.py)
at several values, whole model, side by side with onnxruntime in the same interleaved rounds.

    python -m benchmarks.winograd_ab resnet18 densenet121 --fpb 8 2 --threads 1 2
    python -m benchmarks.winograd_ab captcha_det --fpb 8 2      # a trained model (benchmarks/wild.py)

A model is a zoo name (benchmarks/zoo.py) or a trained model of benchmarks/wild.py. Each value
compiles its own build in this process; per thread count the builds and onnxruntime run in
`benchmarks.compare`'s interleaved blocks, `--rounds` times. Prints per build the medians of
each round (ms), the kernels per algorithm (the manifest's), and the largest difference of its
outputs from the first build's.
"""

from __future__ import annotations

import argparse
import collections

import numpy as np


def _model(name: str):
    """(model source for tir.compile, input shapes or None, feeds)."""
    from benchmarks.wild import WILD, fetch, input_name
    from benchmarks.zoo import MODELS, build, sample_inputs

    if name in MODELS:
        model = build(name)
        return model, None, sample_inputs(model)
    if name not in WILD:
        raise SystemExit(f"winograd_ab: {name!r} is neither a zoo model nor one of {sorted(WILD)}")
    path = str(fetch([name])[name])
    shape = list(WILD[name].shape)
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    return path, {input_name(path): shape}, {input_name(path): x}


def main(argv: list[str] | None = None) -> None:
    import onnx

    import tensorir as tir
    import tensorir.schedule.algorithms.winograd as winograd
    from benchmarks.compare import _interleaved, _ort_session

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--fpb", type=float, nargs="+", default=[8.0, 2.0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    default = winograd.FLOPS_PER_BYTE
    for name in args.models:
        src, shapes, feeds = _model(name)
        mods = []
        for fpb in args.fpb:
            winograd.FLOPS_PER_BYTE = fpb
            mods.append(tir.compile(src, "host", shapes))
        winograd.FLOPS_PER_BYTE = default
        outs = [m.bind(feeds)() for m in mods]
        onnx_model = onnx.load(src) if isinstance(src, str) else src
        for t in args.threads:
            for m in mods:
                m.set_num_threads(t)
            sess = _ort_session(onnx_model, t)
            fns = [m.bind(feeds) for m in mods] + [lambda s=sess: s.run(None, feeds)]
            rounds = [_interleaved(fns, args.runs, 5) for _ in range(args.rounds)]
            ort = "/".join(f"{r[-1] * 1e3:.2f}" for r in rounds)
            print(f"{name}, {t} thread(s): onnxruntime {ort} ms")
            for k, (fpb, m) in enumerate(zip(args.fpb, mods, strict=True)):
                algos = collections.Counter(str(kn.get("algorithm")) for kn in m.manifest["kernels"])
                err = max(float(np.abs(a - b).max()) for a, b in zip(outs[0], outs[k], strict=True))
                ms = "/".join(f"{r[k] * 1e3:.2f}" for r in rounds)
                print(f"  fpb {fpb:g}: {ms} ms, vs first build {err:.1e}, {dict(sorted(algos.items()))}")


if __name__ == "__main__":
    main()
