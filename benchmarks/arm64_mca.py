"""llvm-mca throughput of the hot ARM64 loops against the FMA-bound ideal (default schedules).

    python -m benchmarks.arm64_mca                       # every kernel, cortex-a76 and cortex-a55
    python -m benchmarks.arm64_mca --only conv1x1 --cpu cortex-a55 --show   # + the loop's assembly
    python -m benchmarks.arm64_mca --json out.json
    python -m benchmarks.arm64_mca --dtype float16      # as --precision fp16 builds them

Kernels: the hot workloads of the zoo (MobileNetV2-224, ResNet-18, the BERT encoder) as
`tir compile --target linux-arm64` lowers them without tuning records: the same algorithm
choice (`build_kernel`: Winograd where the analytic default takes it, else direct), the
same default schedule. Each is compiled once per core (`linux-arm64:CPU`, so LLVM also
schedules the instructions for that core) and its hot loop is the FMA block: of the
innermost loops (`asm_check.mark_loops` finds them) with at least half the most `fmla` any
has, the densest in fmla. llvm-mca (LLVM 14, 100
iterations of the loop body) gives the cycles per iteration.

Per kernel and core: instructions, fmla, loads / stores and spills (those addressing sp or
x29) per iteration; llvm-mca's cycles per iteration (Total Cycles / Iterations) and Block
RThroughput; the FMA-bound ideal ((fmla + vector fmul, the first tap of an accumulator that
starts at zero) x the model's cycles per 128-bit fmla, measured on a block of independent
ones: `fma_cycles`) and ideal / estimate as % of peak. `bcast` says how
broadcasts reach the FMAs: `lane` fmla by element, `ldr_s` scalar float loads (one load per
broadcast value; with lane forms fed by vector loads there are none), `ld1r` / `dup` a
broadcast into a whole register; `scalar loops` counts the kernel's innermost loops doing
scalar float arithmetic and no vector arithmetic (scalar tails), `other loops' spills` the
stack slots its other innermost loops both store and load per iteration (spill and reload,
e.g. in Winograd's transforms; a copy-out reading a local buffer is not counted). `spills` of
the hot loop are all its stack loads and stores: in the FMA block every one is a cost.

`--dtype float16` builds the same kernels as `--precision fp16` does on these cores: float16
operands, float16 sums (`half_sums`), packed blocks of 8 channels (fmla on .8h, 8 lanes).
`MAC/cycle` (multiply-adds per cycle: FMAs x lanes / cycles) compares the two dtypes.

The LLVM 14 models are coarse: cortex-a76 is cortex-a57's model (one 128-bit fmla per cycle;
the real A76 issues two), cortex-a55's is in order (two per cycle in the model, one load per
cycle), so the in-order A55 figure is the one that sees load and latency stalls. The
estimates are deterministic: tests/codegen/test_arm64_mca.py guards them.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.asm_check import mark_loops
from tensorir.codegen.link import find_tool
from tensorir.graph.types import TensorType

CPUS = ("cortex-a76", "cortex-a55")
CONV = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
PW = {"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1}


def _conv(x, w, **attrs) -> tuple[str, list[tuple[int, ...]], dict[str, Any]]:
    a = dict(CONV)
    a.update(attrs)
    return ("conv2d_nchwc", [x, w], a)


# name: (op, input shapes, attrs, where in the zoo); the weight (input 1) is a constant
KERNELS: dict[str, tuple[str, list[tuple[int, ...]], dict[str, Any], str]] = {
    "conv1x1": (
        *_conv((1, 80, 7, 7, 4), (320, 80, 1, 1, 4, 4), **PW),
        "MobileNetV2-224 last expand 320->1280 (largest 1x1)",
    ),
    "conv1x1_56": (
        *_conv((1, 6, 56, 56, 4), (36, 6, 1, 1, 4, 4), **PW),
        "MobileNetV2-224 expand 24->144 at 56x56",
    ),
    "conv3x3_wino": (
        *_conv((1, 16, 56, 56, 4), (16, 16, 3, 3, 4, 4)),
        "ResNet-18 layer1 3x3 (default: winograd)",
    ),
    "conv3x3_direct": (
        *_conv((1, 128, 7, 7, 4), (128, 128, 3, 3, 4, 4)),
        "ResNet-18 layer4 3x3 (default: direct)",
    ),
    "conv3x3_s2": (
        *_conv((1, 16, 56, 56, 4), (32, 16, 3, 3, 4, 4), strides=(2, 2)),
        "ResNet-18 layer2.0 3x3 stride 2",
    ),
    "stem7x7_s2": (
        *_conv((1, 3, 224, 224, 1), (16, 3, 7, 7, 1, 4), strides=(2, 2), pads=(3, 3, 3, 3)),
        "ResNet-18 stem",
    ),
    "depthwise3x3": (
        *_conv((1, 36, 56, 56, 4), (36, 1, 3, 3, 1, 4), group=144),
        "MobileNetV2-224 depthwise 144ch 56x56",
    ),
    "dense_bert": ("dense", [(128, 256), (1024, 256)], {}, "BERT encoder FFN 256->1024 (128 tokens)"),
    "matmul_bert": ("matmul", [(1, 4, 128, 64), (1, 4, 64, 128)], {}, "BERT attention Q.K^T"),
}


@dataclass
class LoopStats:
    kernel: str
    cpu: str
    algorithm: str
    insts: int
    fmla: int
    fmul: int  # vector fmul: a multiply-add whose accumulator starts at zero (same pipe)
    loads: int
    stores: int
    spills: int
    cycles: float  # llvm-mca Total Cycles / Iterations
    rthroughput: float  # llvm-mca Block RThroughput
    ideal: float  # (fmla + fmul) x fma_cycles(cpu)
    peak_pct: float  # 100 x ideal / cycles
    macs_per_cycle: float  # (fmla + fmul) x lanes / cycles
    bcast: dict[str, int]
    scalar_loops: int
    other_spills: int  # stack slots stored and reloaded per iteration in the other loops


# ---- assembly analysis ------------------------------------------------------------------
def _body(text: str) -> list[str]:
    """Instruction lines (no labels, directives or comments)."""
    return [ln.strip() for ln in text.splitlines() if ln.startswith("\t") and not ln.lstrip().startswith(".")]


def innermost_loops(asm: str) -> dict[str, list[str]]:
    """{label: instructions} of every innermost loop (asm_check.mark_loops' regions)."""
    marked = mark_loops(asm)
    regions = re.findall(r"# LLVM-MCA-BEGIN (\S+)\n(.*?)# LLVM-MCA-END", marked, re.S)
    return {name: _body(text) for name, text in regions}


def _mnemonic(ins: str) -> str:
    return ins.split(None, 1)[0]


def hot_loop(asm: str) -> tuple[str, list[str]]:
    """The FMA block: among the innermost loops with at least half the most fmla any has,
    the densest in fmla (a Winograd kernel's GEMM, not its transforms, whose fmla are a
    smaller share of more instructions)."""
    loops = innermost_loops(asm)
    if not loops:
        raise ValueError("no innermost loop in the assembly")
    fmla = {k: sum(_mnemonic(i) == "fmla" for i in body) for k, body in loops.items()}
    top = max(fmla.values())
    cands = [k for k in loops if 2 * fmla[k] >= top]
    name = max(cands, key=lambda k: (fmla[k] / len(loops[k]), fmla[k]))
    return name, loops[name]


_STACK = re.compile(r"^(ld|st)\w*\s+(.*?)\[(?:sp|x29)(?:,\s*#(-?\d+))?\]")


def reloaded_slots(body: list[str]) -> int:
    """Stack accesses of a loop to the slots it both stores and loads (spill and reload, or
    a local buffer staged through memory; a copy-out that only reads one is not counted)."""
    acc: dict[int, list[str]] = {}
    for ins in body:
        if m := _STACK.match(ins):
            n = 2 if _mnemonic(ins)[2:3] == "p" else 1
            off = int(m.group(3) or 0)
            for k in range(n):  # a pair touches two slots of the register's size
                acc.setdefault(off + 16 * k, []).append(m.group(1))
    return sum(len(v) for v in acc.values() if "ld" in v and "st" in v)


def other_spills(asm: str, hot: str) -> int:
    """`reloaded_slots` summed over the kernel's innermost loops but the hot one."""
    return sum(reloaded_slots(body) for k, body in innermost_loops(asm).items() if k != hot)


_FLOAT_SCALAR = re.compile(r"^(fmadd|fmsub|fmul|fadd|fsub|fnmadd|fmax|fmin|fdiv)\s+s\d+")
_VECTOR = re.compile(r"\bv\d+\.\d+[sdhb]\b")


def count_scalar_loops(asm: str) -> int:
    """Innermost loops with scalar float arithmetic and no vector instruction (scalar tails)."""
    n = 0
    for body in innermost_loops(asm).values():
        if any(_FLOAT_SCALAR.match(i) for i in body) and not any(_VECTOR.search(i) for i in body):
            n += 1
    return n


def classify(body: list[str]) -> dict[str, Any]:
    """Instruction mix of a loop body: fmla, loads, stores, stack spills, broadcast forms
    (`lane`: fmla / fmul by element, `ldr_s`: scalar float loads, each the source of one
    broadcast, `ld1r` / `dup`: broadcasts into a whole register)."""
    loads = stores = spills = 0
    bcast = {"lane": 0, "ldr_s": 0, "ld1r": 0, "dup": 0}
    for ins in body:
        op = _mnemonic(ins)
        if "[" in ins and (op.startswith("ld") or op.startswith("st")):
            n = 2 if op in ("ldp", "stp", "ldnp", "stnp") else 1
            is_load = op.startswith("ld")
            loads += n * is_load
            stores += n * (not is_load)
            if re.search(r"\[(sp|x29)\b", ins):
                spills += n
            if is_load and re.match(r"^ld(r|ur|p)\s+[sh]\d+", ins):
                bcast["ldr_s"] += n
        if op in ("ld1r", "dup"):
            bcast[op] += 1
        if op in ("fmla", "fmls", "fmul") and re.search(r"\.[sh]\[\d\]", ins):
            bcast["lane"] += 1
    fmla = sum(_mnemonic(i) == "fmla" for i in body)
    fmul = sum(_mnemonic(i) == "fmul" and bool(_VECTOR.search(i)) for i in body)
    return {
        "insts": len(body),
        "fmla": fmla,
        "fmul": fmul,
        "loads": loads,
        "stores": stores,
        "spills": spills,
        "bcast": bcast,
    }


# ---- llvm-mca ----------------------------------------------------------------------------
def run_mca(body: list[str], cpu: str, iterations: int = 100) -> dict[str, float]:
    """llvm-mca on one loop body: {'cycles': per iteration, 'rthroughput': Block RThroughput}."""
    tool = find_tool("llvm-mca", "llvm-14")
    text = "".join(f"\t{i}\n" for i in body)
    cmd = [tool, "-mtriple=aarch64-linux-gnu", f"-mcpu={cpu}", f"-iterations={iterations}", "-"]
    p = subprocess.run(cmd, input=text, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"llvm-mca -mcpu={cpu}: {p.stderr.strip()[:300]}")
    total = float(re.search(r"Total Cycles:\s+(\d+)", p.stdout).group(1))
    its = float(re.search(r"Iterations:\s+(\d+)", p.stdout).group(1))
    rt = float(re.search(r"Block RThroughput:\s+([\d.]+)", p.stdout).group(1))
    return {"cycles": total / its, "rthroughput": rt}


@functools.cache
def fma_cycles(cpu: str) -> float:
    """The model's cycles per 128-bit fmla: llvm-mca on 24 independent `fmla v.4s` (the
    inverse of the FMA pipes the model has for q registers)."""
    body = [f"fmla v{i}.4s, v30.4s, v31.4s" for i in range(24)]
    return run_mca(body, cpu, 200)["cycles"] / len(body)


# ---- kernels -----------------------------------------------------------------------------
def kernel_asm(name: str, cpu: str, dtype: str = "float32") -> tuple[str, str]:
    """(assembly, algorithm) of a KERNELS entry built for linux-arm64:CPU, default schedule;
    float16: channel blocks of 8 and float16 sums, as --precision fp16 builds it."""
    from tensorir.codegen import emit_assembly
    from tensorir.ops.kernel import build_kernel
    from tensorir.ops.nn_compute import half_sums

    op, shapes, attrs, _ = KERNELS[name]
    target = f"linux-arm64:{cpu}"
    if dtype == "float16" and op == "conv2d_nchwc":
        shapes, attrs = _blocks_of_8(shapes, attrs)
    types = [TensorType(s, dtype) for s in shapes]
    with half_sums(dtype == "float16"):
        func, spec = build_kernel(op, types, dict(attrs), target, None, f"k_{name}", frozenset({1}))
    return emit_assembly(func, target), spec.algorithm or "-"


def _blocks_of_8(shapes: list[tuple[int, ...]], attrs: dict[str, Any]) -> tuple[list, dict]:
    """NCHW4c conv shapes re-blocked to NCHW8c: x (N, C/4, H, W, 4), w (M/4, C/4 | 1, kh, kw,
    4 | 1, 4) -> blocks of 8 (a block of 1 input channel, the stem's or depthwise's, stays)."""
    (n, c, h, w, ib), (m, wc, kh, kw, wi, ob) = shapes
    cin = c * ib // 8 if ib == 4 else c
    ib8 = 8 if ib == 4 else ib
    wc8 = wc * wi // 8 if wi == 4 else wc
    x = (n, cin, h, w, ib8)
    wt = (m * ob // 8, wc8, kh, kw, 8 if wi == 4 else wi, 8)
    return [x, wt], attrs


def analyze(asm: str, cpu: str, kernel: str = "", algorithm: str = "-", lanes: int = 4) -> LoopStats:
    hot, body = hot_loop(asm)
    c = classify(body)
    m = run_mca(body, cpu)
    ideal = (c["fmla"] + c["fmul"]) * fma_cycles(cpu)
    return LoopStats(
        kernel=kernel,
        cpu=cpu,
        algorithm=algorithm,
        insts=c["insts"],
        fmla=c["fmla"],
        fmul=c["fmul"],
        loads=c["loads"],
        stores=c["stores"],
        spills=c["spills"],
        cycles=round(m["cycles"], 2),
        rthroughput=m["rthroughput"],
        ideal=round(ideal, 2),
        peak_pct=round(100 * ideal / m["cycles"], 1) if m["cycles"] else 0.0,
        macs_per_cycle=round((c["fmla"] + c["fmul"]) * lanes / m["cycles"], 2) if m["cycles"] else 0.0,
        bcast={k: v for k, v in c["bcast"].items() if v},
        scalar_loops=count_scalar_loops(asm),
        other_spills=other_spills(asm, hot),
    )


def _row(s: LoopStats) -> str:
    bc = " ".join(f"{k}:{v}" for k, v in s.bcast.items()) or "-"
    fm = f"+{s.fmul}" if s.fmul else ""
    return (
        f"| {s.kernel} | {s.algorithm} | {s.insts} | {s.fmla}{fm} | {s.loads}/{s.stores} | {s.spills} "
        f"| {s.cycles:g} | {s.rthroughput:g} | {s.ideal:g} | {s.peak_pct:g}% | {s.macs_per_cycle:g} | {bc} "
        f"| {s.scalar_loops} | {s.other_spills} |"
    )


HEADER = (
    "| kernel | algorithm | insts | fmla(+fmul) | ld/st | spills | cycles/iter | RThroughput | ideal "
    "| % peak | MAC/cycle | bcast | scalar loops | other loops' spills |\n" + "|---" * 14 + "|"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", choices=sorted(KERNELS), help="these kernels only")
    ap.add_argument("--cpu", nargs="*", choices=CPUS, default=list(CPUS))
    ap.add_argument("--show", action="store_true", help="print each hot loop's assembly")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument(
        "--dtype", choices=["float32", "float16"], default="float32", help="float16: as --precision fp16"
    )
    args = ap.parse_args(argv)
    rows = []
    for cpu in args.cpu:
        print(f"\n{cpu}: model cycles per 128-bit fmla {fma_cycles(cpu):g} (llvm-mca, LLVM 14)\n")
        print(HEADER)
        for name in args.only or KERNELS:
            asm, algo = kernel_asm(name, cpu, args.dtype)
            s = analyze(asm, cpu, name, algo, 8 if args.dtype == "float16" else 4)
            rows.append(s)
            print(_row(s))
            if args.show:
                print("\n".join("    " + i for i in hot_loop(asm)[1]))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
