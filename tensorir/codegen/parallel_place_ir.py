"""Where the pool's worker runs, as an LLVM IR template appended to parallel_ir's runtime
(`parallel.runtime_ir` fills both in): a worker just created or woken on the CPU of the thread
that created or woke it moves to another CPU of its mask (parallel.py: GETCPU)."""

from string import Template

PLACEMENT = Template(r"""
@tir_rt_launcher_cpu = weak hidden global i32 -1, align 64

; the calling thread's CPU (getcpu), -1 where that fails
define weak hidden i32 @tir_rt_cpu() nounwind {
  %c = alloca i32, align 4
  store i32 -1, ptr %c, align 4
  %r = call i64 (i64, ...) @syscall(i64 $getcpu, ptr %c, ptr null, ptr null)
  %ok = icmp eq i64 %r, 0
  %v = load i32, ptr %c, align 4
  %out = select i1 %ok, i32 %v, i32 -1
  ret i32 %out
}

; a worker (just created or woken) that finds itself on the CPU the launcher last woke it from
; moves to another CPU of its mask: the mask narrowed, then restored at once (the scheduler
; leaves it where it went). Otherwise the two can share one CPU for milliseconds, each
; spinning while the other works, with the other CPU idle (parallel.py: GETCPU)
define weak hidden void @tir_rt_spread() nounwind {
entry:
  %mask = alloca <16 x i64>, align 16
  %l = load atomic i32, ptr @tir_rt_launcher_cpu monotonic, align 4
  %known = icmp sge i32 %l, 0
  %fits = icmp slt i32 %l, 1024
  %usable = and i1 %known, %fits
  br i1 %usable, label %where, label %out
where:
  %c = call i32 @tir_rt_cpu()
  %same = icmp eq i32 %c, %l
  br i1 %same, label %get, label %out
get:
  store <16 x i64> zeroinitializer, ptr %mask, align 16
  %r = call i64 (i64, ...) @syscall(i64 $affinity, i64 0, i64 128, ptr %mask)
  %ok = icmp sgt i64 %r, 0
  br i1 %ok, label %narrow, label %out
narrow:
  %full = load <16 x i64>, ptr %mask, align 16
  %wi = lshr i32 %l, 6
  %bi = and i32 %l, 63
  %bi64 = zext i32 %bi to i64
  %bit = shl i64 1, %bi64
  %keep = xor i64 %bit, -1
  %word = extractelement <16 x i64> %full, i32 %wi
  %word1 = and i64 %word, %keep
  %less = insertelement <16 x i64> %full, i64 %word1, i32 %wi
  %pc = call <16 x i64> @llvm.ctpop.v16i64(<16 x i64> %less)
  %cnt = call i64 @llvm.vector.reduce.add.v16i64(<16 x i64> %pc)
  %other = icmp sgt i64 %cnt, 0
  br i1 %other, label %move, label %out
move:
  store <16 x i64> %less, ptr %mask, align 16
  %m1 = call i64 (i64, ...) @syscall(i64 $setaffinity, i64 0, i64 128, ptr %mask)
  store <16 x i64> %full, ptr %mask, align 16
  %m2 = call i64 (i64, ...) @syscall(i64 $setaffinity, i64 0, i64 128, ptr %mask)
  br label %out
out:
  ret void
}
""")
