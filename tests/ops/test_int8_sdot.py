"""ARM's sdot for the integer kernels (codegen/llvm_dot.py dot4_s8s8, ops/qdense.py x_offset):
qdense and qconv1x1 built for an aarch64 core with dotprod read x - 128 as int8 bytes, the bias
holding + 128 * sum_k W, and compute the same bits as the plain uint8 reference: `sdot` in the
assembly for cortex-a76 / cortex-a55, none for cortex-a53 (ARMv8.0, no dotprod: the widening
fallback, signed), bit-exact under qemu; the same kernels on the host (x86: the widening
fallback) and in the loop interpreter."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from benchmarks import arm64_int8_mca
from tensorir.codegen import emit_assembly
from tensorir.codegen.link import run_arm64
from tensorir.graph.types import TensorType
from tensorir.loop.interp import run
from tensorir.ops.kernel import op_kernel, run_op, scratch_arrays
from tensorir.ops.qconv import pack_conv_weights
from tensorir.ops.qdense import offset_bias, pack_weights, sdot_offset
from tensorir.ops.registry import get_op
from tensorir.target import get_target

RNG = np.random.default_rng(1818)
A53 = dataclasses.replace(get_target("linux-arm64"), name="linux-arm64:cortex-a53", cpu="cortex-a53")


def _ins(x: np.ndarray, w: np.ndarray, packed: np.ndarray, attrs: dict) -> tuple[list, list, dict]:
    """(plain inputs, inputs with x_offset 128, the latter's attrs): one W, two biases."""
    n = w.shape[0]
    bias = RNG.integers(-20000, 20000, n).astype(np.int32)
    scale = (RNG.random(n) * 4e-4 + 1e-4).astype(np.float32)
    attrs |= {"zero_point": int(RNG.integers(0, 256)), "lo": 3, "hi": 252}
    sbias = offset_bias(bias, w, 128).astype(np.int32)
    return [x, packed, bias, scale], [x, packed, sbias, scale], attrs | {"x_offset": 128}


def _case(name: str) -> tuple[str, list, list, dict, dict]:
    """(op, plain inputs, sdot inputs, plain attrs, sdot attrs) for a case name."""
    shapes = {"qdense": (16, 64, 64), "pixels": (1, 32, (8, 8), 40), "channels": (1, 32, (7, 7), 48)}
    if name == "qdense":
        m, k, n = shapes[name]
        x = RNG.integers(0, 256, (m, k), dtype=np.uint8)
        w = RNG.integers(-128, 128, (n, k), dtype=np.int8)
        plain, signed, attrs = _ins(x, w, pack_weights(w), {"n": n})
        return "qdense", plain, signed, {k: v for k, v in attrs.items() if k != "x_offset"}, attrs
    b, c, hw, cout = shapes[name]
    x = RNG.integers(0, 256, (b, c, *hw), dtype=np.uint8)
    w = RNG.integers(-128, 128, (cout, c), dtype=np.int8)
    plain, signed, attrs = _ins(x, w, pack_conv_weights(w, name), {"vector": name})
    return "qconv1x1", plain, signed, {k: v for k, v in attrs.items() if k != "x_offset"}, attrs


CASES = ["qdense", "pixels", "channels"]


def test_sdot_offset_is_128_exactly_for_aarch64_with_dotprod():
    assert sdot_offset(get_target("linux-arm64")) == 128
    assert sdot_offset(get_target("android-arm64:cortex-a55")) == 128
    assert sdot_offset(A53) == 0
    assert sdot_offset(get_target("x86_64-v4")) == 0


@pytest.mark.parametrize("case", CASES)
def test_offset_reference_is_the_plain_reference(case):
    """x - 128 against W plus 128 * sum_k W in the bias: the same accumulator, the same bits."""
    op, plain, signed, attrs, sattrs = _case(case)
    want = get_op(op).run_reference(plain, attrs)[0]
    np.testing.assert_array_equal(get_op(op).run_reference(signed, sattrs)[0], want)
    unfixed = get_op(op).run_reference(plain, sattrs)[0]  # the offset without the bias: wrong
    assert np.count_nonzero(unfixed != want) > want.size // 4


@pytest.mark.parametrize("case", CASES)
def test_offset_kernel_on_the_host_and_in_the_interpreter(case):
    op, plain, signed, attrs, sattrs = _case(case)
    want = get_op(op).run_reference(plain, attrs)[0]
    np.testing.assert_array_equal(run_op(op, signed, sattrs, target="host")[0], want)
    func = op_kernel(op, [TensorType.of(a) for a in signed], sattrs, "linux-arm64")
    args = [*signed, np.zeros_like(want), *scratch_arrays(func)]
    run(func, args)
    np.testing.assert_array_equal(args[len(signed)], want)


@pytest.mark.parametrize("case", CASES)
def test_sdot_exactly_with_dotprod(case):
    op, _, signed, _, sattrs = _case(case)
    types = [TensorType.of(a) for a in signed]
    for target in ("linux-arm64", "linux-arm64:cortex-a55"):
        asm = emit_assembly(op_kernel(op, types, sattrs, target), target)
        assert re.search(r"\bsdot\s+v\d+\.4s, v\d+\.16b, v\d+\.16b", asm), target
    without = emit_assembly(op_kernel(op, types, sattrs, A53), A53)
    assert "sdot" not in without and re.search(r"\b[su]mlal2?\s|\bmla\s|\bmul\s", without)


@pytest.mark.arm64
@pytest.mark.parametrize("target", ["linux-arm64", "A53"])
@pytest.mark.parametrize("case", CASES)
def test_sdot_kernel_is_bit_exact_under_qemu(case, target):
    """cortex-a76 (sdot) and cortex-a53 (the widening fallback) against the plain reference."""
    op, plain, signed, attrs, sattrs = _case(case)
    target = A53 if target == "A53" else get_target(target)
    want = get_op(op).run_reference(plain, attrs)[0]
    func = op_kernel(op, [TensorType.of(a) for a in signed], sattrs, target)
    got = run_arm64(func, [*signed, np.empty_like(want), *scratch_arrays(func)], target=target)[len(signed)]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cpu", ["cortex-a76", "cortex-a55"])
def test_sdot_hot_loop_does_several_times_the_multiply_adds_per_cycle(cpu):
    """benchmarks/arm64_int8_mca.py: llvm-mca's hot loop of the 768x768 dense, same tile
    (as many multiply-adds per iteration or more) at 4x the widening path's rate at least
    (measured 9.7x on cortex-a76's model, 6.4x on cortex-a55's)."""
    widen = arm64_int8_mca.measure("qdense_128x768x768", cpu, 0)
    sdot = arm64_int8_mca.measure("qdense_128x768x768", cpu, 128)
    assert sdot["macs"] >= widen["macs"] > 0
    assert sdot["mac_per_cycle"] > 4 * widen["mac_per_cycle"]
