"""Run one rendered OpenCL kernel (plan.GpuKernel) on a local OpenCL device, for tests and tuning.

    from tensorir.runtime.opencl_device import run_gpu_kernel
    outs, info = run_gpu_kernel(kernel, [a, b, c], "opencl", repeat=10)
    outs[2]                              # c after the kernel ran (every buffer is copied back)
    info["device"], info["median_s"]     # the device used; timings from profiling events

Every ndarray is a buffer argument (byte offset 0), or a read-only image made from it for a
parameter in `kernel.images`; a numpy scalar (np.int64(3)) is a scalar argument.
`profile_name` picks the device: "opencl" the first GPU (else the first device) of the
platforms `TIR_OPENCL_PLATFORM` allows; a named profile the device of that profile's
platform (`DeviceProfile.platform`). Built programs are cached per (device, source) in this
process; PoCL's kernel cache goes under the tensorir cache dir unless POCL_CACHE_DIR is set.
"""

from __future__ import annotations

import statistics
import warnings
from functools import cache
from typing import Any

import numpy as np

from tensorir import config
from tensorir.devices import get_profile, load_pyopencl, select_device
from tensorir.errors import TirError
from tensorir.plan import GpuKernel, ImageParam

WARMUP = 2


@cache
def _queue(profile_name: str) -> tuple[Any, Any]:
    """(context, profiling queue) on the device `profile_name` selects."""
    cl = load_pyopencl()
    if profile_name == "opencl":
        device = select_device()
    else:
        prof = get_profile(profile_name)
        if not prof.platform:
            raise TirError(f"device profile {profile_name!r} names no OpenCL platform to run on")
        device = select_device(prof.platform)
    ctx = cl.Context([device])
    return ctx, cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)


@cache
def _program(ctx: Any, source: str) -> Any:
    cl = load_pyopencl()
    prog = cl.Program(ctx, source)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return prog.build(cache_dir=str(config.cache_dir() / "pyopencl"))
    except cl.Error as e:
        device = ctx.devices[0]
        try:
            log = prog.get_build_info(device, cl.program_build_info.LOG)
        except cl.Error:
            log = str(e)
        raise TirError(f"OpenCL build failed on {device.name.strip()}:\n{log.strip()}") from None


def run_gpu_kernel(
    kernel: GpuKernel,
    arrays: list[np.ndarray],
    profile_name: str = "opencl",
    repeat: int = 0,
    flush_bytes: int = 0,
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Run `kernel` (each of its launches, in order) once on `arrays` (its parameters in
    order); with `repeat` > 0 also time it
    (2 warm-up runs, then `repeat` timed ones; with `flush_bytes`, a buffer that large is
    rewritten on the device before each timed run, so the kernel meets cold caches as it does
    inside a model). Returns every buffer after the run and info."""
    cl = load_pyopencl()
    if len(arrays) != len(kernel.params):
        raise TirError(f"kernel {kernel.name} takes {len(kernel.params)} arguments, got {len(arrays)}")
    try:
        ctx, queue = _queue(profile_name)
        program = _program(ctx, kernel.source)
        bufs, args = _arguments(cl, ctx, arrays, kernel)
        knls = [(cl.Kernel(program, la.name), la) for la in kernel.launches]
        for knl, _ in knls:
            knl.set_args(*args)

        def run() -> list[Any]:  # every launch in order (the queue is in order)
            return [cl.enqueue_nd_range_kernel(queue, k, la.global_size, la.local_size) for k, la in knls]

        run()[-1].wait()
        outs = []
        for a, b in zip(arrays, bufs, strict=True):
            out = np.empty_like(np.asarray(a))
            if isinstance(b, cl.Image):  # read-only: unchanged
                out[...] = a
            elif b is not None and out.nbytes:
                cl.enqueue_copy(queue, out, b)
            outs.append(out)
        queue.finish()
        flush = _flusher(cl, ctx, queue, flush_bytes) if flush_bytes > 0 else None
        times = _time(run, repeat, flush) if repeat > 0 else []
    except cl.Error as e:
        raise TirError(f"OpenCL kernel {kernel.name} failed: {e}") from None
    device = queue.device
    info: dict[str, Any] = {"device": device.name.strip(), "platform": device.platform.name.strip()}
    info |= {"global_size": kernel.global_size, "local_size": kernel.local_size}
    if times:
        med = statistics.median(times)
        info |= {"times_s": times, "median_s": med, "min_s": min(times), "max_s": max(times)}
        info["spread"] = (max(times) - min(times)) / med if med > 0 else 0.0
    return outs, info


def _arguments(cl: Any, ctx: Any, arrays: list[Any], kernel: GpuKernel) -> tuple[list[Any], list[Any]]:
    flags = cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR
    bufs: list[Any] = []
    args: list[Any] = []
    for k, a in enumerate(arrays):
        if isinstance(a, np.generic):  # a scalar parameter
            bufs.append(None)
            args.append(a)
            continue
        image = kernel.image(k)
        if image is not None:
            bufs.append(make_image(cl, ctx, image, a))
            args.append(bufs[-1])
            continue
        host = np.ascontiguousarray(a)
        if host.nbytes == 0:  # OpenCL has no empty buffers
            host = np.zeros(1, host.dtype)
        bufs.append(cl.Buffer(ctx, flags, hostbuf=host))
        args += [bufs[-1], np.uint64(0)]
    return bufs, args


def make_image(cl: Any, ctx: Any, image: ImageParam, array: np.ndarray) -> Any:
    """A read-only RGBA image2d of `array`'s row-major bytes (plan.ImageParam's texels)."""
    channel = {"float": cl.channel_type.FLOAT, "half": cl.channel_type.HALF_FLOAT}[image.channel_type]
    host = np.ascontiguousarray(array).reshape(image.height, image.width, 4)
    fmt = cl.ImageFormat(cl.channel_order.RGBA, channel)
    flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
    return cl.Image(ctx, flags, fmt, shape=(image.width, image.height), hostbuf=host)


def _flusher(cl: Any, ctx: Any, queue: Any, nbytes: int) -> Any:
    """A callable that overwrites an `nbytes` device buffer (evicting the caches) and waits."""
    buf = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, nbytes)
    pattern = np.zeros(1, np.float32)

    def flush() -> None:
        pattern[0] += 1.0
        cl.enqueue_fill_buffer(queue, buf, pattern, 0, nbytes).wait()

    return flush


def _time(run: Any, repeat: int, flush: Any = None) -> list[float]:
    """Seconds per run: the sum of its launches' device times."""
    for _ in range(WARMUP):
        run()[-1].wait()
    times = []
    for _ in range(repeat):
        if flush is not None:
            flush()
        evs = run()
        evs[-1].wait()
        times.append(sum(ev.profile.end - ev.profile.start for ev in evs) * 1e-9)
    return times
