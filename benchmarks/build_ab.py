"""Two compiled folders of one model, whole, side by side with onnxruntime: how a change to the
compiler itself (not a knob) moves a model. Build A with the old code and B with the new, e.g.

    git worktree add /tmp/old HEAD~1
    (cd /tmp/old && tir compile m.onnx -o /tmp/a)   # then, in this tree: tir compile m.onnx -o /tmp/b
    python -m benchmarks.build_ab /tmp/a /tmp/b --model m.onnx --threads 1 2 --runs 40

A model is a zoo name (benchmarks/zoo.py), a trained model of benchmarks/wild.py or an .onnx
file with static input shapes (its feeds: zoo.sample_inputs, or the drawn page). Each folder is
loaded twice, in the order A B B A, so that neither build always gets the second load's
offset (identical libraries loaded one after the other time 2-4% apart on the Zen 4 VM); all
four and onnxruntime run in the same interleaved rounds. Prints per thread count the medians
and B / A: the median over rounds of B's two loads over A's two (quartiles beside it).
"""

from __future__ import annotations

import argparse

import numpy as np


def ab_ratios(blocks: np.ndarray) -> np.ndarray:
    """Per round, B over A from rounds of (A, B, B again, A again, ...): the mean of B's two
    loads over the mean of A's two."""
    return (blocks[:, 1] + blocks[:, 2]) / (blocks[:, 0] + blocks[:, 3])


def main(argv: list[str] | None = None) -> None:
    import onnx

    import tensorir as tir
    from benchmarks.compare import blocks_beside_ort
    from benchmarks.layout_storms import model_and_feeds

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="the folder built by the old code")
    ap.add_argument("b", help="the folder built by the new code")
    ap.add_argument("--model", required=True, help="zoo name, wild model name or .onnx file")
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args(argv)
    blob, feeds = model_and_feeds(args.model)
    model = onnx.load_from_string(blob)
    mods = [tir.load(d) for d in (args.a, args.b, args.b, args.a)]
    ref = mods[0].bind(feeds)()
    for x, y in zip(ref, mods[1].bind(feeds)(), strict=True):
        np.testing.assert_allclose(y, x, rtol=1e-3, atol=1e-4, err_msg="A and B disagree")
    for n in args.threads:
        blocks = blocks_beside_ort(mods, model, feeds, n, args.runs)
        ms = np.median(blocks, axis=0) * 1e3
        q = np.percentile(ab_ratios(blocks), [25, 50, 75])
        print(
            f"  {n} thread(s): A {ms[0]:.3f} / {ms[3]:.3f} ms, B {ms[1]:.3f} / {ms[2]:.3f} ms, "
            f"onnxruntime {ms[4]:.3f} ms; B / A {q[1]:.3f} (quartiles {q[0]:.3f}-{q[2]:.3f} "
            f"over {len(blocks)} rounds)"
        )


if __name__ == "__main__":
    main()
