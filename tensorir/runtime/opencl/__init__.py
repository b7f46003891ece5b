"""The OpenCL host runtime's C sources (tir_opencl.c, tir_opencl_plan.h, tir_opencl_api.h) and
what they import.

`tensorir.codegen.opencl_package` compiles `RUNTIME_SOURCE` for the target triple and links it
with the generated plan tables; `tensorir.codegen.link` uses the symbol lists to decide which
libraries to link (libc, and on Android bionic's libdl.so) under `-z defs`.
"""

from __future__ import annotations

from pathlib import Path

RUNTIME_DIR = Path(__file__).parent
RUNTIME_SOURCE = RUNTIME_DIR / "tir_opencl.c"
PLAN_HEADER = RUNTIME_DIR / "tir_opencl_plan.h"

# libc functions tir_opencl.c declares and calls (plus memcpy/memset the compiler may emit)
LIBC_SYMBOLS = (
    "malloc",
    "calloc",
    "free",
    "memcpy",
    "memset",
    "fopen",
    "fread",
    "fwrite",
    "fclose",
    "rename",
    "getpid",
    "snprintf",
    "getenv",
    "clock_gettime",
)
# the dynamic loader's functions: libc.so.6 on glibc >= 2.34, bionic's libdl.so on Android
LIBDL_SYMBOLS = ("dlopen", "dlsym", "dlerror")
