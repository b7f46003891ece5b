"""The exact GELU written out, as PyTorch's exporter (before opset 20) and many BERT exports
write it, recognized as one `gelu` op (a canonicalize rule):

    x * 0.5 * (1 + erf(x / sqrt(2)))        in any grouping of the three factors, the / a
                                            mul by 1/sqrt(2) after canonicalize

    %5 = mul(%x, %c_half)                   %9 = gelu(%x) approximate=none
    %6 = mul(%x, %c_rsqrt2)        ->
    %7 = erf(%6)
    %8 = add(%7, %c_one)
    %9 = mul(%5, %8)

Written out, the chain reads x twice, so fuse_ops stops it at the dense before it and runs it
as two more kernels over the FFN's widest tensor; one op fuses into the dense's epilogue. The
factors are matched on a product tree of single-use muls whose leaves must be exactly x, one
scalar 0.5 and one (erf(x * 1/sqrt(2)) + 1), x read by nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tensorir.graph.graph import Graph, Value

Scalar = Callable[[Value], "float | None"]


def _factors(g: Graph, v: Value, top: bool) -> list[Value]:
    """The leaves of the product tree under v: muls read once (the top one any number of times)."""
    node = g.node(v.node)
    if node.op != "mul" or len(g.inputs_of(v.node)) != 2 or (not top and len(g.consumers(v)) != 1):
        return [v]
    return [leaf for u in g.inputs_of(v.node) for leaf in _factors(g, u, False)]


def _erf_term_input(g: Graph, v: Value, scalar: Scalar) -> Value | None:
    """x when v is erf(x * 1/sqrt(2)) + 1 (or erf(x / sqrt(2)) + 1), each link read once."""
    add = g.node(v.node)
    if add.op != "add" or len(g.consumers(v)) != 1:
        return None
    for e, one in (g.inputs_of(v.node), reversed(g.inputs_of(v.node))):
        if scalar(one) != 1.0 or g.node(e.node).op != "erf" or len(g.consumers(e)) != 1:
            continue
        (s,) = g.inputs_of(e.node)
        scaled = g.node(s.node)
        if scaled.op not in ("mul", "div") or len(g.consumers(s)) != 1 or len(g.inputs_of(s.node)) != 2:
            continue
        for x, k in (g.inputs_of(s.node), reversed(g.inputs_of(s.node))):
            c = scalar(k)
            if c is None or c == 0 or (scaled.op == "div" and k != g.inputs_of(s.node)[1]):
                continue
            factor = 1 / c if scaled.op == "div" else c
            if math.isclose(factor, 1 / math.sqrt(2), rel_tol=1e-5):
                return x
    return None


def gelu_input(g: Graph, y: Value, scalar: Scalar) -> Value | None:
    """x when y is the written-out exact GELU of x (module docstring), else None."""
    leaves = _factors(g, y, True)
    if len(leaves) != 3:
        return None
    halves = [v for v in leaves if scalar(v) == 0.5]
    terms = [(v, _erf_term_input(g, v, scalar)) for v in leaves]
    terms = [(v, x) for v, x in terms if x is not None]
    if len(halves) != 1 or len(terms) != 1:
        return None
    term, x = terms[0]
    rest = [v for v in leaves if v != halves[0] and v != term]
    if rest != [x]:
        return None
    # x feeds the product (directly or through the 0.5 mul) and the erf's scaling, nothing else
    return x if len(g.consumers(x)) == 2 else None
