"""The cache of optimized loop kernels (tensorir/kernel_cache.py): a hit gives exactly what the
loop passes give, under the asked kernel's name; identical kernels of one model share an entry;
a change to the code or to the kernel misses; an unreadable entry is optimized again. Numerics:
a model compiled with a warm cache matches onnxruntime (max abs error <= 1e-4 relative to the
output's scale)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest

import tensorir as tir
from benchmarks.zoo import build, sample_inputs
from tensorir import kernel_cache
from tensorir.graph.types import TensorType
from tensorir.loop.passes import optimize_loops
from tensorir.ops.kernel import build_kernel
from tensorir.target import get_target


def _kernel(name: str = "k", width: int = 14):
    """A packed 1x1 conv kernel before the loop passes."""
    types = [TensorType((1, 2, width, width, 8)), TensorType((2, 2, 1, 1, 8, 8)), TensorType((2, 8))]
    func, _ = build_kernel(
        "conv2d_nchwc", types, {"group": 1}, get_target("x86_64-v3"), None, name, passes=False
    )
    return func


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TIR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernel_cache, "_MEMO", {})
    return tmp_path / "loops"


def test_a_hit_is_what_the_loop_passes_give_under_the_asked_name(cache):
    func = _kernel("first")
    fresh = optimize_loops(func)
    assert kernel_cache.optimized(func) == fresh and len(list(cache.iterdir())) == 1
    kernel_cache._MEMO.clear()  # from disk
    again = kernel_cache.optimized(_kernel("second"))
    assert again.name == "second" and str(again) == str(fresh).replace("first", "second", 1)
    assert again == dataclasses.replace(fresh, name="second")
    assert len(list(cache.iterdir())) == 1  # one entry for both names


def test_another_kernel_or_other_code_misses(cache, monkeypatch):
    kernel_cache.optimized(_kernel(width=14))
    kernel_cache.optimized(_kernel(width=13))
    assert len(list(cache.iterdir())) == 2
    key = kernel_cache.kernel_key(_kernel())
    monkeypatch.setattr(kernel_cache, "_source_hash", lambda: "other code")
    assert kernel_cache.kernel_key(_kernel()) != key


def test_an_unreadable_entry_is_optimized_again(cache):
    func = _kernel()
    kernel_cache.optimized(func)
    (entry,) = cache.iterdir()
    entry.write_bytes(b"not a pickle")
    kernel_cache._MEMO.clear()
    assert kernel_cache.optimized(func) == optimize_loops(func)
    assert entry.read_bytes() != b"not a pickle"  # rewritten


def test_repeated_blocks_share_entries_and_a_warm_compile_matches_onnxruntime(cache):
    model = build("bert_encoder")
    cold = tir.compile(model)
    kernels = len(cold.manifest["kernels"])
    entries = len(list(cache.iterdir()))
    assert entries < kernels  # the encoder's repeated layers: one entry per distinct kernel
    warm = tir.compile(model)
    assert len(list(cache.iterdir())) == entries
    feeds = sample_inputs(model)
    (ref,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for mod in (cold, warm):
        (got,) = mod.run(feeds)
        assert np.max(np.abs(got - ref)) <= 1e-4 * np.max(np.abs(ref))
