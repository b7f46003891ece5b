"""Comparing a result with a reference (onnxruntime): the figures and the tolerance check that
`tir run --compare-ort` and `tir diff` report.

Figures, all over the whole tensor, in float64:
    max_abs   max |ours - ref|
    max_rel   max_abs / max |ref| (relative to the tensor's scale, so values near zero do not
              dominate; the floor of max |ref| is 1e-12)
    cosine    cosine similarity of the flattened tensors (1.0 when both are all zeros)
    sqnr_db   10 log10(sum ref^2 / sum (ours - ref)^2), inf when they are equal

A tensor passes when max_abs <= atol + rtol * max |ref| and cosine >= min_cosine; a shape
mismatch or a NaN where the reference has none never passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tensorir.errors import TirError

RTOL, ATOL, MIN_COSINE = 1e-3, 1e-4, 0.9999


@dataclass(frozen=True)
class Figures:
    max_abs: float
    max_rel: float
    cosine: float
    sqnr_db: float
    scale: float  # max |ref|

    def text(self) -> str:
        return (
            f"max_abs_err={self.max_abs:.3g} max_rel_err={self.max_rel:.3g} "
            f"cosine={_cosine_text(self.cosine)} sqnr={self.sqnr_db:.1f}dB"
        )


def _cosine_text(c: float) -> str:
    return "nan" if math.isnan(c) else f"{c:.6f}" if c < 0.999999 else f"1-{max(1 - c, 0):.1e}"


MISMATCH = Figures(math.inf, math.inf, math.nan, -math.inf, math.nan)


def figures(ours: np.ndarray, ref: np.ndarray) -> Figures:
    """The figures of `ours` against `ref` (MISMATCH when the shapes differ)."""
    a, b = np.asarray(ours).astype(np.float64), np.asarray(ref).astype(np.float64)
    if a.shape != b.shape:
        return MISMATCH
    if a.size == 0:
        return Figures(0.0, 0.0, 1.0, math.inf, 0.0)
    diff = a - b
    with np.errstate(invalid="ignore", over="ignore"):
        max_abs = float(np.max(np.abs(diff)))
        scale = float(np.max(np.abs(b)))
        noise, signal = float(np.sum(diff * diff)), float(np.sum(b * b))
        na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
        cosine = 1.0 if na == nb == 0 else float(np.dot(a.ravel(), b.ravel())) / (na * nb or math.inf)
    if math.isnan(max_abs) and np.array_equal(np.isnan(a), np.isnan(b)):  # NaN where ORT has NaN too
        return figures(np.where(np.isnan(a), 0, a), np.where(np.isnan(b), 0, b))
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    return Figures(max_abs, max_abs / max(scale, 1e-12), cosine, sqnr, scale)


@dataclass(frozen=True)
class Tolerance:
    rtol: float = RTOL
    atol: float = ATOL
    min_cosine: float = MIN_COSINE

    def __post_init__(self) -> None:
        for name, v in (("--rtol", self.rtol), ("--atol", self.atol)):
            if not (v >= 0 and math.isfinite(v)):
                raise TirError(f"{name} {v}: expected a finite number >= 0")
        if not -1 <= self.min_cosine <= 1:
            raise TirError(f"--min-cosine {self.min_cosine}: expected a number in [-1, 1]")

    def passes(self, f: Figures) -> bool:
        """max_abs <= atol + rtol * max|ref| and cosine >= min_cosine (False on NaN)."""
        return f.max_abs <= self.atol + self.rtol * f.scale and f.cosine >= self.min_cosine

    def text(self) -> str:
        return f"rtol={self.rtol:g} atol={self.atol:g} min-cosine={self.min_cosine:g}"


DEFAULT = Tolerance()
