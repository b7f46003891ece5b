"""Where one level of Strassen (ops/dense_strassen.py) beats the direct dense kernel.

    PYTHONPATH=. python -m benchmarks.strassen_cutoff --threads 1
    PYTHONPATH=. python -m benchmarks.strassen_cutoff --threads 2 --shapes 512x768x3072 1024x1024x1024

For each dense shape M x K -> N (x: (M, K), a constant w: (N, K)) the tuner's Measurer times
the "direct" and the "strassen" algorithm with their default knobs (cold caches, result
checked against the reference, median of `repeat` timings), `--rounds` times in turn;
printed: the medians over rounds, strassen / direct, the ratio of the fastest rounds and the
spread (slowest / fastest round: the noise of a shared machine), and what MNN's rule and the
default (dense_strassen.strassen_default) say. Rows go to
benchmarks/results/strassen_cutoff_t<threads>.json. Run it on a quiet machine; on a shared one,
`--clock cpu` times the same cold calls in this process in CPU seconds (time.process_time), so
the time other processes take from it does not count (their use of the caches and memory does).

`--conv [HxWxCxM ...]` times packed 1x1 convolutions at batch 1 (ops/conv_strassen.py: NCHW16c,
with bias, the product m = H*W pixels, k = C, n = M), default CONV_SHAPES; `--matmul
[BxMxKxN ...]` products of two run-time operands (ops/matmul_strassen.py: B's seven operands
formed in the kernel), default MATMUL_SHAPES. Their rows go to
strassen_cutoff_{conv,matmul}_t<threads>.json.

`--ffn TOKENS` times a whole model instead: BERT-base's feed-forward block (dense 768 -> 3072,
relu, dense 3072 -> 768, residual add) at TOKENS rows, compiled with the default algorithms and
with every dense forced to direct, `--rounds` interleaved rounds of 10 runs, medians.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
from pathlib import Path

from autotune.measure import MeasureOptions, Measurer
from autotune.task import Task
from tensorir.graph.types import TensorType
from tensorir.ops.dense_strassen import strassen_default

SHAPES = [
    "128x128x128",
    "256x256x256",
    "512x512x512",
    "1024x1024x1024",
    "128x768x3072",  # BERT-base FFN up-projection at 128 tokens
    "512x768x3072",  # ... at 512 tokens
    "512x3072x768",  # the down-projection
    "196x256x1024",  # a large 1x1 conv as a product (14x14 pixels)
    "256x2048x2048",  # few rows, a large saving
]
CONV_SHAPES = [  # H x W x C x M, batch 1: ResNet-50's stride-1 1x1 convs (7x7 is odd: not eligible)
    "56x56x64x64",
    "56x56x64x256",
    "56x56x256x64",
    "56x56x256x128",
    "28x28x128x512",
    "28x28x512x128",
    "28x28x512x256",
    "14x14x256x1024",
    "14x14x1024x256",
    "14x14x1024x512",
    "112x112x64x256",  # larger maps
    "112x112x128x128",
    "128x128x256x256",  # a segmentation decoder's 1x1
    "64x64x2048x256",  # DeepLab's ASPP 1x1 on ResNet's 2048 channels
    "56x56x512x512",  # many channels
    "28x28x1024x1024",
    "16x16x2048x2048",
    "32x32x2048x2048",
]
MATMUL_SHAPES = [  # batch x M x K x N, both operands at run time
    "12x512x64x512",  # BERT-base attention at 512 tokens: Q K^T, 12 heads
    "12x512x512x64",  # ... softmax(QK^T) V
    "1x512x512x512",
    "1x1024x1024x1024",
    "1x2048x768x2048",
    "1x4096x1024x1024",
    "1x1024x3072x1024",
    "1x2048x2048x2048",
]
BLOCK = 16  # the channel block of the layout pass on AVX-512
RESULTS = Path(__file__).parent / "results"


def mnn_rule(m: int, n: int, k: int) -> bool:
    """MNN's cut-off: the saved multiply-adds against 3mk + 3nk + 5.25mn extra element ops."""
    return m * n * k / 8 > 3 * m * k + 3 * n * k + 5.25 * m * n


def dense_task(m: int, k: int, n: int) -> Task:
    types = (TensorType((m, k)), TensorType((n, k)))
    return Task(f"dense {m}x{k}x{n}", "dense", types, {}, 2 * m * n * k, const_args=frozenset({1}))


def conv_task(h: int, w: int, c: int, m: int) -> Task:
    """A packed 1x1 conv with bias, as the layout pass leaves it (NCHW16c)."""
    types = (
        TensorType((1, c // BLOCK, h, w, BLOCK)),
        TensorType((m // BLOCK, c // BLOCK, 1, 1, BLOCK, BLOCK)),
        TensorType((m // BLOCK, BLOCK)),
    )
    attrs = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}
    flops = 2 * h * w * c * m
    return Task(f"conv {h}x{w}x{c}x{m}", "conv2d_nchwc", types, attrs, flops, const_args=frozenset({1, 2}))


def matmul_task(b: int, m: int, k: int, n: int) -> Task:
    types = (TensorType((b, m, k)), TensorType((b, k, n)))
    return Task(f"matmul {b}x{m}x{k}x{n}", "matmul", types, {}, 2 * b * m * n * k)


def product_of(kind: str, dims: list[int]) -> tuple[Task, int, int, int]:
    """(task, m, n, k) of a shape of `kind` (dense MxKxN, conv HxWxCxM, matmul BxMxKxN)."""
    if kind == "conv":
        h, w, c, m = dims
        return conv_task(h, w, c, m), h * w, m, c
    if kind == "matmul":
        b, m, k, n = dims
        return matmul_task(b, m, k, n), m, n, k
    m, k, n = dims
    return dense_task(m, k, n), m, n, k


def ffn_model(tokens: int):
    """BERT-base's feed-forward block at `tokens` rows (random weights, seed 0)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32), n)
        for n, s in (("w1", (768, 3072)), ("w2", (3072, 768)))
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["g"]),
        helper.make_node("MatMul", ["g", "w2"], ["d"]),
        helper.make_node("Add", ["d", "x"], ["y"]),
    ]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [tokens, 768]) for n in ("x", "y")]
    graph = helper.make_graph(nodes, "bert_ffn", io[:1], io[1:], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def time_ffn(tokens: int, threads: int, rounds: int) -> None:
    import time

    import numpy as np

    import tensorir as tir
    from autotune.task import extract_tasks, load_graph

    model = ffn_model(tokens)
    tasks = [t for t in extract_tasks(load_graph(model)) if "strassen" in t.space().algorithms]
    direct = {t.key: {"algorithm": "direct"} for t in tasks}
    mods = {"default": tir.compile(model), "direct": tir.compile(model, records=direct)}
    for name, mod in mods.items():
        mod.set_num_threads(threads)
        algos = [k.get("algorithm") for k in mod.manifest["kernels"] if k.get("algorithm")]
        print(f"{name}: kernels' algorithms {algos}")
    x = {"x": np.random.default_rng(1).standard_normal((tokens, 768)).astype(np.float32)}
    outs = {n: m.run(x)[0] for n, m in mods.items()}
    print(f"max |default - direct| = {float(np.max(np.abs(outs['default'] - outs['direct']))):.2e}")
    times: dict[str, list[float]] = {n: [] for n in mods}
    for _ in range(rounds):
        for n, m in mods.items():
            call = m.bind(x)
            for _ in range(10):
                t0 = time.perf_counter()
                call()
                times[n].append(time.perf_counter() - t0)
    med = {n: statistics.median(t) * 1e3 for n, t in times.items()}
    print(
        f"BERT FFN {tokens} tokens, {threads} thread(s): default {med['default']:.2f} ms, "
        f"all direct {med['direct']:.2f} ms, ratio {med['default'] / med['direct']:.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="*", default=SHAPES, help="MxKxN")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ffn", type=int, metavar="TOKENS", help="time BERT-base's FFN block instead")
    p.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall: the tuner's Measurer; cpu: CPU time in this process (a shared machine)",
    )
    p.add_argument("--conv", nargs="*", metavar="HxWxCxM", help="packed 1x1 convs (default CONV_SHAPES)")
    p.add_argument("--matmul", nargs="*", metavar="BxMxKxN", help="run-time products (default MATMUL_SHAPES)")
    args = p.parse_args(argv)
    if args.ffn:
        return time_ffn(args.ffn, args.threads, args.rounds)
    kind = "conv" if args.conv is not None else "matmul" if args.matmul is not None else "dense"
    shapes = {"conv": args.conv or CONV_SHAPES, "matmul": args.matmul or MATMUL_SHAPES}.get(kind, args.shapes)
    rows = time_shapes(kind, shapes, args.threads, args.rounds, args.clock)
    RESULTS.mkdir(exist_ok=True)
    name = "" if kind == "dense" else f"_{kind}"
    (RESULTS / f"strassen_cutoff{name}_t{args.threads}.json").write_text(json.dumps(rows, indent=1) + "\n")


CONFIGS = [{"algorithm": "direct"}, {"algorithm": "strassen"}]


def time_shapes(kind: str, shapes: list[str], threads: int, rounds: int, clock: str = "wall") -> list[dict]:
    """Per shape: direct and strassen timed in turn `rounds` times, medians, the rules' say."""
    rows = []
    with contextlib.ExitStack() as stack:
        if clock == "wall":
            meas = stack.enter_context(Measurer(MeasureOptions(target="host", workers=1, threads=threads)))
            timer = functools.partial(wall_times, meas)
        else:
            timer = functools.partial(cpu_times, threads=threads)
        for shape in shapes:
            task, m, n, k = product_of(kind, [int(d) for d in shape.split("x")])
            default = strassen_default(m, n, k, kind == "matmul")
            rows.append(summary(shape, timer(task, rounds), default, mnn_rule(m, n, k)))
    return rows


def wall_times(meas: Measurer, task: Task, rounds: int) -> list[list[float]]:
    """Per config of CONFIGS, `rounds` cold timings by the tuner's Measurer (wall seconds)."""
    times: list[list[float]] = [[] for _ in CONFIGS]
    for _ in range(rounds):
        for i, r in enumerate(meas.measure(task, CONFIGS)):
            if r.error:
                raise SystemExit(f"{task.key} {CONFIGS[i]}: {r.error}")
            times[i].append(r.cost)
    return times


def cpu_times(
    task: Task, rounds: int, threads: int = 1, repeat: int = 5, configs: list[dict] = CONFIGS
) -> list[list[float]]:
    """Per config (direct first), `rounds` medians of `repeat` cold calls in this process, in CPU
    seconds (time.process_time): the time other work on a shared machine takes from this
    process does not count, as it does in wall time. The outputs must agree."""
    import time

    import numpy as np

    from autotune.runners import FLUSH_BYTES
    from tensorir.runtime.jit import set_num_threads

    set_num_threads(threads)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(t.shape).astype(np.float32) for t in task.in_types]
    calls, outs = zip(*(_bound_kernel(task, config, inputs) for config in configs), strict=True)
    for call in calls:
        call()
    scale = float(np.max(np.abs(outs[0])))
    if any(float(np.max(np.abs(out - outs[0]))) > 1e-3 * scale for out in outs[1:]):
        raise SystemExit(f"{task.key}: the configs' outputs differ")
    flush = np.zeros(FLUSH_BYTES // 8)
    activations = [a for k, a in enumerate(inputs) if k not in task.const_args]
    times: list[list[float]] = [[] for _ in configs]
    for _ in range(rounds):
        for i, call in enumerate(calls):
            cpu = []
            for _ in range(repeat):
                flush += 1.0
                for a in activations:
                    a.sum()
                t0 = time.process_time()
                call()
                cpu.append(time.process_time() - t0)
            times[i].append(statistics.median(cpu))
    return times


def _bound_kernel(task: Task, config: dict, inputs: list) -> tuple:
    """(the kernel of `task` under `config` bound to `inputs` (weights transformed), its output)."""
    import numpy as np

    from tensorir.backends import get_backend
    from tensorir.ops.kernel import build_kernel, scratch_arrays
    from tensorir.ops.registry import get_op
    from tensorir.target import get_target

    host = get_target("host")
    func, spec = build_kernel(
        task.op, task.in_types, task.attrs, host, config=config, const_args=task.const_args
    )
    args = [spec.transforms[i](a) if i in spec.transforms else a for i, a in enumerate(inputs)]
    (out_type,) = get_op(spec.op).infer(list(spec.in_types), dict(spec.attrs))
    out = np.zeros(out_type.shape, np.float32)
    return get_backend(host).jit(func, host).bind(*args, out, *scratch_arrays(func)), out


def summary(shape: str, times: list[list[float]], default: bool, mnn: bool) -> dict:
    """The row of a shape (medians in ms, strassen / direct, the fastest rounds' ratio and the
    spread: slowest / fastest round, the noise), printed."""
    direct, strassen = (statistics.median(t) * 1e3 for t in times)
    spread = max(max(t) / min(t) for t in times)
    low = min(times[1]) / min(times[0])
    print(
        f"{shape:>18}  direct {direct:8.3f} ms  strassen {strassen:8.3f} ms  ratio {strassen / direct:5.2f} "
        f"(minima {low:4.2f}, spread {spread:4.2f})  MNN rule: {'strassen' if mnn else 'direct'}  "
        f"default: {'strassen' if default else 'direct'}",
        flush=True,
    )
    row = {"shape": shape, "direct_ms": direct, "strassen_ms": strassen, "ratio": strassen / direct}
    return row | {"ratio_of_minima": low, "spread": spread, "default": default, "mnn_rule": mnn}


if __name__ == "__main__":
    main()
