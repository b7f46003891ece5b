"""Objects -> shared libraries with ld.lld, and a qemu-aarch64 runner for ARM64 builds.

    build_shared_library(funcs, "android-arm64", "out/libk.so")
    outs = run_arm64(func, [a, b, c])           # linux-arm64 .so + C driver under qemu

Linking: a kernel library without parallel loops needs nothing (`-z defs`, no DT_NEEDED).
With the pthread runtime it needs libc: for linux-gnu the cross glibc in
/usr/aarch64-linux-gnu/lib (libc6-dev-arm64-cross); for Android a stub `libc.so` (soname
libc.so, like bionic) holding only the runtime's symbols (parallel.LIBC_SYMBOLS), so
`-z defs` still proves nothing else is referenced. The OpenCL runtime's dlopen/dlsym/dlerror
(runtime/opencl LIBDL_SYMBOLS) come from libc.so.6 on glibc and from a stub `libdl.so`
(soname libdl.so, as bionic) on Android.

Tools (Debian 12): ld.lld-14 (lld-14), llvm-readelf (llvm-14), aarch64-linux-gnu-gcc
(gcc-aarch64-linux-gnu), qemu-aarch64 (qemu-user). A missing tool is a TirError naming
the package to install.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tensorir import config
from tensorir.codegen.entry import ENTRY_LIBC_SYMBOLS
from tensorir.codegen.llvm import LLVM_LOCK, emit_object, symbol_name, target_machine
from tensorir.codegen.parallel import LIBC_SYMBOLS
from tensorir.dtypes import np_dtype
from tensorir.errors import TirError
from tensorir.loop import ir
from tensorir.runtime.opencl import LIBC_SYMBOLS as OPENCL_LIBC_SYMBOLS
from tensorir.runtime.opencl import LIBDL_SYMBOLS
from tensorir.target import Target, get_target

SYSROOT = Path("/usr/aarch64-linux-gnu")
APT_PACKAGES = "qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross lld-14 llvm-14"
_APT = "apt-get install -y --no-install-recommends"
# what generated code and the OpenCL runtime may import from libc (deduplicated, in order)
ALL_LIBC_SYMBOLS = tuple(dict.fromkeys((*LIBC_SYMBOLS, *ENTRY_LIBC_SYMBOLS, *OPENCL_LIBC_SYMBOLS)))
_VERSIONS = ("", "-22", "-21", "-20", "-19", "-18", "-17", "-16", "-15", "-14")


def find_tool(base: str, package: str) -> str:
    """The first of base, base-22, ..., base-14 on PATH, else a TirError naming the package."""
    for v in _VERSIONS:
        path = shutil.which(base + v)
        if path:
            return path
    raise TirError(f"{base} not found; install it with: {_APT} {package}")


def _run(cmd: list[str], what: str, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise TirError(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stderr.strip()[-2000:]}")
    return p


def _work_dir(sub: str) -> Path:
    d = config.cache_dir() / sub
    d.mkdir(parents=True, exist_ok=True)
    return d


def stub_library(target: Target, soname: str, symbols: tuple[str, ...] | list[str]) -> Path:
    """A shared library `soname` defining only `symbols`, to link against and never ship: the
    bionic-named libc.so / libdl.so of Android links (built once per target and symbol set)."""
    import llvmlite.binding as llvm

    key = hashlib.sha1(f"{target.triple}{soname}{sorted(symbols)}".encode()).hexdigest()[:12]
    d = _work_dir(f"stub-{soname.split('.')[0]}-{key}")
    so = d / soname
    if so.exists():
        return so
    text = "\n".join(f"define void @{s}() {{\n  ret void\n}}" for s in symbols)
    obj, tmp = d / f"stub.{os.getpid()}.o", d / f"{soname}.{os.getpid()}"
    with LLVM_LOCK:
        mod = llvm.parse_assembly(f'target triple = "{target.triple}"\n{text}\n')
        obj.write_bytes(target_machine(target).emit_object(mod))
    _run([find_tool("ld.lld", "lld-14"), "-shared", "-soname", soname, "-o", str(tmp), str(obj)], "ld.lld")
    obj.unlink()
    tmp.replace(so)
    return so


def _stub_libc(target: Target) -> Path:
    """A bionic-named libc.so defining only the runtime's libc symbols (Android links)."""
    return stub_library(target, "libc.so", ALL_LIBC_SYMBOLS)


def _stub_libdl(target: Target) -> Path:
    """A bionic-named libdl.so defining only dlopen/dlsym/dlerror (Android links of the
    OpenCL runtime; bionic exports the loader's functions from libdl.so, not libc.so)."""
    return stub_library(target, "libdl.so", LIBDL_SYMBOLS)


def _libdl_args(target: Target) -> list[str]:
    """Where dlopen/dlsym/dlerror come from: bionic's libdl.so on Android (a stub to link
    against); glibc >= 2.34 has them in libc.so.6, which `_libc_args` already adds."""
    return [str(_stub_libdl(target))] if target.is_android else []


HOST_LIBC = (Path("/lib/x86_64-linux-gnu/libc.so.6"), Path("/usr/lib/x86_64-linux-gnu/libc.so.6"))


def _libc_args(target: Target) -> list[str]:
    if target.is_android:
        return [str(_stub_libc(target))]
    if target.arch == "x86_64":
        for libc in HOST_LIBC:
            if libc.exists():
                return [str(libc)]
        raise TirError("the host glibc (libc.so.6) was not found to link against")
    libc = SYSROOT / "lib" / "libc.so.6"
    if target.arch == "aarch64" and "linux-gnu" in target.triple:
        if not libc.exists():
            raise TirError(
                f"{libc} not found (the aarch64 glibc to link the thread pool against); install it with: "
                "apt-get install -y --no-install-recommends libc6-dev-arm64-cross"
            )
        return [str(libc)]
    raise TirError(f"no libc to link against for {target.triple}")


def build_shared_library(
    funcs: ir.LoopFunc | Sequence[ir.LoopFunc],
    target: Target | str,
    out: str | Path,
    soname: str | None = None,
) -> Path:
    """Compile the kernels into one ELF shared library at `out` (exports: kernel names,
    and tir_set_num_threads / tir_get_num_threads / tir_pool_wake when a kernel has a
    parallel loop)."""
    target = get_target(target)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    obj = emit_object_file(funcs, target, out.with_suffix(".o"))
    try:
        return link_shared([obj], target, out, soname)
    finally:
        obj.unlink()


def link_shared(
    objects: Sequence[str | Path], target: Target | str, out: str | Path, soname: str | None = None
) -> Path:
    """ld.lld -shared over ELF objects (kernel objects from `emit_object`, each may carry the
    weak runtime: one pool results; weights blobs from `ld.lld -r -b binary`). libc is linked
    only when the objects need it; `-z defs` rejects any other undefined symbol."""
    target = get_target(target)
    out = Path(out)
    cmd = [find_tool("ld.lld", "lld-14"), "-shared", "-z", "defs", "-z", "noexecstack", "--build-id"]
    cmd += ["--hash-style=both", "-soname", soname or out.name, "-o", str(out), *map(str, objects)]
    if target.is_android:
        cmd += ["-z", "max-page-size=16384"]
    undefined = set().union(*(undefined_symbols(o) for o in objects))
    if undefined & set(ALL_LIBC_SYMBOLS) or undefined & set(LIBDL_SYMBOLS):
        cmd += _libc_args(target)
    if undefined & set(LIBDL_SYMBOLS):
        cmd += _libdl_args(target)
    _run(cmd, "ld.lld")
    return out


_LD_EMULATION = {"x86_64": "elf_x86_64", "aarch64": "aarch64linux"}


def weights_object(blob: Path, arch: str) -> Path:
    """`ld.lld -r -b binary`: the file `blob` as an ELF object of data, its .data aligned to
    64 bytes, with symbols named after the file (weights.bin -> _binary_weights_bin_start)."""
    if arch not in _LD_EMULATION:
        raise TirError(f"no ld.lld emulation for {arch}")
    obj = blob.with_suffix(".o")
    ld = find_tool("ld.lld", "lld-14")
    _run(
        [ld, "-m", _LD_EMULATION[arch], "-r", "-b", "binary", blob.name, "-o", obj.name],
        "ld.lld",
        cwd=blob.parent,
    )
    _run([find_tool("llvm-objcopy", "llvm-14"), "--set-section-alignment=.data=64", str(obj)], "llvm-objcopy")
    return obj


def emit_object_file(
    funcs: ir.LoopFunc | Sequence[ir.LoopFunc], target: Target | str, out: str | Path
) -> Path:
    """`emit_object` written to `out`."""
    out = Path(out)
    out.write_bytes(emit_object(funcs, target))
    return out


def _symbols(path: str | Path, dynamic: bool) -> tuple[set[str], set[str]]:
    flag = "--dyn-syms" if dynamic else "--syms"
    p = _run([find_tool("llvm-readelf", "llvm-14"), flag, "--wide", str(path)], "llvm-readelf")
    defined, undefined = set(), set()
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) < 8 or not parts[0].rstrip(":").isdigit() or parts[3] in ("SECTION", "FILE"):
            continue
        name = parts[7].split("@")[0]
        if name:
            (undefined if parts[6] == "UND" else defined).add(name)
    return defined, undefined


def defined_symbols(obj: str | Path) -> set[str]:
    """Defined symbols of an ELF object (llvm-readelf --syms)."""
    return _symbols(obj, dynamic=False)[0]


def undefined_symbols(obj: str | Path) -> set[str]:
    """Undefined symbols of an ELF object (llvm-readelf --syms)."""
    return _symbols(obj, dynamic=False)[1]


def dynamic_symbols(lib: str | Path) -> tuple[set[str], set[str]]:
    """(defined, undefined) dynamic symbols of an ELF file, via llvm-readelf --dyn-syms."""
    return _symbols(lib, dynamic=True)


def needed_libraries(lib: str | Path) -> list[str]:
    p = _run([find_tool("llvm-readelf", "llvm-14"), "--dynamic-table", str(lib)], "llvm-readelf")
    return [line.split("[", 1)[1].rstrip("]") for line in p.stdout.splitlines() if "(NEEDED)" in line]


# ---- qemu-aarch64 runner ------------------------------------------------------------------
_DRIVER = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
/* driver LIB SYMBOL NTHREADS REPS ARG...   ARG: b:NBYTES:PATH (a buffer, written back to
   PATH.out), i:VALUE (a 64-bit integer) or f:HEXBITS (float/double bits). AAPCS64 passes
   the first 8 integer/pointer arguments in x0-x7 and the first 8 floating-point ones in
   v0-v7 independently, further integers on the stack in order; so one call through this
   type serves every kernel with at most 24 integer/pointer and 8 float arguments. */
#define MAXI 24
typedef void (*kfn)(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                    double, double, double, double, double, double, double, double,
                    int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                    int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
int main(int argc, char **argv) {
  if (argc < 5 || argc - 5 > MAXI + 8) {
    fprintf(stderr, "usage: driver LIB SYMBOL NTHREADS REPS ARG...\n");
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
  kfn f = (kfn)dlsym(h, argv[2]);
  if (!f) { fprintf(stderr, "dlsym: %s\n", dlerror()); return 1; }
  int nthreads = atoi(argv[3]), reps = atoi(argv[4]), n = argc - 5;
  void (*set_threads)(int32_t) = (void (*)(int32_t))dlsym(h, "tir_set_num_threads");
  if (set_threads && nthreads > 0) set_threads(nthreads);
  int64_t a[MAXI + 8] = {0}, x[MAXI] = {0};
  long sizes[MAXI + 8] = {0};
  double d[8] = {0};
  int nx = 0, nd = 0;
  for (int k = 0; k < n; k++) {
    char *s = argv[5 + k];
    if (s[0] == 'f' ? nd == 8 : nx == MAXI) {
      fprintf(stderr, "at most 24 integer and 8 float arguments\n");
      return 2;
    }
    if (s[0] == 'i') { a[k] = atoll(s + 2); x[nx++] = a[k]; continue; }
    if (s[0] == 'f') { uint64_t b = strtoull(s + 2, 0, 16); memcpy(&d[nd++], &b, 8); continue; }
    char *path = strchr(s + 2, ':') + 1; sizes[k] = atol(s + 2);
    void *buf = aligned_alloc(64, (sizes[k] + 63) / 64 * 64 + 64);
    FILE *fp = fopen(path, "rb");
    if (!fp || fread(buf, 1, sizes[k], fp) != (size_t)sizes[k]) {
      fprintf(stderr, "read %s failed\n", path);
      return 2;
    }
    fclose(fp); a[k] = (int64_t)(intptr_t)buf; x[nx++] = a[k];
  }
#define CALL f(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], \
               d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7], \
               x[8], x[9], x[10], x[11], x[12], x[13], x[14], x[15], \
               x[16], x[17], x[18], x[19], x[20], x[21], x[22], x[23])
  CALL;
  for (int k = 0; k < n; k++) {
    if (argv[5 + k][0] != 'b') continue;
    char out[4096]; snprintf(out, sizeof out, "%s.out", strchr(argv[5 + k] + 2, ':') + 1);
    FILE *fp = fopen(out, "wb"); fwrite((void *)(intptr_t)a[k], 1, sizes[k], fp); fclose(fp);
  }
  if (reps > 0) {
    struct timespec t0, t1; clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < reps; r++) CALL;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%.3f us/call\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / reps);
  }
  return 0;
}
"""


def qemu_driver() -> Path:
    """The aarch64 C driver (cross-compiled once, cached)."""
    key = hashlib.sha1(_DRIVER.encode()).hexdigest()[:12]
    d = _work_dir("qemu")
    exe = d / f"driver-{key}"
    if not exe.exists():
        src = d / f"driver-{key}.c"
        src.write_text(_DRIVER)
        gcc = find_tool("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu libc6-dev-arm64-cross")
        tmp = d / f"driver-{key}.{os.getpid()}"
        _run([gcc, "-O2", "-o", str(tmp), str(src), "-ldl"], "aarch64-linux-gnu-gcc")
        tmp.replace(exe)
    return exe


def _qemu() -> str:
    path = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")
    if not path:
        raise TirError(f"qemu-aarch64 not found; install it with: {_APT} qemu-user")
    if not (SYSROOT / "lib" / "ld-linux-aarch64.so.1").exists():
        raise TirError(f"{SYSROOT} has no aarch64 glibc; install it with: {_APT} libc6-dev-arm64-cross")
    return path


def _fp_bits(a: float | np.floating) -> str:
    """Register bits of a float argument: float32 in the low half of the register, else a double."""
    if isinstance(a, np.float32):
        return f"{int(np.array(a).view(np.uint32)):x}"
    return f"{int(np.array(float(a)).view(np.uint64)):x}"


def run_library(
    lib: str | Path,
    symbol: str,
    args: Sequence[np.ndarray | int | float],
    *,
    num_threads: int = 0,
    reps: int = 0,
    android: bool = False,
) -> tuple[list[np.ndarray | int | float], str]:
    """Call `symbol` in an aarch64 library under qemu. Returns (the arguments after the call,
    arrays as new arrays holding what the kernel left in them; the driver's stdout, which
    has the time per call when reps > 0). `android`: the library needs bionic's `libc.so`;
    glibc's libc.so.6 stands in for it (same symbol names: a smoke test of the Android
    build under qemu, not a test of bionic)."""
    n_fp = sum(isinstance(a, float | np.floating) for a in args)
    if n_fp > 8 or len(args) - n_fp > 24:
        raise TirError("the qemu driver passes at most 24 integer/pointer and 8 float arguments")
    qemu, driver = _qemu(), qemu_driver()
    with tempfile.TemporaryDirectory(prefix="tir-qemu-") as tmp:
        spec = []
        for k, a in enumerate(args):
            if isinstance(a, np.ndarray):
                path = Path(tmp) / f"arg{k}.bin"
                np.ascontiguousarray(a).tofile(path)
                spec.append(f"b:{a.nbytes}:{path}")
            elif isinstance(a, int | np.integer):
                spec.append(f"i:{int(a)}")
            elif isinstance(a, float | np.floating):
                spec.append(f"f:{_fp_bits(a)}")
            else:
                raise TirError(
                    f"qemu driver argument {k}: pass arrays, ints or floats, not {type(a).__name__}"
                )
        env = dict(os.environ, QEMU_LD_PREFIX=str(SYSROOT))
        if android:
            (Path(tmp) / "libc.so").symlink_to(SYSROOT / "lib" / "libc.so.6")
            env["QEMU_SET_ENV"] = f"LD_LIBRARY_PATH={tmp}"
        cmd = [qemu, str(driver), str(Path(lib).resolve()), symbol, str(num_threads), str(reps), *spec]
        p = _run(cmd, "qemu-aarch64", env=env, timeout=600)
        outs: list[np.ndarray | int] = []
        for k, a in enumerate(args):
            if isinstance(a, np.ndarray):
                outs.append(np.fromfile(Path(tmp) / f"arg{k}.bin.out", dtype=a.dtype).reshape(a.shape))
            else:
                outs.append(a)
        return outs, p.stdout


def run_arm64(
    func: ir.LoopFunc,
    args: Sequence[np.ndarray | int],
    target: Target | str = "linux-arm64",
    *,
    num_threads: int = 0,
) -> list[np.ndarray | int]:
    """Build `func` as an aarch64 shared library (linux-arm64 or android-arm64), run it once
    under qemu on `args`, return the arguments after the call (arrays as new arrays)."""
    target = get_target(target)
    if target.arch != "aarch64":
        raise TirError(f"qemu-aarch64 cannot run {target.triple} code")
    args = list(args)
    for k, (p, a) in enumerate(zip(func.params, args, strict=True)):
        if isinstance(p, ir.Buffer) and (not isinstance(a, np.ndarray) or a.dtype != np_dtype(p.dtype)):
            raise TirError(f"{func.name}: argument {p.name!r} must be a {p.dtype} array")
        if isinstance(p, ir.Var) and p.dtype.startswith("float"):
            args[k] = np_dtype(p.dtype).type(a)
    with tempfile.TemporaryDirectory(prefix="tir-arm64-") as tmp:
        lib = build_shared_library(func, target, Path(tmp) / f"lib{symbol_name(func.name)}.so")
        outs, _ = run_library(
            lib, symbol_name(func.name), args, num_threads=num_threads, android=target.is_android
        )
    return outs
