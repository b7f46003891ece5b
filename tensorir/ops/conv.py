"""Convolutions: `conv` and `conv_transpose` over 1-D, 2-D and 3-D images (NC + spatial).

Attributes are ONNX's, normalized by the frontend: `strides`, `dilations` (one per
spatial axis), `pads` (all begins then all ends), `group`; `conv_transpose` also has
`output_padding` (added at the end of each spatial axis). Missing attributes take
ONNX's defaults, so graphs built by hand may leave them out.

The references compute in float32 (float64 stays float64) with im2col + batched
matmul over a strided window view, and return the input dtype.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from tensorir.errors import ShapeError
from tensorir.graph.types import TensorType
from tensorir.ops.infer import Types
from tensorir.ops.registry import register_op

Ints = tuple[int, ...]


# ---- shared helpers (also used by pool.py) ----------------------------------
def acc_dtype(dtype: np.dtype) -> type:
    """The dtype a float reference computes in: float64 stays, the rest use float32."""
    return np.float64 if dtype == np.float64 else np.float32


def spatial_attrs(
    nsp: int,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
) -> tuple[Ints, Ints, Ints]:
    """strides, pads, dilations with ONNX defaults filled in and lengths checked."""
    s = tuple(strides) if strides is not None else (1,) * nsp
    p = tuple(pads) if pads is not None else (0,) * (2 * nsp)
    d = tuple(dilations) if dilations is not None else (1,) * nsp
    if len(s) != nsp or len(d) != nsp or len(p) != 2 * nsp:
        raise ShapeError(
            f"{nsp} spatial axes need {nsp} strides/dilations and {2 * nsp} pads, "
            f"got strides={list(s)}, dilations={list(d)}, pads={list(p)}"
        )
    if min(s, default=1) < 1 or min(d, default=1) < 1 or min(p, default=0) < 0:
        raise ShapeError(f"bad strides={list(s)}, dilations={list(d)} or pads={list(p)}")
    return s, p, d


def window_out_size(size: int, k: int, s: int, d: int, pb: int, pe: int, ceil_mode: bool = False) -> int:
    """Output length of a sliding window (ONNX rule; ceil_mode drops a window starting in pads)."""
    span = size + pb + pe - ((k - 1) * d + 1)
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + pb:
        out -= 1
    return out


def out_spatial(
    in_shape: Ints, kernel: Ints, strides: Ints, pads: Ints, dilations: Ints, ceil_mode: bool = False
) -> Ints:
    n = len(in_shape)
    out = tuple(
        window_out_size(in_shape[i], kernel[i], strides[i], dilations[i], pads[i], pads[n + i], ceil_mode)
        for i in range(n)
    )
    if min(out, default=1) < 1:
        raise ShapeError(
            f"window {list(kernel)} (dilations {list(dilations)}, pads {list(pads)}) does not fit "
            f"the spatial shape {list(in_shape)}: output would be {list(out)}"
        )
    return out


def pad_for_windows(
    x: np.ndarray, kernel: Ints, strides: Ints, pads: Ints, dilations: Ints, out: Ints, fill: Any
) -> np.ndarray:
    """Pad the spatial axes by `pads`, plus whatever the last (ceil-mode) window still needs."""
    n = len(kernel)
    widths = [(0, 0)] * (x.ndim - n)
    for i in range(n):
        need = (out[i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1
        end = max(pads[n + i], need - x.shape[x.ndim - n + i] - pads[i])
        widths.append((pads[i], end))
    if not any(w for pair in widths for w in pair):
        return x
    return np.pad(x, widths, mode="constant", constant_values=fill)


def window_view(xp: np.ndarray, kernel: Ints, strides: Ints, dilations: Ints, out: Ints) -> np.ndarray:
    """Read-only view (*lead, *out, *kernel) of the windows over xp's trailing len(kernel) axes."""
    n = len(kernel)
    lead = xp.ndim - n
    st = xp.strides
    shape = (*xp.shape[:lead], *out, *kernel)
    strides = (
        *st[:lead],
        *(st[lead + i] * strides[i] for i in range(n)),
        *(st[lead + i] * dilations[i] for i in range(n)),
    )
    return as_strided(xp, shape, strides, writeable=False)


# ---- conv -----------------------------------------------------------------------
def _check_common(ins: Types, what: str) -> int:
    x, w = ins[0], ins[1]
    if x.ndim < 3:
        raise ShapeError(f"{what} input must be N x C x spatial (rank >= 3), got {x}")
    if w.ndim != x.ndim:
        raise ShapeError(f"{what} weight {w} must have the rank of input {x}")
    if w.dtype != x.dtype:
        raise ShapeError(f"{what} weight dtype {w.dtype} differs from input dtype {x.dtype}")
    return x.ndim - 2


def _check_bias(ins: Types, m: int) -> None:
    if len(ins) > 2 and ins[2].shape != (m,):
        raise ShapeError(f"bias {ins[2]} must have shape [{m}] (one per output channel)")


def _conv_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    nsp = _check_common(ins, "conv")
    x, w = ins[0], ins[1]
    g = int(attrs.get("group", 1))
    s, p, d = spatial_attrs(nsp, attrs.get("strides"), attrs.get("pads"), attrs.get("dilations"))
    if g < 1 or x.shape[1] != w.shape[1] * g or w.shape[0] % g:
        raise ShapeError(
            f"weight {w} does not match input {x} with group={g}: need input channels "
            f"{x.shape[1]} == weight dim 1 ({w.shape[1]}) * group and weight dim 0 divisible by group"
        )
    _check_bias(ins, w.shape[0])
    out = out_spatial(x.shape[2:], w.shape[2:], s, p, d)
    return [TensorType((x.shape[0], w.shape[0], *out), x.dtype)]


def _conv_flops(ins: list[TensorType], attrs: Mapping[str, Any], out: TensorType) -> int:
    """w: (Cout, Cin/g, k...): one dot product per output element."""
    return 2 * out.size * math.prod(int(d) for d in ins[1].shape[1:])


@register_op(
    "conv", infer=_conv_infer, pattern="anchor", tunable=True, layout="conv", flops=_conv_flops, gpu="rows"
)
def conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    group: int = 1,
) -> np.ndarray:
    nsp = x.ndim - 2
    s, p, d = spatial_attrs(nsp, strides, pads, dilations)
    ct = acc_dtype(x.dtype)
    k = w.shape[2:]
    out = out_spatial(x.shape[2:], k, s, p, d)
    xp = pad_for_windows(x.astype(ct, copy=False), k, s, p, d, out, 0)
    win = window_view(xp, k, s, d, out)  # N, C, *out, *k
    n, c, m, g = x.shape[0], x.shape[1], w.shape[0], group
    cg, mg, npix, ksz = c // g, m // g, math.prod(out), math.prod(k)
    win = win.reshape(n, g, cg, *out, *k)
    # im2col as g x (cg * taps) x (n * pixels), so the product lands in output layout
    perm = (1, 2, *range(3 + nsp, 3 + 2 * nsp), 0, *range(3, 3 + nsp))
    cols = win.transpose(perm).reshape(g, cg * ksz, n * npix)
    y = np.matmul(w.astype(ct, copy=False).reshape(g, mg, cg * ksz), cols)  # g, mg, n * npix
    y = y.reshape(g, mg, n, *out).transpose(2, 0, 1, *range(3, 3 + nsp)).reshape(n, m, *out)
    if b is not None:
        y = y + b.astype(ct, copy=False).reshape(m, *(1,) * nsp)
    return np.ascontiguousarray(y, dtype=x.dtype)


# ---- conv_transpose -------------------------------------------------------------
def _convt_attrs(nsp: int, attrs: dict[str, Any]) -> tuple[Ints, Ints, Ints, Ints]:
    s, p, d = spatial_attrs(nsp, attrs.get("strides"), attrs.get("pads"), attrs.get("dilations"))
    op = tuple(attrs.get("output_padding") or (0,) * nsp)
    if len(op) != nsp or min(op, default=0) < 0:
        raise ShapeError(f"output_padding {list(op)} must be {nsp} non-negative ints")
    return s, p, d, op


def convt_out_spatial(in_shape: Ints, kernel: Ints, s: Ints, p: Ints, d: Ints, op: Ints) -> Ints:
    n = len(in_shape)
    out = tuple(
        s[i] * (in_shape[i] - 1) + op[i] + (kernel[i] - 1) * d[i] + 1 - p[i] - p[n + i] for i in range(n)
    )
    if min(out, default=1) < 1:
        raise ShapeError(f"conv_transpose output spatial shape {list(out)} is empty (pads {list(p)})")
    return out


def _convt_infer(ins: Types, attrs: dict[str, Any]) -> Types:
    nsp = _check_common(ins, "conv_transpose")
    x, w = ins[0], ins[1]
    g = int(attrs.get("group", 1))
    s, p, d, op = _convt_attrs(nsp, attrs)
    if g < 1 or x.shape[1] != w.shape[0] or w.shape[0] % g:
        raise ShapeError(
            f"weight {w} does not match input {x} with group={g}: need weight dim 0 == input "
            f"channels ({x.shape[1]}), divisible by group"
        )
    m = w.shape[1] * g
    _check_bias(ins, m)
    out = convt_out_spatial(x.shape[2:], w.shape[2:], s, p, d, op)
    return [TensorType((x.shape[0], m, *out), x.dtype)]


def _conv_transpose_flops(ins: list[TensorType], attrs: Mapping[str, Any], out: TensorType) -> int:
    """w: (Cin, Cout/g, k...): every input element scatters to a window."""
    return 2 * ins[0].size * math.prod(int(d) for d in ins[1].shape[1:])


@register_op("conv_transpose", infer=_convt_infer, pattern="anchor", flops=_conv_transpose_flops, gpu="rows")
def conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    strides: Ints | None = None,
    pads: Ints | None = None,
    dilations: Ints | None = None,
    group: int = 1,
    output_padding: Ints | None = None,
) -> np.ndarray:
    nsp = x.ndim - 2
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "output_padding": output_padding}
    s, p, d, op = _convt_attrs(nsp, attrs)
    ct = acc_dtype(x.dtype)
    n, c, g = x.shape[0], x.shape[1], group
    cg, mg, k, sp_in = c // g, w.shape[1], w.shape[2:], x.shape[2:]
    npix, ksz = math.prod(sp_in), math.prod(k)
    xm = x.astype(ct, copy=False).reshape(n, g, cg, npix).transpose(1, 0, 3, 2).reshape(g, n * npix, cg)
    cols = np.matmul(xm, w.astype(ct, copy=False).reshape(g, cg, mg * ksz))  # g, n*npix, mg*ksz
    cols = cols.reshape(g, n, *sp_in, mg, *k)
    # -> n, g, mg, *k, *sp_in: one (n, g, mg, *sp_in) slab per kernel tap
    cols = cols.transpose(1, 0, 2 + nsp, *range(3 + nsp, 3 + 2 * nsp), *range(2, 2 + nsp))
    full = [s[i] * (sp_in[i] - 1) + (k[i] - 1) * d[i] + 1 + op[i] for i in range(nsp)]
    buf = np.zeros((n, g, mg, *full), dtype=ct)
    for tap in np.ndindex(*k):
        region = tuple(slice(t * d[i], t * d[i] + s[i] * (sp_in[i] - 1) + 1, s[i]) for i, t in enumerate(tap))
        buf[(Ellipsis, *region)] += cols[(slice(None),) * 3 + tap]
    out = convt_out_spatial(sp_in, k, s, p, d, op)
    y = buf[(Ellipsis, *(slice(p[i], p[i] + out[i]) for i in range(nsp)))].reshape(n, g * mg, *out)
    if b is not None:
        y = y + b.astype(ct, copy=False).reshape(-1, *(1,) * nsp)
    return np.ascontiguousarray(y, dtype=x.dtype)
