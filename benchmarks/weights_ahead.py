"""How much of a whole-model run waits for weights to come from memory.

    python -m benchmarks.weights_ahead resnet50 --rounds 15
    python -m benchmarks.weights_ahead mobilenet_v1 --threads 1 --top 10

Every kernel is called in model order over the model's own memory (`Module.kernel_calls`, as
`Module.profile` does), in rounds of three passes that take turns: a plain pass, a pass that
first reads each kernel's weights (its `weight` and `prepared` arguments) with numpy, untimed,
then times the kernel, and a control that first reads as many bytes of other memory (a buffer
of OTHER_BYTES, in turn), so that what the read itself does to the caches and the clock is
told apart from the weights it brings in. A model whose weights outgrow the last-level cache reads them
from memory every run, and the second pass shows what that costs each kernel: the most that
prefetching weights ahead of a kernel (during the one before it, say) could gain. A weight
argument's extent is taken up to the next argument's offset in the same block, so the last
one of a block reads to the block's end (a few kernels read more than their own).

Printed: the passes' kernel sums (medians per kernel over the rounds), the medians over rounds
of the ratios of the sums to the plain one, and the kernels that gained most.
"""

from __future__ import annotations

import argparse
import ctypes
import time
from typing import Any

import numpy as np

OTHER_BYTES = 64 << 20  # the control's other memory: more than the last-level cache


def weight_views(manifest: dict[str, Any], bases: dict[str, Any]) -> list[list[np.ndarray]]:
    """Per kernel, float32 views of the weight blocks its arguments point into (module
    docstring: each argument's extent runs to the next offset of its block)."""
    ends = {"weight": manifest["weights_bytes"], "prepared": manifest.get("prepared_bytes") or 0}
    offsets = {
        kind: sorted({i for k in manifest["kernels"] for kk, i in k["args"] if kk == kind} | {end})
        for kind, end in ends.items()
    }
    views = []
    for k in manifest["kernels"]:
        mine = []
        for kind, i in k["args"]:
            if kind not in ends or bases.get(kind) is None:
                continue
            o = offsets[kind]
            n = (o[o.index(i) + 1] - i) // 4
            if n:
                mine.append(np.ctypeslib.as_array((ctypes.c_float * n).from_address(bases[kind] + i)))
        views.append(mine)
    return views


def other_views(views: list[list[np.ndarray]], other: np.ndarray) -> list[list[np.ndarray]]:
    """Per kernel, slices of `other` as large as its weight views, taken in turn (wrapping)."""
    out, at = [], 0
    for mine in views:
        slices = []
        for v in mine:
            n = min(v.size, other.size)
            at = 0 if at + n > other.size else at
            slices.append(other[at : at + n])
            at += n
        out.append(slices)
    return out


def passes(mod: Any, feeds: dict[str, np.ndarray], rounds: int) -> tuple[np.ndarray, list[list[np.ndarray]]]:
    """Seconds per (pass, round, kernel): pass 0 plain, pass 1 with each kernel's weights read
    just before it, pass 2 with as many bytes of other memory read just before it."""
    calls, bases = mod.kernel_calls(feeds)
    views = weight_views(mod.manifest, bases)
    reads = [[[] for _ in calls], views, other_views(views, np.ones(OTHER_BYTES // 4, np.float32))]
    t = np.zeros((3, rounds, len(calls)))
    for r in range(rounds):
        for p, before in enumerate(reads):
            for j, call in enumerate(calls):
                for v in before[j]:
                    v.sum()
                t0 = time.perf_counter()
                call()
                t[p, r, j] = time.perf_counter() - t0
    return t, views


def main(argv: list[str] | None = None) -> None:
    from benchmarks.layers import compile_layers
    from benchmarks.zoo import sample_inputs

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a zoo model, a model of benchmarks/wild.py or an .onnx file")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    model, _, mod, _, _ = compile_layers(args.model)
    mod.set_num_threads(args.threads)
    t, views = passes(mod, sample_inputs(model), args.rounds)
    med = np.median(t, axis=1) * 1e6
    sums = t.sum(axis=2)
    read, other = (float(np.median(sums[p] / sums[0])) for p in (1, 2))
    plain, first, control = (f"{m:.0f}" for m in med.sum(axis=1))
    print(f"{args.model}, {args.threads} thread(s), {args.rounds} rounds: kernel sums {plain} us plain,")
    print(f"{first} with each kernel's weights read first, {control} with other memory read first")
    print(f"per round: weights read first / plain {read:.3f}, other memory read first / plain {other:.3f}")
    kernels = mod.manifest["kernels"]
    head = ("node", "algorithm", "plain us", "read us", "other us", "weights KB")
    print("{:34s} {:11s} {:>9s} {:>9s} {:>9s} {:>11s}".format(*head))
    for j in np.argsort(med[1] - med[0])[: args.top]:
        kb = sum(v.nbytes for v in views[j]) / 1024
        name, algo = kernels[j].get("node", "") or kernels[j]["op"], kernels[j].get("algorithm", "-")
        print(f"{name[:34]:34s} {algo:11s} {med[0, j]:9.1f} {med[1, j]:9.1f} {med[2, j]:9.1f} {kb:11.0f}")


if __name__ == "__main__":
    main()
