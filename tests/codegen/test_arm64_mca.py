"""benchmarks/arm64_mca.py: its assembly analysis, and llvm-mca's estimate of the default
ARM64 code as a regression guard.

llvm-mca is deterministic (a model, not a timing), so the floors below are exact
properties of the generated code: they fail when a change to the defaults or the codegen
brings back scalar broadcast loads, spills in the FMA block or a lower modelled throughput.
Measured (benchmarks README section "ARM64 code quality"): the 1x1 conv's FMA block at
99.9% of the FMA-bound ideal on cortex-a76 (99.0% before fmla by lane) and 50.5% on
cortex-a55 (33.4% before).
"""

from __future__ import annotations

import pytest

from benchmarks import arm64_mca as M

LOOP = """\
.LBB0_1:
\tldr\tq0, [x0], #16
\tldr\ts1, [x1]
\tld1r\t{ v2.4s }, [x2]
\tfmla\tv3.4s, v4.4s, v0.s[1]
\tfmla\tv5.4s, v4.4s, v1.s[0]
\tfmla\tv6.4s, v4.4s, v2.4s
\tfmul\tv7.4s, v4.4s, v2.4s
\tstr\tq3, [sp, #32]
\tldr\tq3, [sp, #32]
\tsubs\tx3, x3, #1
\tb.ne\t.LBB0_1
.LBB0_2:
\tldr\ts0, [x4], #4
\tfmadd\ts1, s0, s2, s1
\tsubs\tx5, x5, #1
\tb.ne\t.LBB0_2
\tret
"""


def test_classify_counts_the_loop_mix():
    loops = M.innermost_loops(LOOP)
    assert list(loops) == [".LBB0_1", ".LBB0_2"]
    name, body = M.hot_loop(LOOP)
    assert name == ".LBB0_1" and len(body) == 11
    c = M.classify(body)
    assert (c["fmla"], c["fmul"], c["loads"], c["stores"], c["spills"]) == (3, 1, 4, 1, 2)
    assert c["bcast"] == {"lane": 2, "ldr_s": 1, "ld1r": 1, "dup": 0}
    assert M.reloaded_slots(body) == 2
    assert M.count_scalar_loops(LOOP) == 1  # .LBB0_2: a scalar tail


# llvm-mca comes with the ARM64 toolchain's llvm-14 (codegen/link.py APT_PACKAGES)
needs_mca = pytest.mark.arm64


@needs_mca
def test_model_fma_throughput():
    # LLVM 14: cortex-a76 is cortex-a57's model (one q fmla a cycle), cortex-a55 two
    assert M.fma_cycles("cortex-a76") == pytest.approx(1.0, abs=0.01)
    assert M.fma_cycles("cortex-a55") == pytest.approx(0.5, abs=0.01)


@needs_mca
@pytest.mark.parametrize(("cpu", "floor"), [("cortex-a76", 99.5), ("cortex-a55", 48.0)])
def test_conv1x1_fma_block(cpu, floor):
    asm, algo = M.kernel_asm("conv1x1", cpu)
    s = M.analyze(asm, cpu, "conv1x1", algo)
    assert algo == "direct"
    assert s.spills == 0, s
    assert s.bcast.get("ldr_s", 0) == 0 and s.bcast.get("ld1r", 0) == 0, s  # every broadcast by lane
    assert s.bcast["lane"] == s.fmla, s
    assert s.loads * 3 <= s.fmla, s  # one input vector per 4 input channels, weights reused
    assert s.scalar_loops == 0, s
    assert s.peak_pct >= floor, s


@needs_mca
def test_dense_fma_block_uses_lanes():
    asm, _ = M.kernel_asm("dense_bert", "cortex-a76")
    s = M.analyze(asm, "cortex-a76", "dense_bert")
    assert s.spills == 0 and s.bcast.get("ldr_s", 0) == 0 and s.bcast["lane"] == s.fmla, s
    assert s.peak_pct >= 99.0, s


@needs_mca
@pytest.mark.parametrize("kernel", ["conv1x1", "dense_bert"])
def test_float16_fma_blocks_broadcast_by_lane_and_double_the_multiply_adds(kernel):
    """--precision fp16 on cortex-a55 (ARMv8.2): fmla v.8h by element (h[k] of one vector
    load), no broadcast loads, about twice float32's multiply-adds per cycle (conv1x1 9.6 vs
    4.0, dense 9.2 vs 4.7 in the model)."""
    f16 = M.analyze(*M.kernel_asm(kernel, "cortex-a55", "float16")[:1], "cortex-a55", kernel, lanes=8)
    f32 = M.analyze(*M.kernel_asm(kernel, "cortex-a55")[:1], "cortex-a55", kernel)
    assert f16.spills == 0 and f16.bcast.get("ld1r", 0) <= f16.fmla // 8, f16
    assert f16.bcast["lane"] >= f16.fmla - f16.fmla // 8, f16
    assert f16.macs_per_cycle >= 1.8 * f32.macs_per_cycle, (f16, f32)
