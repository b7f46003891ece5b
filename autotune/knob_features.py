"""Knob features: a candidate's schedule config as a fixed-length vector, appended to its
loop-IR features (autotune/features.py) to give the cost model's input.

The loop-IR features describe what a kernel does (work, footprints, vector widths); the knob
values say directly which tile sizes and orders produced it, which is what separates the
candidates of one task (AutoTVM's "knob" feature type). One slot per knob name in `KNOBS`,
whatever the template:

* a number: log2(1 + value); True / False: 1 / 0;
* a word: its 1-based position in `WORDS` ("auto" -- a heuristic value -- is 0);
* a knob the config does not have (another template's, another algorithm's): -1.

A template that adds a knob adds its name here (tests/schedule/test_templates.py checks that
every knob and word value of the zoo's spaces has a slot); an unknown knob is ignored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from autotune.features import NUM_FEATURES

KNOBS: tuple[str, ...] = (
    "algorithm",
    # direct conv on NCHW[x]c (ops/layout.py)
    "vector",
    "oc_blocks",
    "row_chunk",
    "outer_order",
    "ow_tile",
    "reduce_order",
    "unroll_reduce",
    "pad_at",
    # im2col + packed GEMM
    "im2col_mr",
    "im2col_nr_vectors",
    "im2col_pixel_block",
    "im2col_oc_block",
    "im2col_k_block",
    "im2col_pad_first",
    # Winograd
    "wino_tile_rows",
    "wino_k_vectors",
    "wino_row_block",
    # dense / matmul
    "gemm_rows",
    "gemm_col_vectors",
    "gemm_row_chunk_tiles",
    "gemm_pack_b",
    "gemv_rows",
    # pooling / windowed reductions
    "window_row_chunk",
    "window_vectors",
    "window_rows",
)
WORDS: tuple[str, ...] = (
    "direct",
    "im2col",
    "winograd2",
    "winograd4",
    "winograd6",
    "channels",
    "rows",
    "channels_outer",
    "taps_outer",
    "root",
    "chunk",
)
NUM_CANDIDATE_FEATURES = NUM_FEATURES + len(KNOBS)
_SLOT = {k: i for i, k in enumerate(KNOBS)}
_WORD = {w: i + 1 for i, w in enumerate(WORDS)}


def _encode(value: Any) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return math.log2(1.0 + max(0.0, float(value)))
    if value == "auto":
        return 0.0
    return float(_WORD.get(str(value), len(WORDS) + 1))


def knob_features(config: Mapping[str, Any]) -> np.ndarray:
    """float32 vector of len(KNOBS): each knob's encoded value, -1 where the config lacks it."""
    out = np.full(len(KNOBS), -1.0, dtype=np.float32)
    for name, value in config.items():
        slot = _SLOT.get(name)
        if slot is not None:
            out[slot] = _encode(value)
    return out


def candidate_features(loop_features: np.ndarray, config: Mapping[str, Any]) -> np.ndarray:
    """The cost model's input: loop-IR features, then knob features."""
    return np.concatenate([np.asarray(loop_features, dtype=np.float32), knob_features(config)])
