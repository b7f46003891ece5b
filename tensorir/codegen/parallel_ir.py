"""The parallel-for runtime as an LLVM IR template (`parallel.runtime_ir` fills it in per
target: syscall numbers, spin count, pause instruction, thread and chunk constants). The
protocol is described in parallel.py's docstring."""

from string import Template

RUNTIME = Template(r"""
target datalayout = "$datalayout"
target triple = "$triple"

@tir_rt_requested = weak hidden global i32 $threads, align 4
@tir_rt_default = weak hidden global i32 0, align 4
@tir_rt_workers = weak hidden global i32 0, align 4
@tir_rt_pid = weak hidden global i32 0, align 4
@tir_rt_busy = weak hidden global i32 0, align 64
@tir_rt_job_fn = weak hidden global ptr null, align 64
@tir_rt_job_cl = weak hidden global ptr null, align 8
@tir_rt_job_begin = weak hidden global i64 0, align 8
@tir_rt_job_len = weak hidden global i64 0, align 8
@tir_rt_job = weak hidden global i64 0, align 64
@tir_rt_claims = weak hidden global [$max_threads x [16 x i64]] zeroinitializer, align 128
@tir_rt_gen = weak hidden global i32 0, align 64
@tir_rt_sleepers = weak hidden global i32 0, align 64
@tir_rt_done = weak hidden global i32 0, align 64
@tir_rt_master_sleeping = weak hidden global i32 0, align 64
@tir_rt_quit = weak hidden global i32 0, align 64
@tir_rt_tids = weak hidden global [$max_threads x i64] zeroinitializer, align 8
; a .fini_array entry (llvm.global_dtors would land in .dtors, which nothing runs here)
@tir_rt_fini = internal constant ptr @tir_rt_shutdown, section ".fini_array", align 8
@llvm.used = appending global [1 x ptr] [ptr @tir_rt_fini], section "llvm.metadata"

declare i32 @pthread_create(ptr, ptr, ptr, ptr)
declare i32 @pthread_attr_init(ptr)
declare i32 @pthread_attr_setstacksize(ptr, i64)
declare i32 @pthread_attr_setdetachstate(ptr, i32)
declare i32 @pthread_attr_destroy(ptr)
declare i32 @pthread_join(i64, ptr)
declare i64 @syscall(i64, ...)
declare i32 @getpid()
declare <16 x i64> @llvm.ctpop.v16i64(<16 x i64>)
declare i64 @llvm.vector.reduce.add.v16i64(<16 x i64>)
$pause_decl

define weak void @tir_set_num_threads(i32 %n) nounwind {
  %pos = icmp sgt i32 %n, 0
  %v = select i1 %pos, i32 %n, i32 0
  store atomic i32 %v, ptr @tir_rt_requested monotonic, align 4
  ret void
}

define weak i32 @tir_get_num_threads() nounwind {
  %n = call i32 @tir_rt_threads()
  ret i32 %n
}

define weak hidden i32 @tir_rt_threads() nounwind {
entry:
  %mask = alloca <16 x i64>, align 16
  %req = load atomic i32, ptr @tir_rt_requested monotonic, align 4
  %has_req = icmp sgt i32 %req, 0
  br i1 %has_req, label %clamp, label %dflt
dflt:
  %d = load atomic i32, ptr @tir_rt_default monotonic, align 4
  %has_d = icmp sgt i32 %d, 0
  br i1 %has_d, label %clamp, label %query
query:
  store <16 x i64> zeroinitializer, ptr %mask, align 16
  %r = call i64 (i64, ...) @syscall(i64 $affinity, i64 0, i64 128, ptr %mask)
  %bits = load <16 x i64>, ptr %mask, align 16
  %pc = call <16 x i64> @llvm.ctpop.v16i64(<16 x i64> %bits)
  %cnt = call i64 @llvm.vector.reduce.add.v16i64(<16 x i64> %pc)
  %ok = icmp sgt i64 %r, 0
  %cnt1 = select i1 %ok, i64 %cnt, i64 1
  %cnt2 = trunc i64 %cnt1 to i32
  %pos = icmp sgt i32 %cnt2, 0
  %cnt3 = select i1 %pos, i32 %cnt2, i32 1
  store atomic i32 %cnt3, ptr @tir_rt_default monotonic, align 4
  br label %clamp
clamp:
  %n = phi i32 [ %req, %entry ], [ %d, %dflt ], [ %cnt3, %query ]
  %big = icmp sgt i32 %n, $max_threads
  %m = select i1 %big, i32 $max_threads, i32 %n
  ret i32 %m
}

; one step of a spin-wait: a pause, and every YIELD_EVERY-th step the core to whoever waits for it
define internal void @tir_rt_relax(i32 %step) nounwind alwaysinline {
entry:
  $pause
  %tick = and i32 %step, $yield_mask
  %now = icmp eq i32 %tick, 0
  br i1 %now, label %yield, label %out
yield:
  %y = call i64 (i64, ...) @syscall(i64 $sched_yield)
  br label %out
out:
  ret void
}

define weak hidden void @tir_rt_futex_wait(ptr %addr, i32 %val) nounwind {
  %v = zext i32 %val to i64
  %r = call i64 (i64, ...) @syscall(i64 $futex, ptr %addr, i64 128, i64 %v, ptr null, ptr null, i64 0)
  ret void
}

define weak hidden void @tir_rt_futex_wake(ptr %addr, i32 %n) nounwind {
  %v = zext i32 %n to i64
  %r = call i64 (i64, ...) @syscall(i64 $futex, ptr %addr, i64 129, i64 %v, ptr null, ptr null, i64 0)
  ret void
}

; [begin + len*i/n, begin + len*(i+1)/n)
define weak hidden void @tir_rt_run_chunk(i32 %i, i32 %n) nounwind {
  %fn = load ptr, ptr @tir_rt_job_fn, align 8
  %cl = load ptr, ptr @tir_rt_job_cl, align 8
  %b = load i64, ptr @tir_rt_job_begin, align 8
  %len = load i64, ptr @tir_rt_job_len, align 8
  %i64 = zext i32 %i to i64
  %n64 = zext i32 %n to i64
  %i1 = add i64 %i64, 1
  %a0 = mul i64 %len, %i64
  %a1 = sdiv i64 %a0, %n64
  %lo = add i64 %b, %a1
  %b0 = mul i64 %len, %i1
  %b1 = sdiv i64 %b0, %n64
  %hi = add i64 %b, %b1
  call void %fn(ptr %cl, i64 %lo, i64 %hi)
  ret void
}

; claim one chunk of job %g (%n chunks, T = %g & 255 threads) from thread %v's claim word
; at %p (gen << 32 | end << 16 | next: its chunks [next, end) left), the next one from the
; front where %own, else the last one from the back. A word still holding an older job's
; stands for %v's home chunks [v*n/T, (v+1)*n/T), set in the same exchange. Returns the
; chunk, or -1 where none is left, or -2 where the word holds a newer job's (job %g is over).
define weak hidden i32 @tir_rt_claim(ptr %p, i32 %v, i32 %g, i32 %n, i1 %own) nounwind {
entry:
  %g64 = zext i32 %g to i64
  %tag = shl i64 %g64, 32
  %gc = lshr i32 %g, 8
  br label %load
load:
  %w = load atomic i64, ptr %p acquire, align 8
  %wtag = and i64 %w, -4294967296
  %same = icmp eq i64 %wtag, %tag
  br i1 %same, label %have, label %age
age:
  %wc64 = lshr i64 %w, 40
  %wc = trunc i64 %wc64 to i32
  %d0 = sub i32 %gc, %wc
  %d = and i32 %d0, 16777215
  %ahead = icmp ult i32 %d, 8388608
  %moved = icmp ne i32 %d, 0
  %older = and i1 %ahead, %moved
  br i1 %older, label %home, label %newer
home:
  %t = and i32 %g, 255
  %vn = mul i32 %v, %n
  %lo = udiv i32 %vn, %t
  %v1 = add i32 %v, 1
  %v1n = mul i32 %v1, %n
  %hi = udiv i32 %v1n, %t
  %lo64 = zext i32 %lo to i64
  %hi64 = zext i32 %hi to i64
  %hish = shl i64 %hi64, 16
  %h0 = or i64 %tag, %hish
  %fresh = or i64 %h0, %lo64
  br label %have
have:
  %cur = phi i64 [ %w, %load ], [ %fresh, %home ]
  %next = and i64 %cur, 65535
  %esh = lshr i64 %cur, 16
  %end = and i64 %esh, 65535
  %avail = icmp ult i64 %next, %end
  br i1 %avail, label %try, label %none
try:
  %wf = add i64 %cur, 1
  %wb = sub i64 %cur, 65536
  %w1 = select i1 %own, i64 %wf, i64 %wb
  %endm1 = sub i64 %end, 1
  %c = select i1 %own, i64 %next, i64 %endm1
  %cx = cmpxchg ptr %p, i64 %w, i64 %w1 acq_rel monotonic, align 8
  %okc = extractvalue { i64, i1 } %cx, 1
  br i1 %okc, label %got, label %load
got:
  %c32 = trunc i64 %c to i32
  ret i32 %c32
none:
  ret i32 -1
newer:
  ret i32 -2
}

; run chunks of job %g until none is left, as thread %self of its T: first the thread's own
; home chunks, in order from the front, then the other threads' left over, one at a time from
; the back (the next thread's first). A thread keeps to the same part of the range from one
; kernel to the next, so it finds the data it wrote in its own cache, and runs its part in
; order, so what a kernel prefetches for its next iteration is what this thread runs next
; (chunks claimed from both ends of one range, as before, sent the worker backwards: ResNet-50's
; layer-4 convs, whose weights stream from memory at 2 threads, ran 7-15% slower).
; The job word (gen << 32 | n) is read once: a thread late for job %g finds a newer one there
; and leaves, and the home chunks it sets up are always of the job it names.
define weak hidden void @tir_rt_work(i32 %g, i32 %self) nounwind {
entry:
  %g64 = zext i32 %g to i64
  %tag = shl i64 %g64, 32
  %job = load atomic i64, ptr @tir_rt_job acquire, align 8
  %jtag = and i64 %job, -4294967296
  %current = icmp eq i64 %jtag, %tag
  br i1 %current, label %start, label %out
start:
  %jn = and i64 %job, 65535
  %n = trunc i64 %jn to i32
  %t = and i32 %g, 255
  br label %pick
pick:
  %k = phi i32 [ 0, %start ], [ %k, %ran_one ], [ %k1, %next_v ]
  %ran = phi i32 [ 0, %start ], [ %ran1, %ran_one ], [ %ran, %next_v ]
  %more_v = icmp ult i32 %k, %t
  br i1 %more_v, label %claim, label %done
claim:
  %vs = add i32 %self, %k
  %wrap = icmp uge i32 %vs, %t
  %vw = sub i32 %vs, %t
  %v = select i1 %wrap, i32 %vw, i32 %vs
  %p = getelementptr [$max_threads x [16 x i64]], ptr @tir_rt_claims, i64 0, i32 %v, i64 0
  %own = icmp eq i32 %k, 0
  %c = call i32 @tir_rt_claim(ptr %p, i32 %v, i32 %g, i32 %n, i1 %own)
  %got = icmp sge i32 %c, 0
  br i1 %got, label %ran_one, label %empty
empty:
  %over = icmp eq i32 %c, -2
  br i1 %over, label %done, label %next_v
ran_one:
  call void @tir_rt_run_chunk(i32 %c, i32 %n)
  %ran1 = add i32 %ran, 1
  br label %pick
next_v:
  %k1 = add i32 %k, 1
  br label %pick
done:
  %any = icmp sgt i32 %ran, 0
  br i1 %any, label %count, label %out
count:
  %o = atomicrmw add ptr @tir_rt_done, i32 %ran seq_cst, align 4
  %ms = load atomic i32, ptr @tir_rt_master_sleeping seq_cst, align 4
  %wake = icmp ne i32 %ms, 0
  br i1 %wake, label %wake_master, label %out
wake_master:
  call void @tir_rt_futex_wake(ptr @tir_rt_done, i32 1)
  br label %out
out:
  ret void
}

; arg = (generation word when the worker was created << 16) | worker index (1, 2, ...)
define internal ptr @tir_rt_worker(ptr %arg) nounwind {
entry:
  %seenp = alloca i32, align 4
  %a = ptrtoint ptr %arg to i64
  %idx64 = and i64 %a, 65535
  %idx = trunc i64 %idx64 to i32
  %g64 = lshr i64 %a, 16
  %g0 = trunc i64 %g64 to i32
  store i32 %g0, ptr %seenp, align 4
  call void @tir_rt_spread()
  br label %spin_start
spin_start:
  %seen = load i32, ptr %seenp, align 4
  br label %spin
spin:
  %s = phi i32 [ 0, %spin_start ], [ %s1, %spin_more ]
  %g = load atomic i32, ptr @tir_rt_gen acquire, align 4
  %new = icmp ne i32 %g, %seen
  br i1 %new, label %work, label %spin_more
spin_more:
  %s1 = add i32 %s, 1
  call void @tir_rt_relax(i32 %s1)
  %again = icmp ult i32 %s1, $spin
  br i1 %again, label %spin, label %sleep
sleep:
  %o1 = atomicrmw add ptr @tir_rt_sleepers, i32 1 seq_cst, align 4
  %g2 = load atomic i32, ptr @tir_rt_gen seq_cst, align 4
  %same = icmp eq i32 %g2, %seen
  br i1 %same, label %do_wait, label %woke
do_wait:
  call void @tir_rt_futex_wait(ptr @tir_rt_gen, i32 %seen)
  call void @tir_rt_spread()
  br label %woke
woke:
  %o2 = atomicrmw sub ptr @tir_rt_sleepers, i32 1 seq_cst, align 4
  br label %spin_start
work:
  store i32 %g, ptr %seenp, align 4
  %q = load atomic i32, ptr @tir_rt_quit acquire, align 4
  %quit = icmp ne i32 %q, 0
  br i1 %quit, label %exit, label %mine_check
exit:
  ret ptr null
mine_check:
  %nthr = and i32 %g, 255
  %mine = icmp ult i32 %idx, %nthr
  br i1 %mine, label %run, label %spin_start
run:
  call void @tir_rt_work(i32 %g, i32 %idx)
  br label %spin_start
}

; make sure k workers exist (after fork, start over); returns how many there are
define weak hidden i32 @tir_rt_ensure(i32 %k) nounwind {
entry:
  %attr = alloca [64 x i64], align 16
  %tid = alloca i64, align 8
  %pid = call i32 @getpid()
  %old = load i32, ptr @tir_rt_pid, align 4
  %forked = icmp ne i32 %pid, %old
  br i1 %forked, label %reset, label %check
reset:
  store i32 %pid, ptr @tir_rt_pid, align 4
  store i32 0, ptr @tir_rt_workers, align 4
  store atomic i32 0, ptr @tir_rt_sleepers seq_cst, align 4
  br label %check
check:
  %w = load i32, ptr @tir_rt_workers, align 4
  %enough = icmp sge i32 %w, %k
  br i1 %enough, label %done, label %spawn
spawn:
  %here = call i32 @tir_rt_cpu()
  store atomic i32 %here, ptr @tir_rt_launcher_cpu monotonic, align 4
  %idx = add i32 %w, 1
  %gen = load atomic i32, ptr @tir_rt_gen monotonic, align 4
  %gen64 = zext i32 %gen to i64
  %gsh = shl i64 %gen64, 16
  %idx64 = zext i32 %idx to i64
  %packed = or i64 %gsh, %idx64
  %arg = inttoptr i64 %packed to ptr
  %i0 = call i32 @pthread_attr_init(ptr %attr)
  %i1 = call i32 @pthread_attr_setstacksize(ptr %attr, i64 8388608)
  %i2 = call i32 @pthread_attr_setdetachstate(ptr %attr, i32 0)
  %rc = call i32 @pthread_create(ptr %tid, ptr %attr, ptr @tir_rt_worker, ptr %arg)
  %i3 = call i32 @pthread_attr_destroy(ptr %attr)
  %failed = icmp ne i32 %rc, 0
  br i1 %failed, label %done, label %spawned
spawned:
  %t = load i64, ptr %tid, align 8
  %slot = getelementptr [$max_threads x i64], ptr @tir_rt_tids, i64 0, i32 %w
  store i64 %t, ptr %slot, align 8
  store i32 %idx, ptr @tir_rt_workers, align 4
  br label %check
done:
  %have = load i32, ptr @tir_rt_workers, align 4
  ret i32 %have
}

; unloading (dlclose) or exit: stop this process's workers and join them, so none runs the
; library's code after it is unmapped (a fork child has none until it launches a job)
define weak hidden void @tir_rt_shutdown() nounwind {
entry:
  %w = load i32, ptr @tir_rt_workers, align 4
  %any = icmp sgt i32 %w, 0
  br i1 %any, label %pid_check, label %done
pid_check:
  %pid = call i32 @getpid()
  %owner = load i32, ptr @tir_rt_pid, align 4
  %mine = icmp eq i32 %pid, %owner
  br i1 %mine, label %stop, label %done
stop:
  store atomic i32 1, ptr @tir_rt_quit seq_cst, align 4
  %g = load atomic i32, ptr @tir_rt_gen monotonic, align 4
  %g1 = add i32 %g, 256
  store atomic i32 %g1, ptr @tir_rt_gen seq_cst, align 4
  call void @tir_rt_futex_wake(ptr @tir_rt_gen, i32 2147483647)
  br label %join
join:
  %i = phi i32 [ 0, %stop ], [ %i1, %join ]
  %slot = getelementptr [$max_threads x i64], ptr @tir_rt_tids, i64 0, i32 %i
  %t = load i64, ptr %slot, align 8
  %r = call i32 @pthread_join(i64 %t, ptr null)
  %i1 = add i32 %i, 1
  %more = icmp slt i32 %i1, %w
  br i1 %more, label %join, label %reset
reset:
  store i32 0, ptr @tir_rt_workers, align 4
  store atomic i32 0, ptr @tir_rt_sleepers seq_cst, align 4
  store atomic i32 0, ptr @tir_rt_quit seq_cst, align 4
  br label %done
done:
  ret void
}

define weak hidden void @tir_parallel_for(ptr %fn, ptr %cl, i64 %begin, i64 %end) nounwind {
entry:
  %len = sub i64 %end, %begin
  %nt = call i32 @tir_rt_threads()
  %multi = icmp sgt i32 %nt, 1
  %long = icmp sgt i64 %len, 1
  %both = and i1 %multi, %long
  br i1 %both, label %lock, label %serial
lock:
  %cx = cmpxchg ptr @tir_rt_busy, i32 0, i32 1 acquire monotonic, align 4
  %locked = extractvalue { i32, i1 } %cx, 1
  br i1 %locked, label %launch, label %serial
launch:
  %want = sub i32 %nt, 1
  %have = call i32 @tir_rt_ensure(i32 %want)
  %still = icmp sgt i32 %have, 0
  br i1 %still, label %publish, label %unlock_serial
unlock_serial:
  store atomic i32 0, ptr @tir_rt_busy release, align 4
  br label %serial
publish:
  %have1 = add i32 %have, 1
  %lim = icmp slt i32 %have1, %nt
  %threads = select i1 %lim, i32 %have1, i32 %nt
  %th64 = zext i32 %threads to i64
  %want_chunks = mul i64 %th64, $chunks_per_thread
  %fewer = icmp slt i64 %len, %want_chunks
  %chunks64 = select i1 %fewer, i64 %len, i64 %want_chunks
  %chunks = trunc i64 %chunks64 to i32
  store ptr %fn, ptr @tir_rt_job_fn, align 8
  store ptr %cl, ptr @tir_rt_job_cl, align 8
  store i64 %begin, ptr @tir_rt_job_begin, align 8
  store i64 %len, ptr @tir_rt_job_len, align 8
  store atomic i32 0, ptr @tir_rt_done monotonic, align 4
  %old = load atomic i32, ptr @tir_rt_gen monotonic, align 4
  %ctr = lshr i32 %old, 8
  %ctr1 = add i32 %ctr, 1
  %ctr2 = shl i32 %ctr1, 8
  %gen = or i32 %ctr2, %threads
  %gen64 = zext i32 %gen to i64
  %tag0 = shl i64 %gen64, 32
  %jobw = or i64 %tag0, %chunks64
  store atomic i64 %jobw, ptr @tir_rt_job release, align 8
  store atomic i32 %gen, ptr @tir_rt_gen seq_cst, align 4
  %sl = load atomic i32, ptr @tir_rt_sleepers seq_cst, align 4
  %anyone = icmp sgt i32 %sl, 0
  br i1 %anyone, label %wake, label %work
wake:
  %lc = call i32 @tir_rt_cpu()
  store atomic i32 %lc, ptr @tir_rt_launcher_cpu monotonic, align 4
  call void @tir_rt_futex_wake(ptr @tir_rt_gen, i32 2147483647)
  br label %work
work:
  call void @tir_rt_work(i32 %gen, i32 0)
  br label %wait_start
wait_start:
  br label %wait
wait:
  %s = phi i32 [ 0, %wait_start ], [ %s1, %wait_more ]
  %d = load atomic i32, ptr @tir_rt_done acquire, align 4
  %fin = icmp eq i32 %d, %chunks
  br i1 %fin, label %finish, label %wait_more
wait_more:
  %s1 = add i32 %s, 1
  call void @tir_rt_relax(i32 %s1)
  %again = icmp ult i32 %s1, $spin
  br i1 %again, label %wait, label %msleep
msleep:
  store atomic i32 1, ptr @tir_rt_master_sleeping seq_cst, align 4
  %d2 = load atomic i32, ptr @tir_rt_done seq_cst, align 4
  %fin2 = icmp eq i32 %d2, %chunks
  br i1 %fin2, label %mwoke, label %mwait
mwait:
  call void @tir_rt_futex_wait(ptr @tir_rt_done, i32 %d2)
  br label %mwoke
mwoke:
  store atomic i32 0, ptr @tir_rt_master_sleeping seq_cst, align 4
  br label %wait_start
finish:
  store atomic i32 0, ptr @tir_rt_busy release, align 4
  ret void
serial:
  call void %fn(ptr %cl, i64 %begin, i64 %end)
  ret void
}
""")
