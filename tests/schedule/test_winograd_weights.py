"""winograd_weight_nchwc: the Winograd weight transform U = G w G^T as a kernel, the one a CPU
build's tir_create runs (schedule/algorithms/winograd_weights.py, compiler_prepare.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.loop.printer import to_text
from tensorir.ops.kernel import op_kernel, run_op
from tensorir.ops.layout import pack_weight
from tensorir.ops.registry import get_op
from tensorir.schedule.algorithms.winograd_nchwc import weight_transform_nchwc
from tensorir.schedule.algorithms.winograd_weights import OP
from tensorir.target import get_target

AVX2 = get_target("x86_64-v3")  # 8 float32 lanes on every host: the printed IR is fixed


def _packed(k: int, c: int, dtype=np.float32, block: int = 16, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng([seed, k, c]).uniform(-1, 1, (k, c, 3, 3)).astype(dtype)
    return pack_weight(w, block, block, False)


@pytest.mark.parametrize("m", [2, 4, 6])
def test_kernel_matches_the_compile_time_transform(m: int) -> None:
    wp = _packed(48, 32)
    (u,) = run_op(OP, [wp], {"m": m})
    ref = weight_transform_nchwc(wp, m)  # float64 inside; the kernel sums in float32
    assert u.shape == ref.shape == (m + 2, m + 2, 3, 32, 16) and u.dtype == np.float32
    np.testing.assert_allclose(u, ref, rtol=0, atol=4e-7 * np.abs(ref).max())


def test_float16_weights_are_summed_in_float32() -> None:
    wp = _packed(32, 16, np.float16, block=8)
    (u,) = run_op(OP, [wp], {"m": 4})
    ref = weight_transform_nchwc(wp, 4)
    assert u.dtype == np.float16
    np.testing.assert_allclose(u.astype(np.float32), ref.astype(np.float32), rtol=1e-3, atol=1e-4)


def test_reference_and_infer() -> None:
    op = get_op(OP)
    wp = _packed(32, 16)
    np.testing.assert_array_equal(op.run_reference([wp], {"m": 2})[0], weight_transform_nchwc(wp, 2))
    w = TensorType((2, 1, 3, 3, 16, 16), "float32")
    assert op.infer([w], {"m": 6}) == [TensorType((8, 8, 2, 16, 16), "float32")]
    for ins, attrs in [
        ([w], {"m": 3}),  # no such tile size
        ([TensorType((32, 16, 3, 3), "float32")], {"m": 2}),  # not packed
        ([TensorType((2, 1, 5, 5, 16, 16), "float32")], {"m": 2}),  # not 3x3
        ([w, w], {"m": 2}),
    ]:
        with pytest.raises(ShapeError):
            op.infer(ins, attrs)


W64 = TensorType((8, 8, 3, 3, 8, 8), "float32")  # 64 -> 64 channels in blocks of 8


def test_before_the_loop_passes() -> None:
    """The schedule: output channel blocks in parallel; per row e of U (unrolled: e picks G's
    row in G w) and input channel, G w's 3 vectors in a local buffer, then U's row (f
    unrolled: it picks G's row in (G w) G^T)."""
    text = to_text(op_kernel(OP, [W64], {"m": 2}, AVX2, passes=False))
    heads = ("for ", "wino_weight_G =")
    loops = [line.rstrip(":") for line in text.splitlines() if line.strip().startswith(heads)]
    assert [line for line in loops if "_1 in" not in line and "ki_o" not in line] == [
        "  for kb in parallel(0, 8)",
        "    for e in unrolled(0, 4)",
        "      for ch in range(0, 64)",
        '        wino_weight_G = allocate(f32[1,3,1,1,8], "local")',
        "            for s in range(0, 3)",
        "                        for ki_i in vectorized(0, 8)",
        "        for f in unrolled(0, 4)",
        "            for ki_i in vectorized(0, 8)",
    ]


def _w(r: int) -> str:  # w[kb, ch // 8, r, s, ch % 8, :]
    return f"in0[ramp(kb*4608 + ch//8*576 + s*64 + ch%8*8{f' + {r * 192}' if r else ''}, 1, 8)]"


def _t(s: int) -> str:  # (G w)[e, s, kb, ch, :] of this (e, ch)
    return f"wino_weight_G[ramp({s * 8}, 1, 8)]"


HALF, NEG = "broadcast(0.5, 8)*", "broadcast(-0.5, 8)*"
# F(2x2, 3x3) at the points 0, 1, -1 and infinity: G = [[-1, 0, 0], [1/2, 1/2, 1/2],
# [1/2, -1/2, 1/2], [0, 0, 1]]; row i of G applied to the terms x(0), x(1), x(2)
G_ROWS = [
    lambda x: f"broadcast(0.0, 8) - {x(0)}",
    lambda x: f"{HALF}{x(0)} + {HALF}{x(1)} + {HALF}{x(2)}",
    lambda x: f"{HALF}{x(0)} + {NEG}{x(1)} + {HALF}{x(2)}",
    lambda x: x(2),
]


def test_after_the_loop_passes() -> None:
    """Each unrolled row keeps its nonzero terms of G, a +-1 is an add or a subtraction, never
    a multiplication, and every access is a whole ob = 8 vector; U is written as 4 streams."""
    text = to_text(op_kernel(OP, [W64], {"m": 2}, AVX2))
    want = [
        "def winograd_weight_nchwc(in0: f32[8,8,3,3,8,8], winograd_weight_nchwc: f32[4,4,8,64,8]):",
        "  for kb in parallel(0, 8):",
    ]
    for e, g_row in enumerate(G_ROWS):
        want += [
            "    for ch in range(0, 64):",
            '      wino_weight_G = allocate(f32[1,3,1,1,8], "local")',
            "      for s in range(0, 3):",
            f"        wino_weight_G[ramp(s*8, 1, 8)] = {g_row(_w)}",
        ]
        for f, row in enumerate(G_ROWS):
            off = e * 16384 + f * 4096  # U[e, f, kb, ch, :]
            u = f"winograd_weight_nchwc[ramp(kb*512 + ch*8{f' + {off}' if off else ''}, 1, 8)]"
            want.append(f"      {u} = {row(_t)}")
    assert text.splitlines() == want


def test_no_parallel_loop_for_a_small_weight() -> None:
    text = to_text(op_kernel(OP, [TensorType((2, 1, 3, 3, 8, 8), "float32")], {"m": 2}, AVX2))
    assert "parallel" not in text and text.splitlines()[1] == "  for kb in range(0, 2):"
