"""Device keys: what a tuning record says it was measured on, and which records a compile uses.

    cpu_key(host_target())                    # 'x86_64-znver3-avx2'
    gpu_key("pocl", "pthread-skylake-avx512-AMD EPYC 7B13")   # 'opencl-pocl-pthread-skylake-...'
    device_key(target, threads=1)             # '<cpu key>-t1': timed with one kernel thread
    choose_key(["x86_64-skylake-avx512", "aarch64-cortex-a76-neon"], target)

A CPU key is the architecture, LLVM's cpu name and the widest vector ISA (the features that
change the generated code); a GPU key is `opencl-<profile>` and the OpenCL device's name. A
`-tN` suffix marks records timed with N kernel threads (none: all cores).

`choose_key` picks, among the keys that have records, the one a compile for `target` uses:
the exact key first; then the same device timed with another thread count; then the
declared family — for CPUs the same architecture and vector ISA on another cpu name, for GPUs
the same profile on another device. Never another architecture or profile: kernels tuned on
an AVX-512 server are not applied to an AVX2 laptop or a phone (TVM's MetaSchedule database
had this defect: apache/tvm#15549).

Records of the key `host` (before device keys) belong to the machine that tuned them:
`legacy_alias` maps them to this machine's CPU key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tensorir.target import Target

LEGACY_HOST = re.compile(r"host(-t\d+)?")


def isa_level(target: Target) -> str:
    """The widest vector ISA of an LLVM target: avx512 / avx2 / sse (x86), sve / neon (ARM)."""
    if target.arch == "x86_64":
        if target.has_feature("avx512f"):
            return "avx512"
        return "avx2" if target.has_feature("avx2") and target.has_feature("fma") else "sse"
    if target.arch == "aarch64":
        return "sve" if target.has_feature("sve") else "neon"
    return "scalar"


def cpu_key(target: Target) -> str:
    return f"{target.arch}-{_slug(target.cpu)}-{isa_level(target)}"


def gpu_key(profile: str, device_name: str | None = None) -> str:
    """`opencl-<profile>[-<device name>]` (no device name: compiled for a profile not present)."""
    return f"opencl-{profile}" + (f"-{_slug(device_name)}" if device_name else "")


def device_key(target: Target, threads: int = 0, device_name: str | None = None) -> str:
    """The key of records measured for `target` (the GPU's device name for OpenCL targets)."""
    gpu = target.kind == "opencl"
    base = gpu_key(target.profile or "opencl", device_name) if gpu else cpu_key(target)
    return f"{base}-t{threads}" if threads else base


def split_threads(key: str) -> tuple[str, int]:
    """'x86_64-znver3-avx2-t1' -> ('x86_64-znver3-avx2', 1)."""
    m = re.fullmatch(r"(.*)-t(\d+)", key)
    return (m.group(1), int(m.group(2))) if m else (key, 0)


def family(key: str) -> str:
    """What a key may fall back to: `<arch>-<isa>` for CPUs, `opencl-<profile>` for GPUs."""
    from tensorir.devices import profile_names

    base, _ = split_threads(key)
    if base.startswith("opencl-"):  # profile names have dashes too (mali-g76): the longest known
        rest = base[len("opencl-") :]
        named = [p for p in profile_names() if rest == p or rest.startswith(p + "-")]
        return "opencl-" + max(named, key=len) if named else base
    parts = base.split("-")
    return f"{parts[0]}-{parts[-1]}"


def choose_key(available: Iterable[str], want: str) -> tuple[str | None, str]:
    """(the key to use, how it was chosen: 'exact', 'other threads', 'family') among `available`
    for the wanted key `want` (device_key of the compile's target); (None, '') when none fits."""
    keys = sorted(set(available))
    if want in keys:
        return want, "exact"
    base, threads = split_threads(want)
    same_device = [k for k in keys if split_threads(k)[0] == base]
    if same_device:
        return _prefer_threads(same_device, threads), "other threads"
    kin = [k for k in keys if family(k) == family(want) and not LEGACY_HOST.fullmatch(k)]
    if kin:
        return _prefer_threads(kin, threads), "family"
    return None, ""


def _prefer_threads(keys: list[str], threads: int) -> str:
    return min(keys, key=lambda k: (split_threads(k)[1] != threads, split_threads(k)[1], k))


def legacy_alias(key: str, local_cpu: str) -> str:
    """A pre-device-key record's key on this machine: 'host-t1' -> '<local cpu key>-t1'."""
    if not LEGACY_HOST.fullmatch(key):
        return key
    _, threads = split_threads(key)
    return f"{local_cpu}-t{threads}" if threads else local_cpu


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "unknown"
