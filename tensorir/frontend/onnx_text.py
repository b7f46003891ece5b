"""Converters for text ops over integer tokens: TfIdfVectorizer (ops/tfidf.py). String
tensors stay refused (tensorir has no string dtype)."""

from __future__ import annotations

import numpy as np
import onnx

from tensorir.errors import ModelError
from tensorir.frontend.onnx import ImportContext, converter, node_label
from tensorir.graph.graph import Value


def pool_entries(node: onnx.NodeProto, attrs: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pool as (tokens (P, L) padded with 0, sizes (P,), output indexes (P,))."""
    pool = list(attrs.get("pool_int64s", []))
    counts = list(attrs.get("ngram_counts", []))
    entries: list[list[int]] = []
    for k, start in enumerate(counts):
        end = counts[k + 1] if k + 1 < len(counts) else len(pool)
        n = k + 1
        if (end - start) % n:
            raise ModelError(f"{node_label(node)}: ngram_counts leave {end - start} tokens for {n}-grams")
        entries += [pool[i : i + n] for i in range(start, end, n)]
    index = list(attrs.get("ngram_indexes", []))
    if len(index) != len(entries):
        raise ModelError(
            f"{node_label(node)}: {len(index)} ngram_indexes for {len(entries)} n-grams in the pool"
        )
    span = max((len(e) for e in entries), default=1)
    tokens = np.zeros((max(len(entries), 1), span), np.int64)
    for p, e in enumerate(entries):
        tokens[p, : len(e)] = e
    sizes = np.array([len(e) for e in entries] or [0], np.int64)
    return tokens, sizes, np.array(index or [0], np.int64)


@converter("TfIdfVectorizer")
def tfidf_vectorizer(ctx: ImportContext, node: onnx.NodeProto) -> list[Value]:
    attrs = ctx.attrs(node)
    x = ctx.input(node, 0)
    if attrs.get("pool_strings") or ctx.type_of(x).dtype not in ("int32", "int64"):
        raise ModelError(
            f"{node_label(node)}: string tokens are not supported (tensorir has no string dtype)"
        )
    tokens, sizes, index = pool_entries(node, attrs)
    size = int(index.max()) + 1
    weights = np.asarray(attrs.get("weights") or np.ones(size), np.float32)
    if weights.shape != (size,):
        raise ModelError(f"{node_label(node)}: {weights.size} weights for {size} outputs")
    op_attrs = {
        "mode": attrs["mode"],
        "min_gram_length": int(attrs["min_gram_length"]),
        "max_gram_length": int(attrs["max_gram_length"]),
        "max_skip_count": int(attrs["max_skip_count"]),
    }
    consts = [ctx.const(a) for a in (tokens, sizes, index, weights)]
    return ctx.add("tfidf", [x, *consts], op_attrs, node=node)
