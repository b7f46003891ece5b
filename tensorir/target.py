"""Compilation targets as data.

A `Target` says what code generation needs to know about a CPU: the LLVM triple, cpu
and feature string, the native vector width and register count, and the default number
of threads. Named targets:

    host           this machine (triple, cpu and features from LLVM's host queries)
    linux-arm64    aarch64-unknown-linux-gnu, cortex-a76, NEON (128-bit, 32 registers)
    android-arm64  aarch64-linux-android24, cortex-a76, NEON
    <arm64 target>:CPU   the same for another core (-mcpu), e.g. android-arm64:cortex-a55
    x86_64-v2      x86-64 microarchitecture level 2: SSE4.2 (128-bit vectors), any x86-64 of
                   the last 15 years
    x86_64-v3      level 3: AVX2 + FMA (256-bit), e.g. Haswell and later, Zen
    x86_64-v4      level 4: AVX-512 F/BW/CD/DQ/VL (512-bit, 32 registers)

The x86-64 levels build for machines other than the one compiling (and for tools that cannot
run every instruction of this one: valgrind stops at the first AVX-512 one).

and OpenCL targets (kind "opencl": GPU kernels in OpenCL C, host code and the kernels
without a GPU schedule for the CPU named before the '+'; host when none):

    opencl[:PROFILE]                   this machine's CPU + its OpenCL device
    android-arm64+opencl[:PROFILE]     an Android phone's CPU + GPU (e.g. :adreno640)

PROFILE names a device profile (tensorir/devices.py; default `opencl`: query the device
present). An OpenCL target's vector width is 128 bits (float4), so the layout pass packs
activations NCHW4c, one float4 per 4 channels. `target.cpu_target()` is the LLVM target of
its host side.

Variants are plain `dataclasses.replace(target, num_threads=2)` copies.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from tensorir.errors import TirError


@dataclass(frozen=True)
class Target:
    name: str
    kind: str = "llvm"
    triple: str = ""
    cpu: str = "generic"
    features: str = ""
    vector_bits: int = 128
    num_vector_registers: int = 16
    num_threads: int | None = None  # None: all cores, decided at run time
    profile: str = ""  # kind "opencl": the device profile's name (tensorir/devices.py)
    cpu_name: str = ""  # kind "opencl": the named target of the host side ("" : host)

    @property
    def arch(self) -> str:
        """'x86_64', 'aarch64', ... (the triple's first component)."""
        return self.triple.split("-", 1)[0]

    @property
    def is_android(self) -> bool:
        return "android" in self.triple

    def has_feature(self, feature: str) -> bool:
        """True when '+feature' is in the feature string (NEON is implied on aarch64, and
        fullfp16 / dotprod on the ARMv8.2 cores, whose -mcpu implies them)."""
        if self.arch == "aarch64" and feature in ("neon", "fma", "fp-armv8"):
            return True
        if self.arch == "aarch64" and feature in ("fullfp16", "dotprod") and self.cpu.startswith(ARMV82_CPUS):
            return True
        return f"+{feature}" in self.features.split(",")

    def vector_lanes(self, dtype: str) -> int:
        """Lanes of one native vector register for `dtype` (e.g. 16 for float32 on AVX-512)."""
        from tensorir.dtypes import dtype_bits

        return max(1, self.vector_bits // max(8, dtype_bits(dtype)))

    def full_rate_lanes(self, dtype: str) -> int:
        """Lanes of the widest vector the FMA units retire at full rate: the vector's own,
        except on cores that run 512-bit ops as two 256-bit halves (Zen 4), where an 8-lane
        float32 FMA does as much work per cycle as a 16-lane one."""
        lanes = self.vector_lanes(dtype)
        if self.vector_bits == 512 and self.cpu in SPLIT_512_CPUS:
            return lanes // 2
        return lanes

    def with_threads(self, n: int | None) -> Target:
        return dataclasses.replace(self, num_threads=n)

    def cpu_target(self) -> Target:
        """The LLVM target of the host side (itself for an LLVM target)."""
        if self.kind == "llvm":
            return self
        return get_target(self.cpu_name or "host").with_threads(self.num_threads)

    def device_profile(self) -> Any:
        """The OpenCL device profile (tensorir.devices.DeviceProfile) of an OpenCL target."""
        from tensorir.devices import get_profile

        if self.kind != "opencl":
            raise TirError(f"target {self.name} has no OpenCL device profile")
        return get_profile(self.profile)


def _host_vector_bits(features: list[str]) -> tuple[int, int]:
    if "+avx512f" in features:
        return 512, 32
    if "+avx2" in features or "+avx" in features:
        return 256, 16
    if "+neon" in features or "+sve" in features:
        return 128, 32
    return 128, 16


@functools.cache
def host_target() -> Target:
    """The machine this process runs on, as LLVM sees it. Without llvmlite (a machine that
    only measures OpenCL kernels, e.g. a GPU box given the tuner's pure-Python part) the
    architecture alone, cpu "generic": enough to name the host side, not to generate code."""
    try:
        import llvmlite.binding as llvm
    except ImportError:
        import platform

        arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
        return Target(name="host", triple=f"{arch}-unknown-linux-gnu")

    from tensorir.codegen.llvm_init import init_llvm

    init_llvm()
    triple = llvm.get_process_triple()
    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:  # some hosts cannot report features
        features = ""
    bits, regs = _host_vector_bits(features.split(","))
    if triple.startswith("aarch64"):
        bits, regs = 128, 32
    return Target(
        name="host",
        triple=triple,
        cpu=llvm.get_host_cpu_name(),
        features=features,
        vector_bits=bits,
        num_vector_registers=regs,
    )


SPLIT_512_CPUS = ("znver4",)  # AVX-512 on 256-bit datapaths: zmm FMAs take two slots

_ARM64 = {
    "linux-arm64": "aarch64-unknown-linux-gnu",
    "android-arm64": "aarch64-linux-android24",
}

ARM64_CPUS = ("cortex-a76", "cortex-a55")  # the first is the default of an arm64 target
# ARMv8.2-A and later cores LLVM knows: their -mcpu implies +fullfp16 and +dotprod
ARMV82_CPUS = (
    "cortex-a55",
    "cortex-a75",
    "cortex-a76",
    "cortex-a77",
    "cortex-a78",
    "cortex-x1",
    "neoverse-n1",
)

_V2 = "+sse,+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16,+sahf"
_V3 = _V2 + ",+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe,+xsave"
_V4 = _V3 + ",+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl"
X86_LEVELS = {  # name: (LLVM cpu, features, vector bits, vector registers)
    "x86_64-v2": ("x86-64-v2", _V2, 128, 16),
    "x86_64-v3": ("x86-64-v3", _V3, 256, 16),
    "x86_64-v4": ("x86-64-v4", _V4, 512, 32),
}

TARGET_NAMES = (
    "host",
    *_ARM64,
    "<arm64 target>:CPU",
    *X86_LEVELS,
    "opencl[:PROFILE]",
    "android-arm64+opencl[:PROFILE]",
)


def _opencl_target(name: str) -> Target:
    """'opencl[:PROFILE]' or '<cpu target>+opencl[:PROFILE]'."""
    cpu, _, gpu = name.rpartition("+")
    _, _, profile = gpu.partition(":")
    profile = profile or "opencl"
    from tensorir.devices import profile_names

    if profile not in profile_names():
        valid = ", ".join(profile_names())
        raise TirError(f"target {name!r}: unknown device profile {profile!r}; valid: {valid}")
    host = get_target(cpu or "host")
    return dataclasses.replace(
        host, name=name, kind="opencl", vector_bits=128, profile=profile, cpu_name=cpu or "host"
    )


def get_target(name: str | Target) -> Target:
    """A named target ('host', 'linux-arm64', 'android-arm64', 'x86_64-v3', 'opencl:pocl',
    'android-arm64+opencl:adreno640'); a Target passes through."""
    if isinstance(name, Target):
        return name
    if name == "opencl" or name.startswith("opencl:") or "+opencl" in name:
        return _opencl_target(name)
    if name == "host":
        return host_target()
    if name in X86_LEVELS:
        cpu, features, bits, regs = X86_LEVELS[name]
        triple = "x86_64-unknown-linux-gnu"
        return Target(name, "llvm", triple, cpu, features, vector_bits=bits, num_vector_registers=regs)
    base, _, cpu = name.partition(":")
    if base in _ARM64:
        if cpu and cpu not in ARM64_CPUS:
            raise TirError(f"target {name!r}: unknown arm64 cpu {cpu!r}; known: {', '.join(ARM64_CPUS)}")
        return Target(
            name=name,
            triple=_ARM64[base],
            cpu=cpu or ARM64_CPUS[0],
            features="+neon",
            vector_bits=128,
            num_vector_registers=32,
        )
    raise TirError(f"unknown target {name!r}; valid targets: {', '.join(TARGET_NAMES)}")
