"""The weights blob of one build: the constants the kernels read, each placed once per key
and 64-byte aligned, in placing order.

    blob = WeightBlob()
    offset = blob.place(key, lambda: array)     # once per key; the bytes come at first place
    blob.chunk_at(offset)                       # index of the chunk holding that byte
    remap, tail = blob.move_to_end([3, 7])      # chunks 3 and 7 laid out last, from byte `tail`
    blob.blob()                                 # the bytes, as libmodel.so / weights.bin hold them

`move_to_end` is how a CPU build puts the weights only tir_create's prepare calls read after
all others, so that their pages can go back to the system (compiler_prepare.sources_last).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from tensorir.passes.memory_plan import ALIGN


class WeightBlob:
    """Constants the kernels read, packed into one 64-byte aligned blob."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []  # in layout order, each padded to ALIGN
        self.starts: list[int] = []  # each chunk's first byte
        self.size = 0
        self.offsets: dict[Hashable, int] = {}

    def place(self, key: Hashable, make: Callable[[], np.ndarray]) -> int:
        """The byte offset of `key`'s constant, made by `make()` and appended the first time."""
        if key not in self.offsets:
            data = np.ascontiguousarray(make()).tobytes()
            self.offsets[key] = self.size
            pad = (-len(data)) % ALIGN
            self.starts.append(self.size)
            self.chunks.append(data + b"\0" * pad)
            self.size += len(data) + pad
        return self.offsets[key]

    def blob(self) -> bytes:
        return b"".join(self.chunks)

    def chunk_at(self, offset: int) -> int:
        """Index of the chunk that holds byte `offset` (an offset inside a constant included);
        an empty constant's offset gives the last chunk that starts there."""
        i = bisect.bisect_right(self.starts, offset) - 1
        if i < 0 or offset >= self.starts[i] + max(len(self.chunks[i]), 1):
            raise ValueError(f"weight offset {offset} outside the blob of {self.size} bytes")
        return i

    def move_to_end(self, tail: Sequence[int]) -> tuple[Callable[[int], int], int]:
        """Lay out the chunks `tail` (indices, in that order) after all the others, which keep
        their order: (old offset -> new offset, the tail's first byte)."""
        starts = self.starts
        moving = set(tail)
        if len(moving) != len(tail) or not moving <= set(range(len(starts))):
            raise ValueError(f"move_to_end: {list(tail)} are not distinct chunks of {len(starts)}")
        order = [i for i in range(len(starts)) if i not in moving] + list(tail)
        new_start, at = {}, 0
        for i in order:
            new_start[i], at = at, at + len(self.chunks[i])

        def remap(offset: int) -> int:
            i = bisect.bisect_right(starts, offset) - 1
            return new_start[i] + offset - starts[i]

        self.offsets = {k: remap(off) for k, off in self.offsets.items()}
        self.chunks = [self.chunks[i] for i in order]
        self.starts = [new_start[i] for i in order]
        return remap, new_start[tail[0]] if tail else self.size
