"""The native timing harness the ADB runner runs on a phone (no Python there).

    exe = harness()                        # built once, cached under the tensorir cache dir
    costs = parse_times(stdout, repeat=5)  # seconds per call

A small C program, built for aarch64-linux-android24 with clang and ld.lld (no NDK: it
declares the few libc functions it uses itself, links against stub bionic-named libc.so and
libdl.so holding only those names, and has its own `_start`, which hands over to bionic's
`__libc_init` as the NDK's crtbegin does). It dlopens the kernel library, reads the inputs
from files, calls the kernel (every argument is a pointer), writes the outputs after the
warm-up calls, then times `repeat` runs of `number` calls with clock_gettime(CLOCK_MONOTONIC);
with FLUSH_BYTES > 0 (cold, as in a model) each timing is one call after rewriting a buffer of
that size, reading the activation inputs back in and waking the library's thread pool
(`tir_pool_wake`, where it has one: codegen/parallel_wake_ir.py):

    tir-harness LIB SYMBOL THREADS WARMUP REPEAT NUMBER MIN_REPEAT_US TIMEOUT_S FLUSH_BYTES ARG...
        ARG: i:NBYTES:PATH  an input read from PATH (a weight: left cold)
             a:NBYTES:PATH  an input read from PATH (an activation: warm before each cold call)
             o:NBYTES:PATH  an output (zeroed), written to PATH after the warm-ups
             s:NBYTES       scratch (zeroed)
        NUMBER 0: as many calls as make one timing last MIN_REPEAT_US (1..10000)
    stdout:  TIR_TIMES number=N ns=T1,T2,...   (each T: nanoseconds of N calls)
    errors:  `tir-harness: ...` on stderr, exit 2 (usage, files) or 3 (dlopen, dlsym);
             alarm(TIMEOUT_S) ends a hanging kernel with SIGALRM

Under glibc (the stand-in adb of the tests runs it under qemu-aarch64) `__libc_init` is
absent (a weak reference, null) and `_start` calls main and exit itself.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Any

from autotune.runners import FLUSH_BYTES
from tensorir import config
from tensorir.codegen.link import _run, find_tool, stub_library
from tensorir.errors import TirError
from tensorir.target import get_target

TRIPLE = "aarch64-linux-android24"
MAX_ARGS = 32
LIBC = ("dprintf", "open", "read", "write", "close", "malloc", "memset", "memcpy", "strtol")
LIBC += ("clock_gettime", "alarm", "exit", "__libc_init")
LIBDL = ("dlopen", "dlsym", "dlerror")

SOURCE = r"""
typedef unsigned long size_t;
typedef long ssize_t;
typedef long long i64;
struct timespec { long tv_sec; long tv_nsec; };
void *dlopen(const char *, int);
void *dlsym(void *, const char *);
char *dlerror(void);
int dprintf(int, const char *, ...);
int open(const char *, int, ...);
ssize_t read(int, void *, size_t);
ssize_t write(int, const void *, size_t);
int close(int);
void *malloc(size_t);
void *memset(void *, int, size_t);
long strtol(const char *, char **, int);
int clock_gettime(int, struct timespec *);
unsigned alarm(unsigned);
void exit(int) __attribute__((noreturn));
struct structors { void *p[6]; };
extern void __libc_init(void *, void (*)(void), int (*)(int, char **, char **), const struct structors *)
    __attribute__((weak, noreturn));

#define MAXA @MAXA@
#define O_WRITE (01 | 0100 | 01000) /* O_WRONLY | O_CREAT | O_TRUNC (Linux, arm64) */
typedef void (*kfn)(void *, void *, void *, void *, void *, void *, void *, void *,
                    void *, void *, void *, void *, void *, void *, void *, void *,
                    void *, void *, void *, void *, void *, void *, void *, void *,
                    void *, void *, void *, void *, void *, void *, void *, void *);
static void *a[MAXA];
static kfn f;

static int fail(int code, const char *what, const char *detail) {
  dprintf(2, "tir-harness: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  return code;
}

static int io_file(const char *path, char *buf, long n, int out) {
  int fd = out ? open(path, O_WRITE, 0644) : open(path, 0);
  if (fd < 0) return -1;
  long done = 0;
  while (done < n) {
    ssize_t k = out ? write(fd, buf + done, n - done) : read(fd, buf + done, n - done);
    if (k <= 0) break;
    done += k;
  }
  close(fd);
  return done == n ? 0 : -1;
}

static void call(void) {
  f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14],
    a[15], a[16], a[17], a[18], a[19], a[20], a[21], a[22], a[23], a[24], a[25], a[26], a[27],
    a[28], a[29], a[30], a[31]);
}

static i64 now_ns(void) {
  struct timespec t;
  clock_gettime(1 /* CLOCK_MONOTONIC */, &t);
  return (i64)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static i64 timed(long number) {
  i64 t0 = now_ns();
  for (long k = 0; k < number; k++) call();
  return now_ns() - t0;
}

static char *flush_buf, *warm[MAXA];
static long flush_bytes, warm_bytes[MAXA], n_warm;
static void (*wake)(void); /* the library's tir_pool_wake, when it has a thread pool */

static i64 timed_cold(long round) {
  memset(flush_buf, (int)round, flush_bytes); /* evicts the caches: weights come from memory */
  volatile unsigned char sink = 0;
  for (long k = 0; k < n_warm; k++)
    for (long b = 0; b < warm_bytes[k]; b += 64) sink ^= (unsigned char)warm[k][b];
  if (wake) wake(); /* the workers slept through the flush; in a model they would be spinning */
  return timed(1);
}

static int harness_main(int argc, char **argv, char **envp) {
  (void)envp;
  if (argc < 10 || argc - 10 > MAXA) return fail(2, "usage: tir-harness LIB SYMBOL THREADS WARMUP REPEAT "
                                                "NUMBER MIN_REPEAT_US TIMEOUT_S FLUSH_BYTES ARG...", 0);
  long threads = strtol(argv[3], 0, 10), warmup = strtol(argv[4], 0, 10), repeat = strtol(argv[5], 0, 10);
  long number = strtol(argv[6], 0, 10), min_us = strtol(argv[7], 0, 10);
  alarm((unsigned)strtol(argv[8], 0, 10));
  flush_bytes = strtol(argv[9], 0, 10);
  if (flush_bytes > 0 && !(flush_buf = (char *)malloc(flush_bytes))) return fail(2, "out of memory", argv[9]);
  void *h = dlopen(argv[1], 2 /* RTLD_NOW */);
  if (!h) return fail(3, "dlopen", dlerror());
  f = (kfn)dlsym(h, argv[2]);
  if (!f) return fail(3, "dlsym", dlerror());
  void (*set_threads)(int) = (void (*)(int))dlsym(h, "tir_set_num_threads");
  if (set_threads && threads > 0) set_threads((int)threads);
  wake = (void (*)(void))dlsym(h, "tir_pool_wake");
  int n = argc - 10;
  long sizes[MAXA];
  char *paths[MAXA];
  for (int k = 0; k < n; k++) {
    char *s = argv[10 + k], *end;
    int in = s[0] == 'i' || s[0] == 'a';
    if ((!in && s[0] != 'o' && s[0] != 's') || s[1] != ':') return fail(2, "bad argument", s);
    sizes[k] = strtol(s + 2, &end, 10);
    paths[k] = *end == ':' ? end + 1 : 0;
    if (sizes[k] < 0 || (s[0] != 's' && !paths[k])) return fail(2, "bad argument", s);
    char *raw = (char *)malloc(sizes[k] + 128);
    if (!raw) return fail(2, "out of memory", s);
    a[k] = raw + (64 - (long)raw % 64);
    memset(a[k], 0, sizes[k] + 64);
    if (in && io_file(paths[k], (char *)a[k], sizes[k], 0)) return fail(2, "cannot read", paths[k]);
    if (s[0] == 'a') warm[n_warm] = (char *)a[k], warm_bytes[n_warm++] = sizes[k];
  }
  for (long k = 0; k < (warmup > 1 ? warmup : 1); k++) call();
  for (int k = 0; k < n; k++)
    if (argv[10 + k][0] == 'o' && io_file(paths[k], (char *)a[k], sizes[k], 1))
      return fail(2, "cannot write", paths[k]);
  if (flush_bytes > 0) number = 1;
  if (number <= 0) {
    i64 once = timed(1);
    number = once > 0 ? (min_us * 1000 + once - 1) / once : 10000;
    number = number < 1 ? 1 : number > 10000 ? 10000 : number;
  }
  dprintf(1, "TIR_TIMES number=%ld ns=", number);
  for (long r = 0; r < repeat; r++)
    dprintf(1, r ? ",%lld" : "%lld", flush_bytes > 0 ? timed_cold(r) : timed(number));
  dprintf(1, "\n");
  return 0;
}

static const struct structors no_structors;
__attribute__((used)) void tir_start(void *raw) {
  if (__libc_init) __libc_init(raw, 0, harness_main, &no_structors); /* bionic: as crtbegin */
  long argc = *(long *)raw;
  char **argv = (char **)raw + 1;
  exit(harness_main((int)argc, argv, argv + argc + 1));
}
__asm__(".text\n.globl _start\n.type _start,%function\n_start:\n  mov x0, sp\n  mov x29, #0\n"
        "  mov x30, #0\n  b tir_start\n.size _start, .-_start\n");
""".replace("@MAXA@", str(MAX_ARGS))

_CFLAGS = ["-O2", "-fPIE", "-ffreestanding", "-fno-builtin", "-fno-stack-protector", "-Wall", "-Werror"]
_LDFLAGS = ["-pie", "-z", "now", "-z", "noexecstack", "--hash-style=both", "-z", "max-page-size=16384"]
_TIMES = re.compile(r"^TIR_TIMES number=(\d+) ns=([\d,]+)\s*$", re.M)


def harness() -> Path:
    """The harness executable for arm64 Android phones (built on first use, then cached)."""
    key = hashlib.sha1(f"{SOURCE}{TRIPLE}{_CFLAGS}{_LDFLAGS}".encode()).hexdigest()[:12]
    d = config.cache_dir() / "adb-harness" / key
    exe = d / "tir-harness"
    if exe.exists():
        return exe
    d.mkdir(parents=True, exist_ok=True)
    clang = find_tool("clang", "clang-15")
    ld = find_tool("ld.lld", "lld-14")
    tmp = d / f"build.{os.getpid()}"
    tmp.mkdir(exist_ok=True)
    (tmp / "harness.c").write_text(SOURCE)
    android = get_target("android-arm64")
    stubs = [str(stub_library(android, "libc.so", LIBC)), str(stub_library(android, "libdl.so", LIBDL))]
    cc = [clang, f"--target={TRIPLE}", *_CFLAGS, "-c", "harness.c", "-o", "harness.o"]
    _run(cc, "clang (the adb timing harness)", cwd=tmp)
    link = [ld, *_LDFLAGS, "--dynamic-linker", "/system/bin/linker64", "-e", "_start"]
    _run([*link, "-o", "tir-harness", "harness.o", *stubs], "ld.lld (the adb timing harness)", cwd=tmp)
    (tmp / "tir-harness").replace(exe)
    shutil.rmtree(tmp, ignore_errors=True)
    return exe


def harness_command(exe: str, lib: str, symbol: str, args: list[str], options: Any) -> list[str]:
    """The harness's argv (see the module docstring) from MeasureOptions; its alarm goes off
    well before the measuring worker's run time-out."""
    o = options
    timeout = max(1, int(0.7 * o.run_timeout_s))
    flush = FLUSH_BYTES if getattr(o, "cold", False) else 0
    nums = (o.threads or 0, o.warmup, o.repeat, o.number or 0, int(o.min_repeat_s * 1e6), timeout, flush)
    if len(args) > MAX_ARGS:
        raise TirError(f"the adb harness passes at most {MAX_ARGS} arrays to a kernel, not {len(args)}")
    return [exe, lib, symbol, *map(str, nums), *args]


def parse_times(text: str, repeat: int) -> list[float]:
    """Seconds per call from the harness's TIR_TIMES line (a TirError when it is missing or bad)."""
    m = _TIMES.search(text)
    if not m:
        tail = text.strip().splitlines()[-1:] or ["(no output)"]
        raise TirError(f"the harness printed no timings: {tail[0][:300]}")
    number, ns = int(m.group(1)), [int(t) for t in m.group(2).split(",") if t]
    if number < 1 or len(ns) != repeat:
        raise TirError(f"the harness printed {len(ns)} timings of {number} calls, expected {repeat}")
    return [t / number / 1e9 for t in ns]
