"""The recurrent and audio models of benchmarks/wild_rnn.py timed against onnxruntime: the
whole model on its check's input, untuned, timed in the interleaved blocks of
benchmarks/compare.py (a pause, an untimed run, BLOCK timed runs, per runtime in turn),
medians, at each thread count.

    python -m benchmarks.wild_rnn_speed                    # every model, 1 and 2 threads
    python -m benchmarks.wild_rnn_speed vad_sequence vad --threads 1 --runs 50

vad is Silero's streaming model: one 32 ms frame per call (sr given at import, onnxruntime
gets it as an input). Ratio = tensorir / onnxruntime (below 1: tensorir faster).
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks import wild_rnn
from benchmarks.compare import _interleaved


def _ort(path, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def time_model(name: str, threads: list[int], runs: int) -> list[tuple[int, float, float]]:
    """(threads, tensorir seconds, onnxruntime seconds) per thread count."""
    path = wild_rnn.fetch([name])[name]
    feeds = wild_rnn.sample_feeds(name)
    ort_feeds = {**feeds, "sr": np.array(wild_rnn.RATE, np.int64)} if name == "vad" else feeds
    mod = wild_rnn.compile_model(name, path)
    rows = []
    for n in threads:
        mod.set_num_threads(n)
        sess = _ort(path, n)
        ours, theirs = _interleaved([mod.bind(feeds), lambda s=sess: s.run(None, ort_feeds)], runs, 5)
        rows.append((n, ours, theirs))
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", default=list(wild_rnn.MODELS))
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args(argv)
    print(f"{'model':<14} {'thr':>3} {'tensorir ms':>11} {'ort ms':>8} {'ratio':>6}")
    for name in args.models:
        for n, ours, theirs in time_model(name, args.threads, args.runs):
            ms = f"{ours * 1e3:>11.3f} {theirs * 1e3:>8.3f}"
            print(f"{name:<14} {n:>3} {ms} {ours / theirs:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
