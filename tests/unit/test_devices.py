"""Device profiles: the named table is sane, `opencl` queries this machine's PoCL device."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tensorir.devices import PROFILES, DeviceProfile, get_profile, profile_names, query_profile
from tensorir.errors import TirError


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_named_profile_is_sane(name):
    p = get_profile(name)
    assert isinstance(p, DeviceProfile) and p.name == name
    assert p.kind in ("gpu", "cpu") and p.vendor and p.source and p.platform
    assert p.max_work_group_size in (256, 384, 512, 1024, 4096)
    assert len(p.max_work_item_sizes) == 3 and max(p.max_work_item_sizes) <= p.max_work_group_size
    assert 16 << 10 <= p.local_mem_bytes <= 1 << 20
    assert p.compute_units >= 1 and p.global_mem_bytes >= 1 << 30
    assert p.preferred_vector_width_float in (1, 2, 4, 8, 16)
    assert p.mem_base_addr_align_bits % 8 == 0
    if p.image_support:
        assert p.image2d_max_width >= 8192 and p.image2d_max_height >= 8192


def test_published_limits():
    assert get_profile("mali-g76").max_work_group_size == 384
    assert get_profile("mali-g76").local_mem_bytes == 32 << 10
    assert get_profile("mali-g710").max_work_group_size == 1024
    nv = get_profile("nvidia")
    assert (nv.max_work_group_size, nv.local_mem_bytes, nv.compute_units) == (1024, 48 << 10, 132)
    assert nv.image_support and not nv.fp16
    assert get_profile("nvidia-opencl") is nv
    assert get_profile("adreno640").fp16 and not get_profile("pocl").fp16


def test_unknown_profile_names_the_valid_ones():
    with pytest.raises(TirError) as e:
        get_profile("adreno9000")
    msg = str(e.value)
    assert "\n" not in msg and "adreno9000" in msg
    assert all(n in msg for n in profile_names())


def test_query_profile_is_this_machines_pocl():
    here = get_profile("opencl")
    pocl = get_profile("pocl")
    assert here.name.startswith("opencl:") and "Portable Computing Language" in here.platform
    same = (
        "kind",
        "max_work_group_size",
        "max_work_item_sizes",
        "image_support",
        "fp16",
        "mem_base_addr_align_bits",
    )
    assert {k: getattr(here, k) for k in same} == {k: getattr(pocl, k) for k in same}
    # local memory follows the CPU's L2 and the vector width its ISA: the profile is the
    # lower bound over the build machines (Zen 3 AVX2 512 KiB / 8 floats, Zen 4 AVX-512 1 MiB / 16)
    assert here.local_mem_bytes >= pocl.local_mem_bytes
    assert here.preferred_vector_width_float >= pocl.preferred_vector_width_float
    avx512 = "avx512f" in Path("/proc/cpuinfo").read_text()
    assert here.preferred_vector_width_float == (16 if avx512 else 8)
    # PoCL derives its image limits from the memory it finds (8192 or 16384 here, from one
    # run to the next): the profile's are the lower bound a compile may count on
    assert here.image2d_max_width >= pocl.image2d_max_width
    assert here.image2d_max_height >= pocl.image2d_max_height
    assert 1 <= here.compute_units <= (os.cpu_count() or 1)


def test_platform_filter_without_match_is_one_line(monkeypatch):
    monkeypatch.setenv("TIR_OPENCL_PLATFORM", "no-such-vendor")
    with pytest.raises(TirError, match="^no OpenCL device found") as e:
        query_profile()
    assert "\n" not in str(e.value)
