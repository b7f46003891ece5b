"""Tune zoo models' GPU kernels on a GPU machine that has no compiler toolchain.

The tuner's GPU path is pure Python plus pyopencl and xgboost (no llvmlite, no clang): on the
lent GPU machine, carry the wheels (`.whl/`, see ../shared/TOOLCHAIN.md appendix C: pyopencl,
pytools, siphash24, platformdirs, xgboost-cpu, scipy, sqlite-utils and its deps, tqdm,
networkx), install them into `.site`, and run

    python3 -m benchmarks.gpu_tune mobilenet_v2_224 resnet18 --device nvidia --budget 4m --db $OUT/gpu.db

Each model is one resumable `tir tune` run (the same command continues a killed run; import
earlier records first, `tir db import tuning_logs/<key>.jsonl --db ...`, to go on from them). Then,
back here, `python -m benchmarks.gpu_compare build MODELS --records gpu.db` compiles the tuned
variants next to the untuned ones, and `gpu_compare run` times untuned, tuned and PyTorch
side by side on the GPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    from benchmarks.zoo import build
    from tensorir.cli import main as tir

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--device", default="nvidia")
    ap.add_argument("--budget", default="4m", help="time budget per model (tir tune --time-budget)")
    ap.add_argument("--trials", type=int, default=2000)
    ap.add_argument("--db", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            path = Path(tmp) / f"{name}.onnx"
            path.write_bytes(build(name).SerializeToString())
            t0 = time.perf_counter()
            argv = ["tune", str(path), "--device", args.device, "--db", args.db]
            argv += ["--time-budget", args.budget, "--trials", str(args.trials)]
            argv += ["--no-model-ab"]  # the in-model check compiles the model: no toolchain here
            rc = tir(argv)
            print(f"{name}: tir tune exit {rc} after {time.perf_counter() - t0:.0f} s", flush=True)
            if rc:
                return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
