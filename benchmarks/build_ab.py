"""Two compiled folders of one model, whole, side by side with onnxruntime: how a change to the
compiler itself (not a knob) moves a model. Build A with the old code and B with the new, e.g.

    git worktree add /tmp/old HEAD~1
    (cd /tmp/old && tir compile m.onnx -o /tmp/a)   # then, in this tree: tir compile m.onnx -o /tmp/b
    python -m benchmarks.build_ab /tmp/a /tmp/b --model m.onnx --threads 1 2 --runs 40

A model is a zoo name (benchmarks/zoo.py), a trained model of benchmarks/wild.py or an .onnx
file with static input shapes (its feeds: zoo.sample_inputs, or the drawn page).

Two byte-identical libraries in two files time up to 3-4% apart here, steadily (MobileNetV1,
A B B A order, 40 runs: 1.034, quartiles 1.027-1.049), while six loads of one file agree
within 0.6%: the embedded weights are mapped from the file, so a file's page-cache pages (and
how they sit in the caches and TLBs) come with it. So each folder is copied `--copies` times
(default 3) into fresh files, every copy loaded once, A B A B ..., all run in the same
interleaved rounds with onnxruntime. Prints per thread count the medians, B / A (per round the
mean of B's copies over the mean of A's; the median over rounds, quartiles beside it), and the
spread of A's own copies (slowest / fastest median): a B / A inside it is noise.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np


def ab_ratios(blocks: np.ndarray) -> np.ndarray:
    """Per round, B over A from rounds of (A, B, A, B, ..., onnxruntime): the mean of B's copies
    over the mean of A's."""
    pairs = blocks.shape[1] // 2
    return blocks[:, 1 : 2 * pairs : 2].mean(axis=1) / blocks[:, 0 : 2 * pairs : 2].mean(axis=1)


def main(argv: list[str] | None = None) -> None:
    import onnx

    import tensorir as tir
    from autotune.model_check import placements
    from benchmarks.compare import marked_blocks_beside_ort, split_by_apart
    from benchmarks.layout_storms import model_and_feeds

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="the folder built by the old code")
    ap.add_argument("b", help="the folder built by the new code")
    ap.add_argument("--model", required=True, help="zoo name, wild model name or .onnx file")
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--copies", type=int, default=3, help="fresh file copies of each folder")
    args = ap.parse_args(argv)
    blob, feeds = model_and_feeds(args.model)
    model = onnx.load_from_string(blob)
    with tempfile.TemporaryDirectory() as tmp:
        a_mods, b_mods = (
            placements(tir.load(d), args.copies, Path(tmp), tag) for d, tag in ((args.a, "a"), (args.b, "b"))
        )
        mods = [m for pair in zip(a_mods, b_mods, strict=True) for m in pair]
        for x, y in zip(mods[0].bind(feeds)(), mods[1].bind(feeds)(), strict=True):
            np.testing.assert_allclose(y, x, rtol=1e-3, atol=1e-4, err_msg="A and B disagree")
        for n in args.threads:
            blocks, far = marked_blocks_beside_ort(mods, model, feeds, n, args.runs)
            ms = np.median(blocks, axis=0) * 1e3
            a_ms, b_ms = ms[0:-1:2], ms[1:-1:2]
            ratios = ab_ratios(blocks)
            q = np.percentile(ratios, [25, 50, 75])
            print(
                f"  {n} thread(s): A {a_ms.mean():.3f} ms, B {b_ms.mean():.3f} ms, "
                f"onnxruntime {ms[-1]:.3f} ms; "
                f"B / A {q[1]:.3f} (quartiles {q[0]:.3f}-{q[2]:.3f} over {len(blocks)} rounds); "
                f"A's {args.copies} copies {a_ms.max() / a_ms.min():.3f} apart"
                + split_by_apart(ratios, far, "B / A")
            )


if __name__ == "__main__":
    main()
