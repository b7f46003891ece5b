"""Stage logging shared by every part of the pipeline.

    with stage("import onnx") as st:
        g = ...
        st.result = g          # printed at TIR_DEBUG=2, written to TIR_DUMP_DIR
        st.result = Text(to_text, funcs)   # or text made only when it is printed

TIR_DEBUG=1 prints each stage's name and time to stderr; TIR_DEBUG=2 also prints the
IR the stage produced; TIR_DUMP_DIR=dir writes it to dir/NN_<stage>.txt.
A pass that did nothing sets `st.changed = False`: its line then ends in "(unchanged)"
and its (repeated) IR is not printed.
"""

from __future__ import annotations

import itertools
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tensorir import config

_counter = itertools.count()


class Text:
    """A stage's text made only when it is printed or dumped: `Text(fn, *args)` is
    `fn(*args)` at str(). Printing every kernel of a model takes a second or more, and a
    compile without TIR_DEBUG / TIR_DUMP_DIR never needs it."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self.fn, self.args = fn, args

    def __str__(self) -> str:
        return str(self.fn(*self.args))


class StageRecord:
    def __init__(self, name: str) -> None:
        self.name = name
        self.result: Any = None
        self.seconds = 0.0
        self.changed: bool | None = None  # False: a pass that left the IR as it was


@contextmanager
def stage(name: str) -> Iterator[StageRecord]:
    rec = StageRecord(name)
    start = time.perf_counter()
    yield rec
    rec.seconds = time.perf_counter() - start
    level = config.debug_level()
    unchanged = rec.changed is False
    if level >= 1:
        note = " (unchanged)" if unchanged else ""
        print(f"[tir] {name}: {rec.seconds * 1e3:.1f} ms{note}", file=sys.stderr)
    if rec.result is None:
        return
    if level >= 2 and not unchanged:
        print(str(rec.result), file=sys.stderr)
    dump = config.dump_dir()
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
        (dump / f"{next(_counter):02d}_{slug}.txt").write_text(str(rec.result) + "\n")


def log(level: int, message: str) -> None:
    """Print `message` to stderr when TIR_DEBUG >= level."""
    if config.debug_level() >= level:
        print(f"[tir] {message}", file=sys.stderr)
