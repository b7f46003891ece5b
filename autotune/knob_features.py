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
from autotune.gpu_features import NUM_GPU_FEATURES

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
    "wino_outer_order",
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
    # GPU templates (ops/conv_gpu.py, ops/gemm_gpu.py, schedule/gpu/)
    "work_group",
    "unroll_rci",
    "storage",
    "threads_x",
    "threads_y",
    "rows",
    "cols",
    "tile_k",
    "reduce_threads",
    # depthwise conv merged into the 1x1 after it (ops/dwpw.py; its other knobs are the
    # direct conv's), and the 1x1 expand merged in front of them
    "dw_ow_tile",
    "ex_ow_tile",
    "ex_blocks",
    # the packed conv and the packed Winograd GEMM streaming the next group's or block's
    # weights ahead (ops/weight_stream.py)
    "prefetch_weights",
    "wino_prefetch",
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
    "buffer",
    "image",
    "direct_wide",
)
KNOB_OFFSET = NUM_FEATURES + NUM_GPU_FEATURES  # the knob columns of a candidate's features
NUM_CANDIDATE_FEATURES = KNOB_OFFSET + len(KNOBS)
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


def candidate_features(
    loop_features: np.ndarray, config: Mapping[str, Any], gpu: np.ndarray | None = None
) -> np.ndarray:
    """The cost model's input: loop-IR features, GPU features (gpu_features.py; zeros for a
    CPU kernel), then knob features."""
    loop = np.asarray(loop_features, dtype=np.float32)
    gpu = np.zeros(NUM_GPU_FEATURES, np.float32) if gpu is None else np.asarray(gpu, np.float32)
    return np.concatenate([loop, gpu, knob_features(config)])
