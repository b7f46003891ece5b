"""llvm-mca throughput of the int8 kernels' hot ARM64 loops: sdot against the widening fallback.

    python -m benchmarks.arm64_int8_mca            # qdense and qconv1x1, cortex-a76 and cortex-a55
    python -m benchmarks.arm64_int8_mca --json out.json

Each kernel is built twice for `linux-arm64:CPU`, default schedule: as fold_qdq makes it for a
core with dotprod (x_offset=128: activations xor 0x80, `sdot`, ops/qdense.py) and as for one
without (x_offset=0: the widening multiply-adds of codegen/llvm_dot.py, which is what every
ARM64 build ran before sdot). The hot loop is the innermost loop (benchmarks/arm64_mca.py)
with the most multiply-adds: a `sdot v.4s` counts 16 (8 for .2s), a `mla` / `mul` on .4s 4.
MAC/cycle is those over llvm-mca's cycles per iteration (LLVM 14's models: cortex-a76 is
cortex-a57's, coarse; the in-order cortex-a55 sees the load and latency stalls).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.arm64_mca import CPUS, _mnemonic, innermost_loops, run_mca
from tensorir.codegen import emit_assembly
from tensorir.graph.types import TensorType
from tensorir.ops.kernel import op_kernel
from tensorir.ops.qconv import pack_conv_weights
from tensorir.ops.qdense import offset_bias, pack_weights

# name: (op, x shape, output channels, vector): BERT-base's dense, MobileNetV2's expansion
# 1x1 on 28x28 (pixels vectorized)
KERNELS = {
    "qdense_128x768x768": ("qdense", (128, 768), 768, ""),
    "qconv1x1_32to192_28x28": ("qconv1x1", (1, 32, 28, 28), 192, "pixels"),
}


def _inputs(op: str, xshape: tuple[int, ...], n: int, vector: str, x_offset: int) -> tuple[list, dict]:
    k = xshape[1]
    w = np.zeros((n, k), np.int8)
    bias = offset_bias(np.zeros(n, np.int64), w, x_offset).astype(np.int32)
    packed = pack_weights(w) if op == "qdense" else pack_conv_weights(w, vector)
    ins = [np.zeros(xshape, np.uint8), packed, bias, np.ones(n, np.float32)]
    attrs: dict[str, Any] = {"zero_point": 0, "lo": 0, "hi": 255}
    attrs |= {"n": n} if op == "qdense" else {"vector": vector}
    attrs |= {"x_offset": x_offset} if x_offset else {}
    return ins, attrs


def macs(body: list[str]) -> int:
    """Multiply-adds of one iteration of a loop body."""
    total = 0
    for ins in body:
        m = _mnemonic(ins)
        if m == "sdot":
            total += 16 if ".4s" in ins else 8
        elif m in ("mla", "mul") and ".4s" in ins:
            total += 4
    return total


def measure(name: str, cpu: str, x_offset: int) -> dict[str, Any]:
    op, xshape, n, vector = KERNELS[name]
    ins, attrs = _inputs(op, xshape, n, vector, x_offset)
    target = f"linux-arm64:{cpu}"
    asm = emit_assembly(op_kernel(op, [TensorType.of(a) for a in ins], attrs, target), target)
    body = max(innermost_loops(asm).values(), key=macs)
    cycles, n = run_mca(body, cpu)["cycles"], macs(body)
    return {"instructions": len(body), "macs": n, "cycles": cycles, "mac_per_cycle": n / cycles}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the rows here too")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'kernel':24} {'cpu':11} {'path':6} {'ins':>4} {'MAC':>5} {'cycles':>7} {'MAC/cycle':>9}")
    for name in KERNELS:
        for cpu in CPUS:
            for path, x_offset in (("widen", 0), ("sdot", 128)):
                r = measure(name, cpu, x_offset) | {"kernel": name, "cpu": cpu, "path": path}
                rows.append(r)
                print(
                    f"{name:24} {cpu:11} {path:6} {r['instructions']:4d} {r['macs']:5d} "
                    f"{r['cycles']:7.1f} {r['mac_per_cycle']:9.1f}"
                )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
