"""TFLite's sparse constant tensors, made dense at import (the DENSIFY op that reads them is then
the identity). MediaPipe ships pruned fp16 models so (face_detection_full_range_sparse.tflite,
pose_detection.tflite).

A sparse tensor's SparsityParameters list its dimensions in `traversal_order`: the tensor's own
n dims, then one per block (block k splits dim `block_map[k]`). Each traversed dim is DENSE
(every index 0 .. dense_size-1) or SPARSE_CSR (the indices `array_indices[segments[p] ..
segments[p+1]]` for the position p reached in the dims before it). The buffer holds the values
of the leaves in traversal order; everything else is zero. (TFLite's FormatConverter.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorir.errors import ModelError

DENSE, SPARSE_CSR = 0, 1


def _index_vector(table: Any, kind: int) -> np.ndarray:
    """The values of a SparseIndexVector union (Int32Vector, Uint16Vector, Uint8Vector)."""
    from tflite.Int32Vector import Int32Vector
    from tflite.Uint8Vector import Uint8Vector
    from tflite.Uint16Vector import Uint16Vector

    cls = {1: Int32Vector, 2: Uint16Vector, 3: Uint8Vector}.get(kind)
    if cls is None or table is None:
        raise ModelError(f"sparse index vector of type {kind} is not supported")
    vec = cls()
    vec.Init(table.Bytes, table.Pos)
    return vec.ValuesAsNumpy().astype(np.int64) if vec.ValuesLength() else np.zeros(0, np.int64)


def densify(sparsity: Any, values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The dense tensor of `shape` that `sparsity` (a tflite SparsityParameters) and the stored
    `values` (1-D, in traversal order) describe."""
    order = [int(d) for d in sparsity.TraversalOrderAsNumpy()]
    block_map = [int(d) for d in sparsity.BlockMapAsNumpy()] if sparsity.BlockMapLength() else []
    metas = [sparsity.DimMetadata(k) for k in range(sparsity.DimMetadataLength())]
    n = len(shape)
    if len(metas) != len(order) or len(order) != n + len(block_map):
        raise ModelError(
            f"sparsity of a {list(shape)} tensor: {len(order)} traversed dims, {len(metas)} described"
        )
    levels = []
    for m in metas:
        if m.Format() == DENSE:
            levels.append((DENSE, int(m.DenseSize()), None, None))
        else:
            segs = _index_vector(m.ArraySegments(), m.ArraySegmentsType())
            idx = _index_vector(m.ArrayIndices(), m.ArrayIndicesType())
            levels.append((SPARSE_CSR, 0, segs, idx))
    block = {d: levels[order.index(n + k)][1] for k, d in enumerate(block_map)}
    out = np.zeros(shape, values.dtype)
    coords = [0] * len(order)  # by expanded dim: the tensor's dims, then the blocks'
    taken = 0

    def leaf() -> None:
        nonlocal taken
        inner = {d: coords[n + k] for k, d in enumerate(block_map)}
        at = tuple(coords[d] * block[d] + inner[d] if d in block else coords[d] for d in range(n))
        out[at] = values[taken]
        taken += 1

    def walk(level: int, pos: int) -> None:
        if level == len(order):
            leaf()
            return
        fmt, size, segs, idx = levels[level]
        if fmt == DENSE:
            for i in range(size):
                coords[order[level]] = i
                walk(level + 1, pos * size + i)
        else:
            for k in range(int(segs[pos]), int(segs[pos + 1])):
                coords[order[level]] = int(idx[k])
                walk(level + 1, k)

    walk(0, 0)
    if taken != values.size:
        raise ModelError(f"sparse {list(shape)} tensor: {values.size} values stored, {taken} traversed")
    return out
