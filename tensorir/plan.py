"""The plan a compile hands to a backend: backend-neutral data, no code generation here.

A model runs as a list of kernel calls over five kinds of storage; every argument of a
call says where its tensor lives:

    Arg("input", k)       the k-th graph input (the caller's buffer)
    Arg("output", k)      the k-th graph output (the caller's buffer)
    Arg("weight", off)    byte offset into the weights blob (64-byte aligned)
    Arg("prepared", off)  byte offset into the prepared-weights block (64-byte aligned):
                          constants computed from the blob once, when the model is created
    Arg("workspace", off) byte offset into the one workspace the memory plan laid out

The prepared block is written by *prepare calls* (KernelCalls like the model's, reading
weights and writing prepared tensors) that `tir_create` runs once, in order, before any run:
a CPU build stores a Winograd conv's packed weight and prepares its transform U, which is
larger (tensorir/compiler_prepare.py).

A call runs on the CPU (an LLVM kernel, called by symbol) or on the GPU (an OpenCL kernel,
`GpuKernel`); a backend that has both inserts the transfers between them. A GPU kernel
may read a weight as an image (`ImageParam`): the runtime makes it from the weight's bytes
once, at load. Graph outputs that no kernel writes (a view of an input, ...) are `Copy`s
at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Arg:
    """Where a kernel argument lives: kind input|output (index) or weight|prepared|workspace
    (byte offset)."""

    kind: str
    index: int

    def to_json(self) -> list:
        return [self.kind, self.index]


@dataclass(frozen=True)
class KernelCall:
    """One step of the model: call kernel `symbol` on `args` (its parameters in order).
    `device` is "cpu" (an LLVM function of that name) or "gpu" (the GpuKernel of that name);
    `arg_bytes` is each argument's size, which transfers between devices need; `guard`: the call
    is skipped unless every (bool scalar, polarity) matches (the LLVM entry branches on it; the
    OpenCL runtime runs the call anyway, which the `where` after a guarded branch makes safe)."""

    symbol: str
    args: tuple[Arg, ...]
    device: str = "cpu"
    arg_bytes: tuple[int, ...] = ()
    guard: tuple[tuple[Arg, bool], ...] = ()  # run only when each bool byte equals its polarity


@dataclass(frozen=True)
class Copy:
    dst: Arg
    src: Arg
    nbytes: int


@dataclass(frozen=True)
class LoopSpan:
    """Calls [first, end) of the plan run as a loop (ops/loop.py): before it, `enter` copies the
    initial values into the state and `cond` into the byte `cond_state`, and the int64 `iter`
    is set to 0; iteration i runs while i < the int64 at `trip` and `cond_state` is nonzero,
    then `latch` copies the next state in and `iter` counts up. `guard`: the whole loop is
    skipped unless each bool byte equals its polarity (as KernelCall.guard)."""

    first: int
    end: int
    trip: Arg
    cond: Arg
    iter: Arg
    cond_state: Arg
    enter: tuple[Copy, ...]
    latch: tuple[Copy, ...]
    guard: tuple[tuple[Arg, bool], ...] = ()

    def to_json(self) -> dict:
        copies = {
            k: [[c.dst.to_json(), c.src.to_json(), c.nbytes] for c in getattr(self, k)]
            for k in ("enter", "latch")
        }
        args = {k: getattr(self, k).to_json() for k in ("trip", "cond", "iter", "cond_state")}
        return {"first": self.first, "end": self.end, **args, **copies}


@dataclass(frozen=True)
class ImageParam:
    """Kernel parameter `index` is a read-only `image2d_t` of `width` x `height` RGBA texels,
    channel type "float" (CL_FLOAT) or "half" (CL_HALF_FLOAT), made from the argument's
    row-major bytes: texel (x, y) = elements [4*(y*width + x), +4)."""

    index: int
    width: int
    height: int
    channel_type: str = "float"


def _ints(xs: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in xs)


@dataclass(frozen=True)
class Launch:
    """One `__kernel` of a GpuKernel's source and its NDRange."""

    name: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]


@dataclass(frozen=True)
class GpuKernel:
    """One OpenCL kernel, rendered: `source` defines `__kernel void <name>(...)` whose
    parameters are, for each loop-function buffer in order, `__global T *P_base` and
    `const ulong P_off` (a byte offset into P_base), or for a buffer in `images` one
    `__read_only image2d_t P`; launched over `global_size` work-items in groups of
    `local_size` (same length, 1 to 3 dimensions). A loop function whose nests read each
    other's results across work-groups is several launches (codegen/opencl_launches.py):
    `then` names the `__kernel`s after the first, in order, each taking the same arguments."""

    name: str
    source: str
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]
    params: tuple[tuple[str, str], ...]  # (buffer name, dtype) in call order
    images: tuple[ImageParam, ...] = ()
    then: tuple[Launch, ...] = ()

    @property
    def launches(self) -> tuple[Launch, ...]:
        """Every launch in order: the kernel's own, then `then`."""
        return (Launch(self.name, self.global_size, self.local_size), *self.then)

    def image(self, index: int) -> ImageParam | None:
        """The image of parameter `index`, None for a buffer or scalar."""
        return next((im for im in self.images if im.index == index), None)

    def to_dict(self) -> dict:
        """Plain JSON-serializable fields (what travels to an RPC measurement server)."""
        return {
            "name": self.name,
            "source": self.source,
            "global_size": list(self.global_size),
            "local_size": list(self.local_size),
            "params": [list(p) for p in self.params],
            "images": [[im.index, im.width, im.height, im.channel_type] for im in self.images],
            "then": [[la.name, list(la.global_size), list(la.local_size)] for la in self.then],
        }

    @classmethod
    def from_dict(cls, d: dict) -> GpuKernel:
        """The kernel `to_dict` described; a TypeError/ValueError/KeyError on malformed input."""
        sizes = [tuple(int(x) for x in d[k]) for k in ("global_size", "local_size")]
        params = tuple((str(n), str(t)) for n, t in d["params"])
        images = tuple(ImageParam(int(i), int(w), int(h), str(c)) for i, w, h, c in d.get("images", ()))
        then = tuple(Launch(str(n), _ints(g), _ints(loc)) for n, g, loc in d.get("then", ()))
        return cls(str(d["name"]), str(d["source"]), sizes[0], sizes[1], params, images, then)
