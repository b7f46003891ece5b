"""Activation ranges from calibration runs: min-max, percentile and KL-divergence (entropy).

Every method sees a tensor's values over all calibration samples:

    minmax      [min x, max x]
    percentile  T = the given percentile of |x| (a 2048-bin histogram of |x| over
                [0, max |x|], interpolated inside the bin), the range [max(min x, -T), min(max x, T)]
    kl          T from TensorRT's entropy calibration (Migacz, "8-bit Inference with
                TensorRT", GTC 2017): a 2048-bin histogram of |x|; for each candidate cut
                i = L .. 2048 bins, the reference distribution P is the first i bins with
                the clipped tail added to the last, the candidate Q is those i bins merged
                into L levels and spread back over the bins that were nonzero; T is the
                cut with the least KL(P || Q), at the upper edge of its last bin; the range
                is clipped to [-T, T] as for percentile. L is 128 (the levels of |x| in an
                8-bit code), 256 for a tensor without negative values (its uint8 code
                spends all levels on [0, T]); the first bin's count is replaced by the
                second's, as NVIDIA's pytorch-quantization does, so the spike of exact
                zeros after a ReLU does not drag T down

The histograms need the absolute maximum first, so percentile and kl take two passes over
the samples (`RangeCollector.observe` then `HistogramCollector.observe`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

METHODS = ("minmax", "percentile", "kl")
BINS = 2048
QUANT_LEVELS = 128  # the positive levels of a symmetric 8-bit code


@dataclass
class Range:
    lo: float = np.inf
    hi: float = -np.inf

    @property
    def absmax(self) -> float:
        return max(abs(self.lo), abs(self.hi))


class RangeCollector:
    """Per-tensor min and max over every observed sample."""

    def __init__(self, names: Iterable[str]) -> None:
        self.ranges = {n: Range() for n in names}

    def observe(self, values: Mapping[str, np.ndarray]) -> None:
        for name, r in self.ranges.items():
            x = values[name]
            if x.size:
                r.lo = min(r.lo, float(np.min(x)))
                r.hi = max(r.hi, float(np.max(x)))


class HistogramCollector:
    """Per-tensor histogram of |x| with BINS bins over [0, the tensor's max |x|]."""

    def __init__(self, ranges: Mapping[str, Range], bins: int = BINS) -> None:
        self.top = {n: max(r.absmax, 1e-30) for n, r in ranges.items()}
        self.hists = {n: np.zeros(bins, np.int64) for n in ranges}

    def observe(self, values: Mapping[str, np.ndarray]) -> None:
        for name, hist in self.hists.items():
            a = np.abs(values[name].astype(np.float32, copy=False)).ravel()
            hist += np.histogram(a, bins=len(hist), range=(0.0, self.top[name]))[0]


def percentile_threshold(hist: np.ndarray, top: float, percentile: float) -> float:
    """The `percentile` (0..100) of the values binned in `hist` over [0, top]."""
    cdf = np.cumsum(hist, dtype=np.float64)
    if cdf[-1] == 0:
        return 0.0
    want = cdf[-1] * percentile / 100.0
    i = int(np.searchsorted(cdf, want, side="left"))
    i = min(i, len(hist) - 1)
    below = cdf[i - 1] if i else 0.0
    frac = (want - below) / hist[i] if hist[i] else 1.0
    return float((i + min(max(frac, 0.0), 1.0)) * top / len(hist))


def _smooth(p: np.ndarray, eps: float = 1e-4) -> np.ndarray | None:
    """`p` with eps moved onto its zero entries (from the nonzero ones), None when all zero."""
    zeros = p == 0
    n_zero, n_nonzero = int(zeros.sum()), p.size - int(zeros.sum())
    if n_nonzero == 0:
        return None
    return p + eps * zeros - (eps * n_zero / n_nonzero) * ~zeros


def kl_divergence_at(hist: np.ndarray, i: int, levels: int = QUANT_LEVELS) -> float:
    """KL(P || Q) of the cut after `i` bins (see the module docstring)."""
    h = hist[:i].astype(np.float64)
    h[0] = h[1]  # ReLU's exact zeros would dominate P otherwise
    p = h.copy()
    p[i - 1] += float(hist[i:].sum())
    nonzero = p != 0
    starts = (np.arange(levels) * i) // levels
    merged = np.add.reduceat(h, starts)
    counts = np.add.reduceat(nonzero.astype(np.float64), starts)
    sizes = np.diff(np.append(starts, i))
    q = np.repeat(np.divide(merged, counts, out=np.zeros_like(merged), where=counts > 0), sizes) * nonzero
    p, q = p / p.sum(), q / max(q.sum(), 1e-300)
    ps, qs = _smooth(p), _smooth(q)
    if ps is None or qs is None:
        return np.inf
    m = ps > 0
    return float(np.sum(ps[m] * np.log(ps[m] / np.maximum(qs[m], 1e-12))))


def kl_threshold(hist: np.ndarray, top: float, levels: int = QUANT_LEVELS) -> float:
    """TensorRT's entropy threshold of the |x| histogram `hist` over [0, top]."""
    n = len(hist)
    nz = np.nonzero(hist)[0]
    if not len(nz):
        return 0.0
    last = int(nz[-1]) + 1  # cuts past the last nonzero bin all equal this one
    if last <= levels:
        return float(last * top / n)
    kls = [kl_divergence_at(hist, i, levels) for i in range(levels, last + 1)]
    best = levels + int(np.argmin(kls))
    return float(best * top / n)


def clipped_range(r: Range, threshold: float) -> tuple[float, float]:
    return max(r.lo, -threshold), min(r.hi, threshold)


def activation_ranges(
    ranges: Mapping[str, Range],
    hists: HistogramCollector | None,
    method: str,
    percentile: float = 99.99,
) -> dict[str, tuple[float, float]]:
    """The range (lo, hi) of each tensor that `method` picks."""
    if method == "minmax":
        return {n: (r.lo, r.hi) for n, r in ranges.items()}
    assert hists is not None, method
    out = {}
    for n, r in ranges.items():
        hist, top = hists.hists[n], hists.top[n]
        if method == "percentile":
            t = percentile_threshold(hist, top, percentile)
        else:
            t = kl_threshold(hist, top, 2 * QUANT_LEVELS if r.lo >= 0 else QUANT_LEVELS)
        out[n] = clipped_range(r, t)
    return out
