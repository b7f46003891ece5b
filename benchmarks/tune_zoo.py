"""Tune the zoo models on this CPU and keep the records in tuning_logs/ (issue 16, item 1).

    python -m benchmarks.tune_zoo                              # the compare table's models, 1 and 2 threads
    python -m benchmarks.tune_zoo resnet50 --threads 1 --minutes 10

For each model and thread count it runs, in a fresh process,

    tir tune MODEL.onnx --threads N --time-budget Mm --trials 100000 --db DB

(the whole `tir tune`: search, the records checked inside the model, the whole-model A/B), where
DB starts from this CPU's records in tuning_logs/ (so a model tuned before is resumed, not
redone), and at the end writes DB's records of this CPU back to tuning_logs/<device key>.jsonl
(`tir db export`). Minutes per model and thread count: --minutes, else MINUTES below (the
issue's budget is 30 minutes per model in all). --new-round first deletes the model's
model-level records (layout block, depthwise + 1x1 merge) at each thread count, so `tir tune`
times those choices again with the current kernels instead of keeping an older round's pick.
A resumed model's tasks count their replayed records towards `tir tune --early-stopping` (48
trials without a better config), so they stop within minutes whatever --minutes says;
--early-stopping N passes a larger window on to search for the whole budget.
`python -m benchmarks.compare --tuned` then times untuned, tuned and onnxruntime side by side.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.compare import DEFAULT
from benchmarks.zoo import save

LOGS = Path(__file__).resolve().parent.parent / "tuning_logs"
# search minutes per thread count: more for the models with more distinct kernels
MINUTES = {"resnet50": 8, "bert_encoder": 4, "mobilenet_v2_96": 4}
MINUTES_DEFAULT = 5


def _tir(*args: str) -> None:
    cmd = [sys.executable, "-m", "tensorir.cli", *args]
    print("$ tir " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True)


def _device_logs() -> list[str]:
    from autotune.device_keys import cpu_key
    from tensorir.target import get_target

    key = cpu_key(get_target("host"))
    return sorted(str(p) for p in LOGS.glob(f"{key}*.jsonl"))


def _forget_model_level(db: str, onnx_path: Path, threads: list[int]) -> None:
    """Delete the model's model-level records on this CPU at each thread count."""
    from autotune.database import Database
    from autotune.device_keys import device_key
    from tensorir.compiler import model_key
    from tensorir.target import get_target

    key, store = model_key(onnx_path.read_bytes()), Database(db)
    for n in threads:
        gone = store.forget(key, device_key(get_target("host"), n))
        print(f"{onnx_path.stem} at {n} thread(s): {gone} model-level records dropped", flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help=f"zoo models (default: {' '.join(DEFAULT)})")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--minutes", type=float, help="search minutes per model and thread count")
    p.add_argument("--db", help="tuning database to use and keep (default: a temporary one)")
    p.add_argument("--new-round", action="store_true", help="drop the model-level records first")
    p.add_argument("--early-stopping", type=int, help="tir tune --early-stopping (default: its own)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or str(Path(tmp) / "tuning.db")
        logs = _device_logs()
        if logs:
            _tir("db", "import", "--db", db, *logs)
        for name in args.models or DEFAULT:
            onnx_path = Path(tmp) / f"{name}.onnx"
            save(name, onnx_path)
            minutes = args.minutes or MINUTES.get(name, MINUTES_DEFAULT)
            if args.new_round:
                _forget_model_level(db, onnx_path, args.threads)
            for n in args.threads:
                budget = ["--time-budget", f"{minutes:g}m", "--trials", "100000"]
                if args.early_stopping:
                    budget += ["--early-stopping", str(args.early_stopping)]
                _tir("tune", str(onnx_path), "--threads", str(n), *budget, "--db", db)
                _tir("db", "export", "--db", db, "--out", str(LOGS))


if __name__ == "__main__":
    main()
