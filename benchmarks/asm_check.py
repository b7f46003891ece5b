"""Inspect the machine code tensorir generates for the codegen test kernels.

    .venv/bin/python benchmarks/asm_check.py                    # host
    .venv/bin/python benchmarks/asm_check.py linux-arm64 --mca  # + llvm-mca per innermost loop
    .venv/bin/python benchmarks/asm_check.py host --dump out/   # write each kernel's .s

Per kernel: instruction count, vector FMA count and register class, calls made (a math
kernel must make none: no libm, no memset), and with --mca (aarch64) llvm-mca's cycles
per iteration of each innermost loop on cortex-a76 (TOOLCHAIN.md section 3 for caveats).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tensorir.codegen import emit_assembly
from tensorir.codegen.link import find_tool
from tensorir.target import get_target
from tests.codegen import kernels as K


def kernels() -> dict:
    funcs = {name: make().func for name, make in K.ALL_CASES.items()}
    funcs["math_all"] = K.math_all()[0]
    return funcs


def summarize(asm: str, arch: str) -> dict:
    body = [ln for ln in asm.splitlines() if ln.startswith("\t") and not ln.lstrip().startswith(".")]
    if arch == "aarch64":
        fma = re.findall(r"\bfmla\s+v\d+\.(\d+[sdh])", asm)
        calls = re.findall(r"\bbl\s+(\S+)", asm)
    else:
        fma = re.findall(r"\bvfmadd\w*\s+.*%(zmm|ymm|xmm)\d+\s*$", asm, re.M)
        calls = re.findall(r"\bcall\w*\s+(\S+)", asm)
    return {"insts": len(body), "fma": len(fma), "fma_regs": sorted(set(fma)), "calls": sorted(set(calls))}


def mark_loops(asm: str) -> str:
    """Wrap each innermost backward-branch loop in LLVM-MCA region markers (TOOLCHAIN.md app. B)."""
    lines = asm.splitlines()
    labels = {m.group(1): i for i, ln in enumerate(lines) if (m := re.match(r"^(\.LBB\d+_\d+):", ln))}
    regions = []
    for i, ln in enumerate(lines):
        m = re.match(r"^\s+b(?:\.\w+)?\s+(\.LBB\d+_\d+)$", ln) or re.match(
            r"^\s+(?:cbn?z|tbn?z)\s+.*,\s*(\.LBB\d+_\d+)$", ln
        )
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            regions.append((labels[m.group(1)], i, m.group(1)))
    inner = [r for r in regions if not any(r[0] <= o[0] and o[1] <= r[1] and o != r for o in regions)]
    begin, end = {s: name for s, _, name in inner}, {e for _, e, _ in inner}
    out = []
    for i, ln in enumerate(lines):
        out.append(ln)
        if i in begin:
            out.append(f"# LLVM-MCA-BEGIN {begin[i]}")
        if i in end:
            out.append("# LLVM-MCA-END")
    return "\n".join(out) + "\n"


def mca(asm: str, cpu: str) -> list[float] | str:
    tool = find_tool("llvm-mca", "llvm-14")
    cmd = [tool, "-mtriple=aarch64-linux-gnu", f"-mcpu={cpu}", "-iterations=100", "-json", "-"]
    p = subprocess.run(cmd, input=mark_loops(asm), capture_output=True, text=True)
    if p.returncode != 0:
        return "llvm-mca: " + (p.stderr.strip().splitlines() or ["failed"])[0][:80]
    regions = json.loads(p.stdout).get("CodeRegions", [])
    return [
        round(r["SummaryView"]["TotalCycles"] / max(1, r["SummaryView"]["Iterations"]), 1) for r in regions
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", nargs="?", default="host")
    ap.add_argument(
        "--mca", action="store_true", help="llvm-mca cycles/iteration of innermost loops (aarch64)"
    )
    ap.add_argument("--dump", type=Path, help="write each kernel's assembly to this folder")
    args = ap.parse_args()
    target = get_target(args.target)
    print(f"target {target.name}: {target.triple} cpu={target.cpu} vector_bits={target.vector_bits}")
    for name, f in kernels().items():
        asm = emit_assembly(f, target)
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            (args.dump / f"{name}.s").write_text(asm)
        s = summarize(asm, target.arch)
        regs = ",".join(s["fma_regs"])
        line = f"  {name:16s} {s['insts']:5d} insts  fma {s['fma']:3d} {regs:8s} calls {s['calls']}"
        if args.mca and target.arch == "aarch64":
            line += f"  mca cycles/iter {mca(asm, target.cpu)}"
        print(line)


if __name__ == "__main__":
    main()
