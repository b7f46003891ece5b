"""Optimized loop kernels, cached: the loop passes (loop/passes.py: simplify, vectorize, unroll,
partition, then the bounds check) are about half of a compile's time, and the same kernel comes
back often: the repeated blocks of one model (ResNet-50's bottlenecks, a transformer's layers),
a second compile of a model, the formats of one TensorFlow model. Kept in this process and on
disk under `config.cache_dir()/loops/`, as the kernel objects are (compiler_link.py).

The key is the unoptimized kernel itself: its dataclass repr (every field of every node, the
kernel's name left out so that identical kernels of one model share an entry) hashed with the
source of the tensorir package, so that any change to the code starts a new cache."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import pickle
from pathlib import Path

from tensorir import config
from tensorir.loop.ir import LoopFunc

_MEMO: dict[str, LoopFunc] = {}
_MEMO_MAX = 512  # kernels kept in memory (the oldest go first; about 100 KB each unrolled)


@functools.cache
def _source_hash() -> str:
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def kernel_key(func: LoopFunc) -> str:
    text = repr(dataclasses.replace(func, name=""))
    return hashlib.sha256(f"{_source_hash()}\n{text}".encode()).hexdigest()[:32]


def optimized(func: LoopFunc) -> LoopFunc:
    """`optimize_loops(func)`, from the cache when the same kernel was optimized before."""
    from tensorir.loop.passes import optimize_loops

    key = kernel_key(func)
    out = _MEMO.get(key)
    if out is None:
        out = _load(key)
    if out is None:
        out = dataclasses.replace(optimize_loops(func), name="")
        _store(key, out)
    _MEMO[key] = out
    if len(_MEMO) > _MEMO_MAX:
        del _MEMO[next(iter(_MEMO))]
    return dataclasses.replace(out, name=func.name, attrs=dict(out.attrs))  # attrs: a mutable dict


def _path(key: str) -> Path:
    return config.cache_dir() / "loops" / f"{key}.pkl"


def _load(key: str) -> LoopFunc | None:
    try:
        out = pickle.loads(_path(key).read_bytes())
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError):
        return None  # absent, or unreadable: optimized again and rewritten
    return out if isinstance(out, LoopFunc) else None


def _store(key: str, func: LoopFunc) -> None:
    with contextlib.suppress(OSError):  # a read-only or full cache folder costs time only
        config.write_cache_file(_path(key), pickle.dumps(func, protocol=pickle.HIGHEST_PROTOCOL))
