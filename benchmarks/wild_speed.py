"""Trained models from the wild timed against their own runtime: the recurrent and audio ONNX
models of benchmarks/wild_rnn.py against onnxruntime, the .tflite models of
benchmarks/wild_tf.py against TensorFlow Lite's interpreter (tf.lite.Interpreter, its default
XNNPACK delegate). The whole model on its check's input, untuned, in the interleaved blocks of
benchmarks/compare.py (a pause, an untimed run, BLOCK timed runs, per runtime in turn),
medians, at each thread count (both runtimes get the same count).

    python -m benchmarks.wild_speed                        # every model, 1 and 2 threads
    python -m benchmarks.wild_speed vad_sequence face_detection --threads 1 --runs 50

vad is Silero's streaming model: one 32 ms frame per call (sr given at import, onnxruntime
gets it as an input). Ratio = tensorir / the peer (below 1: tensorir faster). The layout-storm
models of benchmarks/wild.py are timed by benchmarks/layout_storms.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import onnx

from benchmarks import wild_rnn, wild_tf
from benchmarks.compare import _interleaved, _ort_session

TFLITE = [name for name, m in wild_tf.PUBLIC.items() if m.local.endswith(".tflite")]


def _tflite(path, x: np.ndarray, threads: int) -> Callable[[], object]:
    import tensorflow as tf

    it = tf.lite.Interpreter(model_path=str(path), num_threads=threads)
    (inp,) = it.get_input_details()
    if tuple(inp["shape"]) != x.shape:
        it.resize_tensor_input(inp["index"], x.shape)
    it.allocate_tensors()

    def run() -> None:
        it.set_tensor(inp["index"], x)
        it.invoke()

    return run


def _onnx_case(name: str):
    path = wild_rnn.fetch([name])[name]
    feeds = wild_rnn.sample_feeds(name)
    ort_feeds = {**feeds, "sr": np.array(wild_rnn.RATE, np.int64)} if name == "vad" else feeds
    mod = wild_rnn.compile_model(name, path)

    model = onnx.load(str(path))

    def peer(n: int) -> Callable[[], object]:
        sess = _ort_session(model, n)
        return lambda: sess.run(None, ort_feeds)

    return mod, feeds, peer


def _tflite_case(name: str):
    import tensorir as tir

    path = wild_tf.fetch([name])[name]
    x = wild_tf.PUBLIC[name].input()
    mod = tir.compile(str(path))
    return mod, {mod.inputs[0]["name"]: x}, lambda n: _tflite(path, x, n)


def time_model(name: str, threads: list[int], runs: int) -> list[tuple[int, float, float]]:
    """(threads, tensorir seconds, the peer's seconds) per thread count."""
    mod, feeds, peer = _tflite_case(name) if name in TFLITE else _onnx_case(name)
    rows = []
    for n in threads:
        mod.set_num_threads(n)
        ours, theirs = _interleaved([mod.bind(feeds), peer(n)], runs, 5)
        rows.append((n, ours, theirs))
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", default=[*wild_rnn.MODELS, *TFLITE])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--runs", type=int, default=20)
    args = p.parse_args(argv)
    print(f"{'model':<20} {'peer':<12} {'thr':>3} {'tensorir ms':>11} {'peer ms':>8} {'ratio':>6}")
    for name in args.models:
        peer = "tflite" if name in TFLITE else "onnxruntime"
        for n, ours, theirs in time_model(name, args.threads, args.runs):
            ms = f"{ours * 1e3:>11.3f} {theirs * 1e3:>8.3f}"
            print(f"{name:<20} {peer:<12} {n:>3} {ms} {ours / theirs:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
