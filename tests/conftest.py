"""Session-wide test set-up.

Every test session gets its own tensorir cache folder (TIR_CACHE_DIR): compiled kernel
objects, qemu drivers, stub libraries, the OpenCL runtime object, PoCL's kernel cache and the
default tuning database (autotune/database.py) go to a temporary folder, never to the user's
~/.cache/tensorir; so does XDG_CACHE_HOME (pyopencl's invoker cache). TIR_IDLE_PROBE=idle:
tuning does not probe for a busy core (tensorir/config.py). Child processes the tests start
inherit them.

Markers (registered in pyproject.toml): `arm64` marks the tests that need the ARM64 cross
packages (qemu-user, gcc-aarch64-linux-gnu, libc6-dev-arm64-cross): they run linux-arm64
code under qemu-aarch64 or link against the aarch64 glibc. They fail when a tool is missing;
`./quickstart.sh test` deselects them (`-m "not arm64"`, saying so) only for a user who is
not root and lacks those packages.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _tensorir_cache_in_tmp(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        cache = tmp_path_factory.mktemp("tir-cache")
        mp.setenv("TIR_CACHE_DIR", str(cache))
        mp.setenv("POCL_CACHE_DIR", str(cache / "pocl"))  # as tensorir.devices would set it
        mp.setenv("XDG_CACHE_HOME", str(cache / "xdg"))  # pyopencl's own (pytools) cache
        # tuning's timings are trusted as taken on idle cores (no busy-core probe), so what a
        # test's tuning run records does not depend on the test machine's load; the probe and
        # the guards have their own tests (tests/autotune/test_idle.py and the tests of
        # the model-level search and the in-model check)
        mp.setenv("TIR_IDLE_PROBE", "idle")
        # the OpenCL drivers before a test imports TensorFlow (the TF tests' fixtures build
        # models with it; tensorir itself runs it in a child): PoCL loaded after it crashes
        # the worker (tensorir.devices.preload_opencl)
        from tensorir.devices import preload_opencl

        preload_opencl()
        yield
