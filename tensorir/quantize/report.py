"""The per-layer report of `tir quantize`: a printed table and its JSON form (--report)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tensorir.quantize.quantizer import QuantizeResult


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def format_table(result: QuantizeResult) -> str:
    head = (
        f"{'node':<28} {'op':<13} {'input':<28} {'range':>21} {'scale':>10} {'zp':>4} "
        f"{'ch':>5} {'sqnr_dB':>8}  kept as"
    )
    lines = [head]
    for r in result.rows:
        p = r.params
        rng = f"[{p.lo:.3g}, {p.hi:.3g}]"
        sqnr = "-" if math.isnan(r.sqnr_db) else f"{r.sqnr_db:.1f}"
        kept = "int8" if r.quantized else f"float ({r.reason})"
        lines.append(
            f"{_cut(r.node, 28):<28} {r.op:<13} {_cut(r.act, 28):<28} {rng:>21} {p.scale:>10.4g} "
            f"{p.zero_point:>4} {r.channels:>5} {sqnr:>8}  {kept}"
        )
    return "\n".join(lines)


def summary(result: QuantizeResult) -> str:
    n = sum(r.quantized for r in result.rows)
    method = result.method + (f" {result.percentile:g}%" if result.method == "percentile" else "")
    took = ", ".join(f"{k} {v:.1f}s" for k, v in result.seconds.items())
    outs = "; ".join(f"'{k}' {v:.1f} dB" for k, v in result.output_sqnr.items())
    checked = f"\nint8 model's outputs vs float over the calibration samples: SQNR {outs}" if outs else ""
    return (
        f"{n} of {len(result.rows)} ops quantized (int8 weights per channel, uint8 activations per "
        f"tensor; {method} over {result.samples} samples; ops under {result.min_sqnr:g} dB stay float); "
        f"{took}{checked}"
    )


def _finite(x: float) -> float | str | None:
    if math.isnan(x):
        return None
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def as_json(result: QuantizeResult) -> dict[str, Any]:
    return {
        "method": result.method,
        "percentile": result.percentile if result.method == "percentile" else None,
        "min_sqnr_db": result.min_sqnr,
        "samples": result.samples,
        "seconds": result.seconds,
        "output_sqnr_db": {k: _finite(v) for k, v in result.output_sqnr.items()},
        "weights": "int8 symmetric per output channel",
        "activations": "uint8 asymmetric per tensor",
        "layers": [
            {
                "node": r.node,
                "op": r.op,
                "input": r.act,
                "range": [r.params.lo, r.params.hi],
                "scale": r.params.scale,
                "zero_point": r.params.zero_point,
                "channels": r.channels,
                "sqnr_db": _finite(r.sqnr_db),
                "quantized": r.quantized,
                "reason": r.reason or None,
            }
            for r in result.rows
        ],
    }


def write_json(result: QuantizeResult, path: str | Path) -> None:
    Path(path).write_text(json.dumps(as_json(result), indent=1) + "\n")
