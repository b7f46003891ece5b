"""OpenCL device profiles as data: the limits a GPU schedule and the OpenCL renderer may use.

Nothing device-specific belongs in a template: the work-group limits, local memory, preferred
vector width, image support and limits and fp16 support of a device all come from its profile.

    from tensorir.devices import get_profile
    p = get_profile("mali-g76")      # a named profile (published values)
    p.max_work_group_size            # 384
    here = get_profile("opencl")     # the OpenCL device present, queried through pyopencl

`TIR_OPENCL_PLATFORM` (a case-insensitive substring of the platform name) restricts which
platforms `query_profile` and the OpenCL runner look at.

`TUNING_DEVICES` is the table of what `tir tune --device` / `tir rpc serve --device` accept:
the target each device compiles for and how its candidates are measured.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from tensorir import config
from tensorir.errors import TirError


@dataclass(frozen=True)
class DeviceProfile:
    """One OpenCL device's limits. `platform` is a substring of the OpenCL platform name
    under which the device shows up when it is attached here ("" = not locally runnable)."""

    name: str
    kind: str  # "gpu" | "cpu"
    vendor: str
    max_work_group_size: int
    max_work_item_sizes: tuple[int, int, int]
    local_mem_bytes: int
    compute_units: int
    image_support: bool
    image2d_max_width: int
    image2d_max_height: int
    fp16: bool
    preferred_vector_width_float: int
    mem_base_addr_align_bits: int
    global_mem_bytes: int
    platform: str = ""
    description: str = ""
    source: str = ""


_GIB = 1 << 30
PROFILES: dict[str, DeviceProfile] = {
    p.name: p
    for p in (
        DeviceProfile(
            name="adreno640",
            kind="gpu",
            vendor="Qualcomm",
            max_work_group_size=1024,
            max_work_item_sizes=(1024, 1024, 1024),
            local_mem_bytes=32 << 10,
            compute_units=2,
            image_support=True,
            image2d_max_width=16384,
            image2d_max_height=16384,
            fp16=True,
            preferred_vector_width_float=1,
            mem_base_addr_align_bits=1024,
            global_mem_bytes=3 * _GIB,
            platform="QUALCOMM Snapdragon",
            description="Adreno 640 (Snapdragon 855), OpenCL 2.0 full profile",
            source=(
                "Qualcomm Adreno OpenCL programming guide (80-NB295-11: 32 KiB local memory on A6xx); TVM's"
                " Adreno schedules assume 1024 work-items (GPU.md); image and CU figures from public clinfo"
                " dumps of SD855 phones; global memory is the phone's (taken as 3 GiB)"
            ),
        ),
        DeviceProfile(
            name="adreno750",
            kind="gpu",
            vendor="Qualcomm",
            max_work_group_size=1024,
            max_work_item_sizes=(1024, 1024, 1024),
            local_mem_bytes=32 << 10,
            compute_units=6,
            image_support=True,
            image2d_max_width=16384,
            image2d_max_height=16384,
            fp16=True,
            preferred_vector_width_float=1,
            mem_base_addr_align_bits=1024,
            global_mem_bytes=4 * _GIB,
            platform="QUALCOMM Snapdragon",
            description="Adreno 750 (Snapdragon 8 Gen 3), OpenCL 3.0",
            source=(
                "work-group and image limits as Adreno 6xx (TVM adreno utils, Qualcomm guide); local memory"
                " kept at the A6xx 32 KiB (conservative); compute units unverified, check clinfo"
            ),
        ),
        DeviceProfile(
            name="mali-g76",
            kind="gpu",
            vendor="ARM",
            max_work_group_size=384,
            max_work_item_sizes=(384, 384, 384),
            local_mem_bytes=32 << 10,
            compute_units=12,
            image_support=True,
            image2d_max_width=65536,
            image2d_max_height=65536,
            fp16=True,
            preferred_vector_width_float=4,
            mem_base_addr_align_bits=1024,
            global_mem_bytes=3 * _GIB,
            platform="ARM Platform",
            description="Mali-G76 MP12 (Exynos 9820), Bifrost, OpenCL 2.0",
            source=(
                "Arm Mali Bifrost OpenCL developer guide (384 work-items, 32 KiB local memory in system "
                "RAM, 65536 image size); compute units = shader cores of the MP12 part"
            ),
        ),
        DeviceProfile(
            name="mali-g710",
            kind="gpu",
            vendor="ARM",
            max_work_group_size=1024,
            max_work_item_sizes=(1024, 1024, 1024),
            local_mem_bytes=32 << 10,
            compute_units=10,
            image_support=True,
            image2d_max_width=65536,
            image2d_max_height=65536,
            fp16=True,
            preferred_vector_width_float=4,
            mem_base_addr_align_bits=1024,
            global_mem_bytes=4 * _GIB,
            platform="ARM Platform",
            description="Mali-G710 MC10 (Dimensity 9000), Valhall, OpenCL 3.0",
            source=(
                "Arm Mali Valhall OpenCL developer guide (1024 work-items, 32 KiB local memory); compute "
                "units = shader cores of the MC10 part"
            ),
        ),
        DeviceProfile(
            name="pocl",
            kind="cpu",
            vendor="pocl",
            max_work_group_size=4096,
            max_work_item_sizes=(4096, 4096, 4096),
            local_mem_bytes=512 << 10,
            compute_units=2,
            image_support=True,
            image2d_max_width=8192,
            image2d_max_height=8192,
            fp16=False,
            preferred_vector_width_float=8,
            mem_base_addr_align_bits=1024,
            global_mem_bytes=4600793088,
            platform="Portable Computing Language",
            description="PoCL 3.1 (Debian 12) pthread device on the 2-core x86-64 build machine",
            source=(
                "clinfo on this project's machines (no cl_khr_fp16, see TOOLCHAIN.md section 4). PoCL "
                "takes local memory from the L2 size and the vector width from the ISA: the profile "
                "holds the smallest seen (Zen 3, AVX2: 512 KiB, 8 floats; Zen 4, AVX-512: 1 MiB, 16)"
            ),
        ),
        DeviceProfile(
            name="nvidia",
            kind="gpu",
            vendor="NVIDIA",
            max_work_group_size=1024,
            max_work_item_sizes=(1024, 1024, 64),
            local_mem_bytes=48 << 10,
            compute_units=132,
            image_support=True,
            image2d_max_width=32768,
            image2d_max_height=32768,
            fp16=False,
            preferred_vector_width_float=1,
            mem_base_addr_align_bits=4096,
            global_mem_bytes=80 * _GIB,
            platform="NVIDIA CUDA",
            description="NVIDIA H100/H200 through the driver's OpenCL 3.0",
            source=(
                "TOOLCHAIN.md Appendix C (driver 580.159: 132 CUs, 1024 work-items, 48 KiB local memory, "
                "images, no fp16); item sizes, image limits, alignment as NVIDIA's clinfo"
            ),
        ),
    )
}
ALIASES = {"nvidia-opencl": "nvidia", "opencl": "opencl"}


@dataclass(frozen=True)
class TuningDevice:
    """A device candidates can be measured on. `measured`: "process" (JIT'd into the tuner's
    worker processes), "opencl" (the local OpenCL device of the target's profile) or "remote"
    (only on the device itself). `remote`: how a tuner on another machine reaches it: "rpc"
    (`tir rpc serve` running there) and/or "adb" (a phone without Python: autotune/adb_runner.py)."""

    name: str
    target: str
    measured: str
    remote: tuple[str, ...]
    description: str


_ANDROID_GPU = "android-arm64+opencl:"
_PHONE_CPU = ("rpc", "adb")
TUNING_DEVICES: dict[str, TuningDevice] = {
    d.name: d
    for d in (
        TuningDevice("host", "host", "process", ("rpc",), "this machine's CPU"),
        TuningDevice("pocl", "opencl:pocl", "opencl", ("rpc",), "PoCL on this machine"),
        TuningDevice("opencl", "opencl", "opencl", ("rpc",), "the OpenCL device present"),
        TuningDevice("nvidia", "opencl:nvidia", "opencl", ("rpc",), "an NVIDIA GPU through OpenCL"),
        *(
            TuningDevice(g, _ANDROID_GPU + g, "remote", ("rpc",), PROFILES[g].description)
            for g in ("adreno640", "adreno750", "mali-g76", "mali-g710")
        ),
        *(
            TuningDevice(cpu, target, "remote", _PHONE_CPU, f"an Android phone's {cpu} cores")
            for cpu, target in (("cortex-a76", "android-arm64"), ("cortex-a55", "android-arm64:cortex-a55"))
        ),
    )
}


def tuning_device_names() -> list[str]:
    return list(TUNING_DEVICES)


def get_tuning_device(name: str) -> TuningDevice:
    """The named tuning device (a TirError naming the known ones otherwise)."""
    if name not in TUNING_DEVICES:
        raise TirError(f"--device {name!r}: unknown device (known: {', '.join(TUNING_DEVICES)})")
    return TUNING_DEVICES[name]


def profile_names() -> list[str]:
    return [*PROFILES, "opencl"]


def get_profile(name: str) -> DeviceProfile:
    """The named profile; "opencl" queries the device present."""
    key = ALIASES.get(name.lower(), name.lower())
    if key == "opencl":
        return query_profile()
    if key not in PROFILES:
        raise TirError(f"unknown device profile {name!r}; known: {', '.join(profile_names())}")
    return PROFILES[key]


def load_pyopencl() -> Any:
    """The pyopencl module (POCL_CACHE_DIR set under the tensorir cache first)."""
    os.environ.setdefault("POCL_CACHE_DIR", str(config.cache_dir() / "pocl"))
    try:
        import pyopencl as cl
    except ImportError as e:
        raise TirError(f"no OpenCL device found: pyopencl is not installed ({e})") from None
    return cl


def preload_opencl() -> None:
    """Load the OpenCL drivers now, if there are any: TensorFlow makes its LLVM symbols global
    when imported, and PoCL (which links LLVM) loaded after it crashes the process. For a
    process that imports TensorFlow itself (the tests' conftest: their fixtures build models
    with it); tensorir never does (frontend/tf_child.py runs TensorFlow in a child process)."""
    with contextlib.suppress(Exception):  # no pyopencl, no ICD: nothing to protect
        load_pyopencl().get_platforms()


def opencl_platforms(platform: str = "") -> list[Any]:
    """The OpenCL platforms whose name contains `platform` and `TIR_OPENCL_PLATFORM`."""
    cl = load_pyopencl()
    try:
        plats = cl.get_platforms()
    except cl.Error as e:
        raise TirError(f"no OpenCL device found: {e} (is an ICD file installed?)") from None
    wanted = [w.lower() for w in (platform, config.opencl_platform()) if w]
    return [p for p in plats if all(w in p.name.lower() for w in wanted)]


def select_device(platform: str = "") -> Any:
    """The first GPU of the matching platforms, else their first device."""
    cl = load_pyopencl()
    devices: list[Any] = []
    for plat in opencl_platforms(platform):
        try:
            devices += plat.get_devices()
        except cl.Error:
            continue  # a platform without devices
    for d in devices:
        if d.type & cl.device_type.GPU:
            return d
    if not devices:
        filt = config.opencl_platform()
        what = " ".join(x for x in (platform, filt) if x)
        raise TirError(f"no OpenCL device found{' on a platform matching ' + repr(what) if what else ''}")
    return devices[0]


def query_profile(platform: str = "") -> DeviceProfile:
    """The profile of the OpenCL device present (see `select_device`)."""
    cl = load_pyopencl()
    d = select_device(platform)
    sizes = (*(int(x) for x in d.max_work_item_sizes), 1, 1, 1)
    return DeviceProfile(
        name=f"opencl:{d.name.strip()}",
        kind="gpu" if d.type & cl.device_type.GPU else "cpu",
        vendor=d.vendor.strip(),
        max_work_group_size=int(d.max_work_group_size),
        max_work_item_sizes=(sizes[0], sizes[1], sizes[2]),
        local_mem_bytes=int(d.local_mem_size),
        compute_units=int(d.max_compute_units),
        image_support=bool(d.image_support),
        image2d_max_width=int(d.image2d_max_width) if d.image_support else 0,
        image2d_max_height=int(d.image2d_max_height) if d.image_support else 0,
        fp16="cl_khr_fp16" in d.extensions.split(),
        preferred_vector_width_float=int(d.preferred_vector_width_float),
        mem_base_addr_align_bits=int(d.mem_base_addr_align),
        global_mem_bytes=int(d.global_mem_size),
        platform=d.platform.name.strip(),
        description=f"{d.name.strip()} ({d.version.strip()}, driver {d.driver_version.strip()})",
        source="queried through pyopencl",
    )
