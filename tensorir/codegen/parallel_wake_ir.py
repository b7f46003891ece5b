"""The pool's wake-up call, as an LLVM IR template appended to parallel_ir's runtime
(`parallel.runtime_ir` fills it in): `tir_pool_wake`, exported, returns once every worker of
the pool runs, so a launch right after it meets them spinning."""

from string import Template

WAKE = Template(r"""
; A launch with nothing in it but a meeting: each chunk (one per thread) counts itself in and
; waits, at most $meet_spin pauses, until all have; then every worker has woken and spins
; again, so a launch right after meets them awake. Exported: the tuner's runners call it
; before each cold timing (autotune/runners.py, the phone harness of autotune/adb_harness.py),
; whose cache flush outlasts the workers' spin: a timed call would otherwise pay their futex
; wake-up (150-180 us through the Zen 5 VM's hypervisor), which a model's kernels, run back
; to back, do not.
@tir_rt_meet_total = weak hidden global i64 0, align 64
@tir_rt_meet_count = weak hidden global i64 0, align 64

define internal void @tir_rt_meet(ptr %cl, i64 %lo, i64 %hi) nounwind {
entry:
  %n = sub i64 %hi, %lo
  %prev = atomicrmw add ptr @tir_rt_meet_count, i64 %n acq_rel
  br label %wait
wait:
  %s = phi i32 [ 0, %entry ], [ %s1, %more ]
  %c = load atomic i64, ptr @tir_rt_meet_count acquire, align 8
  %t = load i64, ptr %cl, align 8
  %all = icmp sge i64 %c, %t
  br i1 %all, label %out, label %more
more:
  %s1 = add i32 %s, 1
  $pause
  %again = icmp ult i32 %s1, $meet_spin
  br i1 %again, label %wait, label %out
out:
  ret void
}

define weak void @tir_pool_wake() nounwind {
  %nt = call i32 @tir_rt_threads()
  %n = sext i32 %nt to i64
  store i64 %n, ptr @tir_rt_meet_total, align 8
  store atomic i64 0, ptr @tir_rt_meet_count release, align 8
  call void @tir_parallel_for(ptr @tir_rt_meet, ptr @tir_rt_meet_total, i64 0, i64 %n)
  ret void
}
""")
