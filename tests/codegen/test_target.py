"""Targets as data."""

from __future__ import annotations

import pytest

from tensorir.errors import TirError
from tensorir.target import Target, get_target


def test_host_target_from_llvm():
    t = get_target("host")
    assert t.name == "host" and t.kind == "llvm" and t.triple.startswith(("x86_64", "aarch64"))
    if "+avx512f" in t.features.split(","):
        assert (t.vector_bits, t.num_vector_registers) == (512, 32)
    assert t.vector_lanes("float32") == t.vector_bits // 32
    assert t.num_threads is None


@pytest.mark.parametrize(
    ("name", "triple"),
    [("linux-arm64", "aarch64-unknown-linux-gnu"), ("android-arm64", "aarch64-linux-android24")],
)
def test_arm64_targets(name, triple):
    t = get_target(name)
    assert (t.triple, t.cpu, t.features, t.vector_bits, t.num_vector_registers) == (
        triple,
        "cortex-a76",
        "+neon",
        128,
        32,
    )
    assert t.vector_lanes("float32") == 4 and t.vector_lanes("float16") == 8
    assert t.is_android == (name == "android-arm64")
    assert t.with_threads(2).num_threads == 2
    assert get_target(t) is t


def test_targets_are_frozen_and_hashable():
    t = get_target("linux-arm64")
    with pytest.raises(AttributeError):
        t.cpu = "x"  # type: ignore[misc]
    assert {t: 1}[Target(**t.__dict__)] == 1


def test_unknown_target_lists_valid_ones():
    with pytest.raises(
        TirError, match="unknown target 'arm9'; valid targets: host, linux-arm64, android-arm64"
    ):
        get_target("arm9")
