"""Traces: the list of schedule primitives applied, serializable and replayable.

Every primitive call on a `Schedule` / `Stage` appends one `Instruction` (kind, stage,
arguments, names of the results). Axes, stages and tensors are referenced by name
(`{"axis": ["C", "i_o"]}`, `{"stage": "C"}`, `{"tensor": "A"}`), and new axes and tensors get
deterministic names, so replaying a trace on a fresh schedule of the same computation
rebuilds the same loops:

    s = create_schedule([C]); io, ii = s[C].split(C.op.axis[0], factor=4)
    text = s.trace.to_json()
    s2 = Trace.from_json(text).apply(create_schedule([C]))    # lower(s2) == lower(s)
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tensorir.errors import TirError

if TYPE_CHECKING:
    from tensorir.loop.ir import LoopFunc
    from tensorir.schedule.schedule import Schedule
    from tensorir.schedule.te import Tensor

TRACE_VERSION = 1


class TraceError(TirError):
    """A trace that cannot be read or does not replay on the given schedule."""


@dataclass(frozen=True)
class Instruction:
    kind: str  # the primitive's method name
    stage: str | None  # None for schedule-level primitives (cache_write, pack)
    args: tuple[Any, ...]  # JSON values; axes/stages/tensors as {"axis": [stage, name]} ...
    kwargs: dict[str, Any] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()  # names of the axes / tensors it returned

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "stage": self.stage,
            "args": list(self.args),
            "kwargs": self.kwargs,
            "outputs": list(self.outputs),
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Instruction:
        try:
            return Instruction(
                d["kind"], d["stage"], tuple(d["args"]), dict(d.get("kwargs", {})), tuple(d["outputs"])
            )
        except (KeyError, TypeError) as e:
            raise TraceError(f"malformed trace instruction {d!r}") from e


# ---- encoding of arguments ----------------------------------------------------------
def encode(value: Any, sched: Schedule) -> Any:
    from tensorir.schedule.schedule import Stage
    from tensorir.schedule.te import IterVar, Tensor

    if isinstance(value, IterVar):
        return {"axis": [sched.axis_owner(value).name, value.name]}
    if isinstance(value, Stage):
        return {"stage": value.name}
    if isinstance(value, Tensor):
        return {"tensor": value.name}
    if isinstance(value, list | tuple):
        return [encode(v, sched) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, numbers.Integral):  # numpy integers
        return int(value)
    raise TraceError(f"cannot record argument {value!r} in a trace")


def decode(value: Any, sched: Schedule) -> Any:
    if isinstance(value, dict):
        if "axis" in value:
            stage, name = value["axis"]
            return sched[stage].get_axis(name)
        if "stage" in value:
            return sched[value["stage"]]
        if "tensor" in value:
            return sched.tensor(value["tensor"])
        raise TraceError(f"unknown trace reference {value!r}")
    if isinstance(value, list):
        return [decode(v, sched) for v in value]
    return value


def output_names(result: Any) -> tuple[str, ...]:
    if result is None:
        return ()
    items = result if isinstance(result, tuple) else (result,)
    return tuple(x.name for x in items)


def _py(value: Any) -> str:
    if isinstance(value, dict):
        if "axis" in value:
            return f's["{value["axis"][0]}"].get_axis("{value["axis"][1]}")'
        if "stage" in value:
            return f's["{value["stage"]}"]'
        return f's.tensor("{value["tensor"]}")'
    if isinstance(value, list):
        return "[" + ", ".join(_py(v) for v in value) + "]"
    return repr(value)


class Trace:
    """An ordered list of instructions."""

    def __init__(self, instructions: Sequence[Instruction] = ()) -> None:
        self.instructions: list[Instruction] = list(instructions)

    def __len__(self) -> int:
        return len(self.instructions)

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trace) and self.instructions == other.instructions

    __hash__ = None  # type: ignore[assignment]

    def record(
        self,
        kind: str,
        stage: str | None,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        result: Any,
        sched: Schedule,
    ) -> None:
        enc_args = tuple(encode(a, sched) for a in args)
        enc_kwargs = {k: encode(v, sched) for k, v in kwargs.items()}
        self.instructions.append(Instruction(kind, stage, enc_args, enc_kwargs, output_names(result)))

    def to_json(self) -> str:
        body = {"version": TRACE_VERSION, "instructions": [i.to_dict() for i in self.instructions]}
        return json.dumps(body, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Trace:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TraceError(f"trace is not valid JSON: {e}") from e
        if not isinstance(data, dict) or data.get("version") != TRACE_VERSION:
            raise TraceError(f"unsupported trace (expected version {TRACE_VERSION})")
        return Trace([Instruction.from_dict(d) for d in data["instructions"]])

    def as_python(self) -> str:
        """The trace as Python statements on a schedule named `s`."""
        lines = []
        for ins in self.instructions:
            target = "s" if ins.stage is None else f's["{ins.stage}"]'
            args = [_py(a) for a in ins.args] + [f"{k}={_py(v)}" for k, v in ins.kwargs.items()]
            call = f"{target}.{ins.kind}({', '.join(args)})"
            lhs = ", ".join(ins.outputs)
            if len(ins.outputs) == 1 and ins.kind in ("split", "tile"):
                lhs += ","
            lines.append(f"{lhs} = {call}" if ins.outputs else call)
        return "\n".join(lines)

    def apply(self, sched: Schedule) -> Schedule:
        """Replay every instruction on `sched` (a fresh schedule of the same computation)."""
        for ins in self.instructions:
            target: Any = sched if ins.stage is None else sched[ins.stage]
            method = getattr(target, ins.kind, None)
            if method is None or not getattr(method, "traced", False):
                raise TraceError(f"unknown schedule primitive {ins.kind!r}")
            args = [decode(a, sched) for a in ins.args]
            kwargs = {k: decode(v, sched) for k, v in ins.kwargs.items()}
            got = output_names(method(*args, **kwargs))
            if got != ins.outputs:
                raise TraceError(f"replaying {ins.kind} gave {list(got)}, the trace has {list(ins.outputs)}")
        return sched


def verify_trace_roundtrip(sched: Schedule, args: Sequence[Tensor], name: str = "main") -> LoopFunc:
    """Replay `sched.trace` (through JSON) on a fresh schedule; both must lower to the same IR.
    Returns the lowered function."""
    from tensorir.loop.printer import to_text
    from tensorir.schedule.lower import lower
    from tensorir.schedule.schedule import create_schedule

    trace = Trace.from_json(sched.trace.to_json())
    replayed = trace.apply(create_schedule(sched.outputs))
    if replayed.trace != sched.trace:
        raise TraceError("replayed schedule recorded a different trace")
    f1, f2 = lower(sched, args, name), lower(replayed, args, name)
    if to_text(f1) != to_text(f2) or f1 != f2:
        raise TraceError(f"replayed trace lowers differently:\n{to_text(f1)}\n---\n{to_text(f2)}")
    return f1
