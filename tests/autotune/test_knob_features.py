"""Knob features (autotune/knob_features.py): fixed slots, stable encoding."""

from __future__ import annotations

import math

import numpy as np

from autotune.features import NUM_FEATURES
from autotune.knob_features import (
    KNOB_OFFSET,
    KNOBS,
    NUM_CANDIDATE_FEATURES,
    candidate_features,
    knob_features,
)


def slot(x: np.ndarray, name: str) -> float:
    return float(x[KNOBS.index(name)])


def test_encoding_of_numbers_words_and_missing_knobs():
    x = knob_features({"vector": 16, "outer_order": "rows", "row_chunk": "auto", "gemm_pack_b": True})
    assert x.shape == (len(KNOBS),) and x.dtype == np.float32
    assert math.isclose(slot(x, "vector"), math.log2(17), rel_tol=1e-6)
    assert slot(x, "row_chunk") == 0.0
    assert slot(x, "gemm_pack_b") == 1.0
    assert slot(x, "ow_tile") == -1.0  # not in this config
    assert slot(x, "outer_order") != slot(knob_features({"outer_order": "channels"}), "outer_order")


def test_unknown_knobs_are_ignored_and_order_does_not_matter():
    a = knob_features({"vector": 8, "ow_tile": 4, "some_new_knob": 3})
    b = knob_features({"ow_tile": 4, "vector": 8})
    assert np.array_equal(a, b)


def test_candidate_features_append_knobs_to_loop_features():
    loop = np.arange(NUM_FEATURES, dtype=np.float32)
    x = candidate_features(loop, {"algorithm": "winograd4"})
    assert x.shape == (NUM_CANDIDATE_FEATURES,)
    assert np.array_equal(x[:NUM_FEATURES], loop)
    assert not x[NUM_FEATURES:KNOB_OFFSET].any()  # a CPU kernel: no GPU features
    assert slot(x[KNOB_OFFSET:], "algorithm") > 0
