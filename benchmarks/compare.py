"""tensorir vs onnxruntime on the zoo models: latency, ratio, GFLOP/s, compile time, workspace.

    python -m benchmarks.compare                       # issue 16's table: the CNNs and BERT, 1 and 2 threads
    python -m benchmarks.compare resnet18 --runs 50 --threads 1
    python -m benchmarks.compare --all                 # every zoo model (+ MobileNetV3, YOLO, DenseNet)
    python -m benchmarks.compare --tuned               # + tuned builds (tuning_logs/, benchmarks/tune_zoo.py)

Both run in this process on the same inputs; their timed runs interleave in blocks of
BLOCK (BLOCK tensorir runs, BLOCK onnxruntime runs, ...) so machine noise hits both alike.
Blocks, not single runs: after a run each runtime's worker threads spin a while before they
sleep (on the Zen 5 VM, 2 threads: onnxruntime's burn 30-40 ms of CPU after a run,
tensorir's under 1 ms), and on 2 cores they would steal the next run's cores; so each block starts after
a pause (PAUSE_S) in which the other runtime's threads go to sleep. After such a pause this
host runs the next few milliseconds of work slowly (MobileNetV2-96, 2 threads: 1.0, 0.69,
0.56, 0.54 ms for the first runs, 0.36-0.40 back to back; onnxruntime alike), so each block
then runs untimed for WARM_S before its timed runs: the table is the back-to-back speed a loop
of runs sees, and `benchmarks.after_pause` times the runs after a pause. Reported: medians of
--runs timed runs after --warmup runs. Results: a table on stdout and JSON in
benchmarks/results/compare.json. Ratio = tensorir / onnxruntime (below 1: tensorir faster), the
median over rounds of the ratio within a round (paired_ratio: this VM's speed moves between
states lasting about a second, which a ratio of overall medians mixes up); an order of the
fns per round that gives every fn every slot as often (autotune.interleaved.turn_orders).
Then, per model, start-up (fresh processes: library load to first output, vs onnxruntime's
session creation and first run), code and weights size and kernel count (benchmarks/startup.py;
--no-startup skips them). Every multi-thread row is measured between two probes of numpy's
sgemm scaling and taken again (--retries) while they find the second core busy; the lower
probe stands beside the row (`blocks_on_idle_cores`). A canary (an FMA loop over the threads)
runs in every round of such a row too, and the rounds where it ran slow, a core being busy
then, are dropped; the row says how many. Before every round of such a row the two cores are
checked for being apart (benchmarks/core_distance.py: a cache line's round trip, and a data
hand-over through the thread pool): the rounds where they were (this VM's vCPUs on cores without
a shared L3, or in a state where data one core wrote reaches the other slowly) are kept,
counted and given their own ratio beside the row, and a row apart in most of its rounds is
taken again.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import NamedTuple

import numpy as np

from autotune.interleaved import turn_orders
from benchmarks.zoo import MODELS, build, sample_inputs

RESULTS = Path(__file__).parent / "results"
LOGS = Path(__file__).resolve().parent.parent / "tuning_logs"
# the default table (issue 16, item 1): the zoo CNNs and the BERT encoder. The zoo's other
# models (tiny_cnn; MobileNetV3-Small, the YOLO detector and DenseNet-121, added for the
# layout-storm counts of benchmarks/layout_storms.py) run by name or with --all.
DEFAULT = [
    "mobilenet_v1",
    "mobilenet_v2_224",
    "mobilenet_v2_96",
    "squeezenet1_1",
    "resnet18",
    "resnet50",
    "bert_encoder",
]


def _ort_session(model, threads: int):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


BLOCK = 5
PAUSE_S = 0.05
WARM_S = 0.01  # untimed runs after the pause, past the host's ramp (a whole run at least)


def interleaved_blocks(fns: list, runs: int, warmup: int, on_round=None) -> np.ndarray:
    """Seconds per run, the median of each block: (rounds, len(fns)), a round being one block
    of each fn in the order `turn_orders` gives it. `on_round()`, if given, is called before
    each round's blocks."""
    for _ in range(warmup):
        for f in fns:
            f()
    orders = turn_orders(len(fns))
    rounds = -(-runs // BLOCK)
    blocks = np.zeros((-(-rounds // len(orders)) * len(orders), len(fns)))
    for r, row in enumerate(blocks):
        if on_round is not None:
            on_round()
        for k in orders[r % len(orders)]:
            time.sleep(PAUSE_S)  # let the other runtime's spinning threads go to sleep
            warm_until = time.perf_counter() + WARM_S
            fns[k]()
            while time.perf_counter() < warm_until:
                fns[k]()
            row[k] = np.median([_timed(fns[k]) for _ in range(BLOCK)])
    return blocks


def _timed(f) -> float:
    t0 = time.perf_counter()
    f()
    return time.perf_counter() - t0


def ratio_spread(blocks: np.ndarray, a: int, b: int) -> tuple[float, float, float]:
    """The 25th, 50th and 75th percentiles over rounds of fn a's time over fn b's."""
    q = np.percentile(blocks[:, a] / blocks[:, b], [25, 50, 75])
    return float(q[0]), float(q[1]), float(q[2])


def paired_ratio(blocks: np.ndarray, a: int, b: int) -> float:
    """fn a's time over fn b's: the median over rounds of the ratio within each round. The
    2-core VM runs a while fast, then a while slow (MobileNet-sized models: blocks of 200 runs
    at 0.45, 0.56 or 0.85 ms, one build, nothing else running), so the median of all runs of a
    fn lands in one mode or another by chance (the same build in two slots: 0.769 vs 0.627 ms);
    within a round both meet the same state."""
    return float(np.median(blocks[:, a] / blocks[:, b]))


def _interleaved(fns: list, runs: int, warmup: int) -> list[float]:
    """Median seconds per run of each fn (medians of its blocks), interleaved."""
    return [float(x) for x in np.median(interleaved_blocks(fns, runs, warmup), axis=0)]


def beside_ort(mods: list, model, feeds: dict, threads: int, runs: int) -> list[float]:
    """Median seconds of each compiled module and then onnxruntime at `threads`, interleaved."""
    return [float(x) for x in np.median(blocks_beside_ort(mods, model, feeds, threads, runs), axis=0)]


def blocks_beside_ort(mods: list, model, feeds: dict, threads: int, runs: int) -> np.ndarray:
    """interleaved_blocks of each compiled module and then onnxruntime at `threads`."""
    return marked_blocks_beside_ort(mods, model, feeds, threads, runs, apart=lambda: False)[0]


def marked_blocks_beside_ort(
    mods: list, model, feeds: dict, threads: int, runs: int, apart=None
) -> tuple[np.ndarray, np.ndarray]:
    """blocks_beside_ort, and per round whether the two cores were apart just before it
    (`apart()`, default core_distance.cores_apart at more than one thread)."""
    from benchmarks.core_distance import cores_apart

    for m in mods:
        m.set_num_threads(threads)
    sess = _ort_session(model, threads)
    fns = [m.bind(feeds) for m in mods] + [lambda: sess.run(None, feeds)]
    apart = apart or (cores_apart if threads > 1 else lambda: False)
    marks: list[bool] = []
    blocks = interleaved_blocks(fns, runs, 5, on_round=lambda: marks.append(apart()))
    return blocks, np.array(marks, bool)


def split_by_apart(ratios: np.ndarray, far: np.ndarray, label: str) -> str:
    """ "" when no round had its cores apart; else the median `label` over those rounds and
    over the others (a note for an A/B line: the two states move builds by different amounts)."""
    if not far.any():
        return ""
    near = f", {np.median(ratios[~far]):.3f} in the {int((~far).sum())} others" if (~far).any() else ""
    return f"; cores apart in {int(far.sum())} rounds: {label} {np.median(ratios[far]):.3f} there{near}"


class IdleBlocks(NamedTuple):
    blocks: np.ndarray  # the rounds kept: (rounds, fns)
    scaling: float | None  # the lower sgemm scaling of the two probes (None at one thread)
    dropped: int  # rounds dropped for a slow canary
    far: np.ndarray  # per round kept: the two cores were apart (core_distance.cores_apart)
    busy: bool = False  # after the retries: a probe or most rounds' canary found a core busy


def blocks_on_idle_cores(
    fns: list, runs: int, warmup: int, threads: int, retries: int, probe=None, canary=None, apart=None
) -> IdleBlocks:
    """interleaved_blocks of `fns`; at more than one thread, with numpy's sgemm scaling
    probed just before and just after (`probe`, default sgemm_scaling), and the whole
    measurement taken again, up to `retries` times, while either probe finds the second core
    busy (scaling below IDLE_SCALING). Another tenant of this VM comes and goes within
    minutes: one probe at the start of a run said idle (1.94x) while ResNet-18's 2-thread row
    read 16.4 ms against 11.2 ms a few minutes later.

    The probes only see the machine before and after the row, so a `canary` (default
    busy_canary: an FMA loop split over the threads) runs in every round too, and the rounds
    where it took more than CANARY_SLACK times its fastest round are dropped: a tenant that
    held a core then slowed those rounds (onnxruntime's SqueezeNet read 7.00 ms at 2 threads
    against 7.01 at 1 between probes that scaled 1.94x). Fewer than half the rounds left
    counts as busy. Fastest over every row the same canary ran in (busy_canary is one per
    thread count): a tenant that held the core for a whole row left its canary uniformly slow
    (MobileNetV1 at 2 threads 4.74 ms, onnxruntime 4.99, against 2.62 / 2.81 minutes later,
    sgemm 1.94x before and after, no round dropped against the row's own fastest).

    Before each round `apart()` (default core_distance.cores_apart: a cache line's round trip
    and a data hand-over between the first two cores) says whether the cores were apart:
    `far` marks those rounds (the hypervisor had put the vCPUs on cores without a shared L3,
    or data one core wrote reached the other slowly; neither probe nor canary sees it).
    Those rounds are kept: both runtimes met the same placement, and the row reports them;
    but a row whose cores were apart in more than half its rounds is taken again too
    (within `retries`), as a busy one is: the placement lasts seconds to minutes."""
    if threads == 1:
        blocks = interleaved_blocks(fns, runs, warmup)
        return IdleBlocks(blocks, None, 0, np.zeros(len(blocks), bool), False)
    from benchmarks.core_distance import cores_apart

    probe = probe or sgemm_scaling
    canary = canary or busy_canary(threads)
    apart = apart or cores_apart
    for _ in range(retries + 1):
        apart_rounds: list[bool] = []
        before = probe()
        check = lambda: apart_rounds.append(apart())  # noqa: E731
        blocks = interleaved_blocks([*fns, canary], runs, warmup, on_round=check)
        after = probe()
        scaling = min(b / a for a, b in (before, after))
        best = min(blocks[:, -1].min(), _CANARY_BEST.get(canary, np.inf))
        _CANARY_BEST[canary] = best
        quiet = blocks[:, -1] <= CANARY_SLACK * best
        far = np.array(apart_rounds, bool)
        near = 2 * (quiet & ~far).sum() >= quiet.sum()
        if scaling >= IDLE_SCALING and 2 * quiet.sum() >= len(quiet) and near:
            break
    busy = scaling < IDLE_SCALING or 2 * quiet.sum() < len(quiet)
    if not quiet.any():  # busy throughout every try: keep the last try whole, flagged busy
        return IdleBlocks(blocks[:, :-1], scaling, 0, far, busy=True)
    return IdleBlocks(blocks[quiet, :-1], scaling, int((~quiet).sum()), far[quiet], busy)


CANARY_S = 1e-3  # the canary's time per call on an idle machine
CANARY_SLACK = 1.15
_CANARY_BEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # canary -> fastest block seen


@functools.cache
def busy_canary(threads: int):
    """benchmarks/peak.py's register-only FMA kernel on the JIT's thread pool, `threads` tasks:
    one long launch (half of CANARY_S), then SHORT_LAUNCHES launches of about SHORT_S each,
    the way a model's kernels come. It reads the same in every round unless a core is busy or
    the pool's threads, spinning between launches, are kept from their cores."""
    from benchmarks.peak import fma_loop

    probe, _ = fma_loop(threads, 10_000)
    probe()
    took = min(_timed(probe) for _ in range(20))
    long_call = fma_loop(threads, max(1_000, int(10_000 * CANARY_S / 2 / took)))[0]
    short_call = fma_loop(threads, max(threads, int(10_000 * SHORT_S / took)))[0]

    def canary() -> None:
        long_call()
        for _ in range(SHORT_LAUNCHES):
            short_call()

    return canary


SHORT_LAUNCHES = 64
SHORT_S = 8e-6  # a small kernel's time, MobileNetV2-96's at 2 threads


# A model that runs in under SHORT_MODEL_S gets at least SHORT_MODEL_RUNS timed runs per row:
# its rows are cheap, and with the default 20 (6 rounds) MobileNetV2-96's 2-thread row read one
# build 0.41 and 0.47 ms in its two files, and the tuned build, byte for byte the untuned one,
# 0.38 and 0.48 ms in two runs of the command.
SHORT_MODEL_S = 3e-3
SHORT_MODEL_RUNS = 60


def row_runs(runs: int, run_s: float) -> int:
    """Timed runs per row for a model whose run takes `run_s` seconds at one thread."""
    return max(runs, SHORT_MODEL_RUNS) if run_s < SHORT_MODEL_S else runs


def bench_model(
    name: str,
    threads: list[int],
    runs: int,
    warmup: int,
    records=None,
    tuned_records=None,
    retries: int = 2,
) -> list[dict]:
    """Time tensorir (compiled with `records`) and onnxruntime, interleaved, at each thread
    count. With `tuned_records` (threads -> Records) a tuned build per thread count joins the
    same interleaved rounds, so untuned, tuned and onnxruntime meet the same machine; the
    untuned and the tuned build each run from two files (untuned_both_orders). A model faster
    than SHORT_MODEL_S takes at least SHORT_MODEL_RUNS runs per row (row_runs). A row at more
    than one thread is measured between two sgemm probes and taken again while they find the
    machine busy (blocks_on_idle_cores, up to `retries` times)."""
    import tensorir as tir
    from tensorir.frontend.onnx import from_onnx
    from tensorir.graph.flops import graph_flops

    model = build(name)
    feeds = sample_inputs(model)
    flops = graph_flops(from_onnx(model))
    t0 = time.perf_counter()
    mod = tir.compile(model, records=records)
    compile_s = time.perf_counter() - t0
    ours = mod.bind(feeds)
    reference = _ort_session(model, 1).run(None, feeds)
    err = _max_err(ours(), reference)
    mod.set_num_threads(1)
    runs = row_runs(runs, min(_timed(ours) for _ in range(5)))
    rows = []
    with tempfile.TemporaryDirectory(prefix="tir_compare_") as copies:  # the tuned builds' second files
        for n in threads:
            mod.set_num_threads(n)
            sess = _ort_session(model, n)
            fns = [ours, lambda s=sess: s.run(None, feeds)]
            if tuned_records is not None:
                recs = tuned_records(n)
                tuned = tir.compile(model, records=recs)
                again = tir.compile(model, records=records)  # the untuned build in a second file
                tuned_copy = tir.load(tuned.export(Path(copies) / f"tuned{n}"))
                for m in (tuned, again, tuned_copy):  # the tuned build in a second file
                    m.set_num_threads(n)
                    fns.append(m.bind(feeds))
            raw, scaling, dropped, far, busy_row = blocks_on_idle_cores(fns, runs, warmup, n, retries)
            blocks = untuned_both_orders(raw)
            times = np.median(blocks, axis=0)
            t_ours, t_ort = times[:2]
            row = {
                "model": name,
                "threads": n,
                "tensorir_ms": t_ours * 1e3,
                "onnxruntime_ms": t_ort * 1e3,
                "ratio": paired_ratio(blocks, 0, 1),
                "tensorir_gflops": flops / t_ours / 1e9,
                "onnxruntime_gflops": flops / t_ort / 1e9,
                "compile_s": compile_s,
                "workspace_bytes": mod.manifest["workspace_bytes"],
                "max_abs_err_vs_ort": err,
                "tuned_kernels": mod.manifest.get("tuned_kernels", 0),
            }
            if scaling is not None:  # beside every multi-thread figure: was the machine idle?
                row["sgemm_scaling"] = scaling
                busy = ": busy, not comparable" if busy_row else ""
                row["rounds_dropped"] = dropped
                kept = f", {len(raw)} rounds kept of {len(raw) + dropped} (a core busy)" if dropped else ""
                row["note"] = f"  sgemm {scaling:.2f}x around this row{kept}{busy}"
                row.update(far_apart(blocks, far))
            if tuned_records is not None:
                row.update(
                    tuned_ms=times[2] * 1e3,
                    tuned_ratio=paired_ratio(blocks, 2, 1),
                    tuned_device=recs.device,
                    tuned_kernels=tuned.manifest.get("tuned_kernels", 0),
                    tuned_max_abs_err_vs_ort=_max_err(fns[2](), reference),
                )
            rows.append(row)
    return rows


def far_apart(blocks: np.ndarray, far: np.ndarray) -> dict:
    """The row's rounds with its two cores apart (core_distance.cores_apart): how many,
    and the ratio (tensorir / onnxruntime) over those rounds and over the others; a note for
    the table when there are any. The row's own figures keep every round."""
    out: dict = {"rounds_far": int(far.sum())}
    if far.any():
        out["ratio_far"] = paired_ratio(blocks[far], 0, 1)
        note = f"; cores apart in {int(far.sum())} of {len(far)} rounds"
        note += f": ratio {out['ratio_far']:.2f} there"
        if (~far).any():
            out["ratio_near"] = paired_ratio(blocks[~far], 0, 1)
            note += f", {out['ratio_near']:.2f} in the others"
        out["note_far"] = note
    return out


def untuned_both_orders(blocks: np.ndarray) -> np.ndarray:
    """Rounds of (untuned, onnxruntime, tuned, the untuned build from a second file[, the tuned
    build from a second file]) -> (untuned, onnxruntime, tuned), each build's time the mean of
    its two files. Two byte-identical libraries in two files time up to 3-4% apart, steadily
    (the mapped weights' pages come with the file: benchmarks/build_ab.py), so one file per
    build would put that offset into the tuned / untuned ratio. Rounds of two fns pass through."""
    if blocks.shape[1] < 4:
        return blocks
    untuned = (blocks[:, 0] + blocks[:, 3]) / 2
    tuned = (blocks[:, 2] + blocks[:, 4]) / 2 if blocks.shape[1] > 4 else blocks[:, 2]
    return np.stack([untuned, blocks[:, 1], tuned], axis=1)


def _max_err(ours: list, reference: list) -> float:
    return max(float(np.max(np.abs(a - b))) for a, b in zip(ours, reference, strict=True))


_SGEMM = """
import time, numpy as np
a = np.random.default_rng(0).standard_normal((2048, 2048), dtype=np.float32)
a @ a
ts = []
for _ in range(3):
    t0 = time.perf_counter(); a @ a; ts.append(time.perf_counter() - t0)
print(2 * 2048**3 / min(ts) / 1e9)
"""
IDLE_SCALING = 1.7  # numpy sgemm 2048^3 scales about 2x from 1 to 2 threads on an idle machine


def sgemm_scaling() -> tuple[float, float]:
    """numpy's sgemm 2048^3 GFLOP/s at 1 and 2 BLAS threads, each in a fresh process: a second
    core that is busy elsewhere shows as scaling well below 2."""
    out = []
    for n in (1, 2):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(n), OMP_NUM_THREADS=str(n), MKL_NUM_THREADS=str(n))
        p = subprocess.run(
            [sys.executable, "-c", _SGEMM], env=env, capture_output=True, text=True, check=True
        )
        out.append(float(p.stdout.split()[-1]))
    return out[0], out[1]


def print_table(rows: list[dict]) -> None:
    tuned = any("tuned_ms" in r for r in rows)
    head = f"{'model':<18} {'thr':>3} {'tensorir ms':>12} {'ort ms':>9} {'ratio':>7}"
    head += f" {'tuned ms':>9} {'ratio':>7}" if tuned else ""
    head += f" {'GFLOP/s':>8} {'ort GF/s':>8} {'compile s':>9} {'workspace':>12} {'max err':>8}"
    print(head + f" {'tuned':>5}")
    for r in rows:
        line = (
            f"{r['model']:<18} {r['threads']:>3} {r['tensorir_ms']:>12.2f} {r['onnxruntime_ms']:>9.2f} "
            f"{r['ratio']:>7.2f}"
        )
        if tuned:
            line += f" {r.get('tuned_ms', float('nan')):>9.2f} {r.get('tuned_ratio', float('nan')):>7.2f}"
        print(
            line + f" {r['tensorir_gflops']:>8.1f} {r['onnxruntime_gflops']:>8.1f} "
            f"{r['compile_s']:>9.1f} {r['workspace_bytes'] / 2**20:>9.2f}MiB {r['max_abs_err_vs_ort']:>8.1e}"
            f" {r.get('tuned_kernels', 0):>5}{r.get('note', '')}{r.get('note_far', '')}"
        )


def _tuned_records(db: str | None):
    """threads -> the Records a compile for this CPU at that thread count picks from
    tuning_logs/ (and `db`): the `-tN` key when there is one."""
    from autotune.records import Records
    from tensorir.target import get_target

    def pick(threads: int):
        recs = Records.for_target(get_target("host"), db=db or False, logs=LOGS, threads=threads)
        print(f"  {threads} thread(s): tuning records of device {recs.device} ({recs.how or 'none fit'})")
        return recs

    return pick


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", help=f"zoo models (default: {' '.join(DEFAULT)})")
    p.add_argument("--all", action="store_true", help="every zoo model but tiny_cnn")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--out", default=str(RESULTS / "compare.json"))
    p.add_argument("--records", metavar="DB", help="compile with this tuning database's best records")
    p.add_argument(
        "--tuned",
        action="store_true",
        help="also time a build per thread count with the records tuned at that thread count "
        "(tuning_logs/<this CPU>-tN.jsonl, plus --records DB), in the same interleaved rounds",
    )
    p.add_argument("--device", help="device key of the tuning records (default: the one that fits this CPU)")
    p.add_argument("--no-startup", action="store_true", help="skip start-up time and size")
    p.add_argument(
        "--retries",
        type=int,
        default=2,
        help="measure a multi-thread row again up to this many times while the sgemm probes "
        "around it find the second core busy",
    )
    args = p.parse_args(argv)
    args.models = args.models or ([m for m in MODELS if m != "tiny_cnn"] if args.all else DEFAULT)
    records = tuned_records = None
    if args.tuned:
        tuned_records = _tuned_records(args.records)
    elif args.records:
        from autotune.records import Records
        from tensorir.target import get_target

        if args.device:
            records = Records.open(db=args.records, logs=None, device=args.device)
        else:
            records = Records.for_target(get_target("host"), db=args.records, logs=None)
            print(f"tuning records of device {records.device} ({records.how or 'none fit'})")
    one, two = sgemm_scaling()
    busy = two / one < IDLE_SCALING
    print(
        f"sgemm 2048^3: {one:.0f} / {two:.0f} GFLOP/s at 1 / 2 threads ({two / one:.2f}x; about 2x when idle)"
        + ("  -> the second core is busy: 2-thread figures below are not comparable" if busy else "")
    )
    rows = []
    for name in args.models:
        new = bench_model(name, args.threads, args.runs, args.warmup, records, tuned_records, args.retries)
        for r in new:
            r["sgemm_gflops_1_2"] = [one, two]
        rows += new
        print_table(rows[-len(args.threads) :])
    print()
    print_table(rows)
    if not args.no_startup:
        from benchmarks import startup

        sizes = {name: startup.measure(build(name)) for name in args.models}
        print()
        startup.print_table(sizes)
        for r in rows:
            r.update(sizes[r["model"]])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
