"""How far apart two cores are: a cache line's round trip between the first two CPUs of the
process's mask (`round_trip_ns`), LLVM IR run by the process's JIT (atomics, pthread_create and
sched_setaffinity from libc; a bare spin, no `pause`, as the C version it was checked against).
On the 2-vCPU Zen 5 VM it reads 65-160 ns most of the time and 400-800 ns for spells of seconds
to minutes, when the hypervisor runs the two vCPUs on cores that share no L3: every line one
thread writes and the other reads then crosses the fabric, and a model at 2 threads slows
(ResNet-50 14.5-14.9 -> 16.5-17.9 ms). `autotune.idle.cores_ready` counts such a spell as not
ready; `python -m benchmarks.core_distance` prints it over time."""

from __future__ import annotations

import ctypes
import os
import platform

FAR_NS = 250.0  # round trips above this: the cores share no cache level

SETAFFINITY = {"x86_64": 203, "aarch64": 122}  # sched_setaffinity's syscall number

_IR = r"""
@tir_cd_flag = internal global i64 0, align 64
@tir_cd_cpu1 = internal global i64 0

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_join(i64, ptr)
declare i64 @syscall(i64, ...)

define internal void @tir_cd_pin(i64 %cpu) {
  %mask = alloca [16 x i64], align 8
  call void @llvm.memset.p0.i64(ptr %mask, i8 0, i64 128, i1 false)
  %word = lshr i64 %cpu, 6
  %bit = and i64 %cpu, 63
  %one = shl i64 1, %bit
  %p = getelementptr [16 x i64], ptr %mask, i64 0, i64 %word
  store i64 %one, ptr %p
  %r = call i64 (i64, ...) @syscall(i64 SETAFFINITY, i64 0, i64 128, ptr %mask)
  ret void
}
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)

define internal ptr @tir_cd_pong(ptr %arg) {
entry:
  %n = ptrtoint ptr %arg to i64
  %c = load i64, ptr @tir_cd_cpu1
  call void @tir_cd_pin(i64 %c)
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %got]
  %want = add i64 %i, %i
  %odd = add i64 %want, 1
  br label %wait
wait:
  %v = load atomic i64, ptr @tir_cd_flag acquire, align 8
  %ok = icmp eq i64 %v, %odd
  br i1 %ok, label %got, label %wait
got:
  %even = add i64 %want, 2
  store atomic i64 %even, ptr @tir_cd_flag release, align 8
  %i1 = add i64 %i, 1
  %done = icmp eq i64 %i1, %n
  br i1 %done, label %out, label %loop
out:
  ret ptr null
}

; ns for n round trips between CPU c0 (this thread) and c1 (a new one), timed after 2000
; trips (the thread's start and its move to c1 are not timed); -1 if pthread_create failed
declare i32 @clock_gettime(i32, ptr)

define internal i64 @tir_cd_now() {
  %ts = alloca [2 x i64], align 8
  %r = call i32 @clock_gettime(i32 1, ptr %ts)
  %s = load i64, ptr %ts
  %p = getelementptr [2 x i64], ptr %ts, i64 0, i64 1
  %ns = load i64, ptr %p
  %sn = mul i64 %s, 1000000000
  %t = add i64 %sn, %ns
  ret i64 %t
}

define i64 @tir_core_distance_ping(i64 %n, i64 %c0, i64 %c1) {
entry:
  store atomic i64 0, ptr @tir_cd_flag seq_cst, align 8
  store i64 %c1, ptr @tir_cd_cpu1
  call void @tir_cd_pin(i64 %c0)
  %tid = alloca i64
  %t0 = alloca i64
  store i64 0, ptr %t0
  %total = add i64 %n, 2000
  %arg = inttoptr i64 %total to ptr
  %rc = call i32 @pthread_create(ptr %tid, ptr null, ptr @tir_cd_pong, ptr %arg)
  %bad = icmp ne i32 %rc, 0
  br i1 %bad, label %fail, label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %next]
  %twice = add i64 %i, %i
  %odd = add i64 %twice, 1
  store atomic i64 %odd, ptr @tir_cd_flag release, align 8
  %even = add i64 %twice, 2
  br label %wait
wait:
  %v = load atomic i64, ptr @tir_cd_flag acquire, align 8
  %ok = icmp eq i64 %v, %even
  br i1 %ok, label %got, label %wait
got:
  %i1 = add i64 %i, 1
  %start = icmp eq i64 %i1, 2000
  br i1 %start, label %stamp, label %next
stamp:
  %now = call i64 @tir_cd_now()
  store i64 %now, ptr %t0
  br label %next
next:
  %done = icmp eq i64 %i1, %total
  br i1 %done, label %join, label %loop
join:
  %t1 = call i64 @tir_cd_now()
  %t = load i64, ptr %tid
  %j = call i32 @pthread_join(i64 %t, ptr null)
  %t0v = load i64, ptr %t0
  %dt = sub i64 %t1, %t0v
  ret i64 %dt
fail:
  ret i64 -1
}
"""

_ping = None


def _compiled():
    """`ping(n, cpu0, cpu1)` in the process's JIT ."""
    global _ping
    if _ping is None:
        import llvmlite.binding as llvm

        from tensorir.codegen.llvm import LLVM_LOCK
        from tensorir.runtime.jit import _engine

        engine = _engine()
        with LLVM_LOCK:
            mod = llvm.parse_assembly(_IR.replace("SETAFFINITY", str(SETAFFINITY[platform.machine()])))
            mod.verify()
            engine.add(mod)
            addr = engine.address("tir_core_distance_ping")
        _ping = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(addr)
    return _ping


def round_trip_ns(trips: int = 20000) -> float | None:
    """Nanoseconds per round trip of a cache line between the first two CPUs this process may
    run on (None with fewer than two), timed after 2000 untimed trips. The calling thread is
    pinned to the first CPU for the call and given back its mask after."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    ping = _compiled()
    mask = os.sched_getaffinity(0)
    try:
        ns = ping(trips, cpus[0], cpus[1])
    finally:
        os.sched_setaffinity(0, mask)
    if ns < 0:
        raise OSError("core_distance: pthread_create failed")
    return ns / trips


def is_far(ns: float | None) -> bool:
    return ns is not None and ns > FAR_NS
