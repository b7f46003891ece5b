"""A trained model from a public package, whole, side by side: tensorir untuned, tensorir with
a tuning database's records, and onnxruntime, one thread each, timed in interleaved rounds.

    python -m benchmarks.wild_ab orientation --records tune.db [--rounds 300]

(tune first: `tir tune .wild/orientation.onnx --input-shape x=1,3,224,224 --threads 1 --db tune.db`;
models and shapes: benchmarks/wild.py.)
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    import onnxruntime as ort

    import tensorir as tir
    from autotune.database import Database
    from autotune.records import Records
    from benchmarks.wild import WILD, fetch, input_name

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", choices=sorted(WILD))
    ap.add_argument("--records", required=True, help="the tuning database of `tir tune --threads 1`")
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    path = str(fetch([args.model])[args.model])
    name, shape = input_name(path), list(WILD[args.model].shape)
    (device,) = [d for d in Database(args.records).devices() if d.endswith("-t1")]
    recs = Records.open(args.records, False, device=device)
    mods = [tir.compile(path, "host", {name: shape}, records=r) for r in (None, recs)]
    for m in mods:
        m.set_num_threads(1)
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so)
    want = sess.run(None, {name: x})[0]
    print("max |err| vs onnxruntime:", [float(np.abs(m.run({name: x})[0] - want).max()) for m in mods])
    calls = [m.bind({name: x}) for m in mods] + [lambda: sess.run(None, {name: x})]
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(10):
        for c in calls:
            c()
    for _ in range(args.rounds):
        for k, c in enumerate(calls):
            t0 = time.perf_counter()
            c()
            times[k].append(time.perf_counter() - t0)
    plain, tuned, peer = (float(np.median(t)) * 1e3 for t in times)
    print(
        f"{args.model}: untuned {plain:.3f} ms, tuned {tuned:.3f} ms, onnxruntime {peer:.3f} ms; "
        f"untuned/ORT {plain / peer:.2f}, tuned/ORT {tuned / peer:.2f} (1 thread, {args.rounds} rounds)"
    )


if __name__ == "__main__":
    main()
