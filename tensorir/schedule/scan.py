"""Lowering a scan: the schedule of one step, run `extent` times in a serial loop.

    t = Var("time")
    h_prev = placeholder((B, H), name="state")           # an argument: the state buffer
    h_new = compute((B, H), lambda b, j: f(h_prev[b, :], x[t, b, j]), name="h_new")
    y_t = compute((B, H), lambda b, j: h_new[b, j], name="y_t")
    s = create_schedule([h_new, y_t]); ...schedule the step...
    lower_scan(s, [x, Y, state], {h_new: (state, lambda b, j: (b, j)),
                                  y_t: (Y, lambda b, j: (t, b, j))}, (t, T), "rnn")

gives

    for time in range(0, T):
      <h_new's nest, storing into state>        (reads of h_new read state)
      <y_t's nest, storing into Y[time, b, j]>

The step's computes may use the loop variable anywhere (indices, conditions). `place` puts a
root stage's tensor into an argument's buffer at coordinates computed from its own (any index
expressions, data-dependent ones included) instead of a buffer of its own: a state updated in
place (the stages read the old value, then the stage placed there overwrites it, so every
stage reading the old state at other elements must come before it in stage order), or a
per-step output scattered into a sequence. Stages not placed and not arguments get scratch
buffers as in `lower`, reused by every step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tensorir.loop.ir import Const, ExprLike, For, ForKind, LoopFunc, Stmt, Var
from tensorir.schedule.lower import _Lowerer, _Realized, finish
from tensorir.schedule.schedule import Schedule, ScheduleError
from tensorir.schedule.te import Tensor

Placement = tuple[Tensor, Callable[..., Sequence[ExprLike]]]


class _ScanLowerer(_Lowerer):
    def __init__(self, sched: Schedule, args: Sequence[Tensor], place: Mapping[Tensor, Placement]) -> None:
        self.place = {id(t): (t, arg, fn) for t, (arg, fn) in place.items()}
        super().__init__(sched, args)
        for t, arg, _ in self.place.values():
            st = sched.stage_of(t)
            if st is None or st.attach != ("root",):
                raise ScheduleError(f"lower_scan: {t.name} is placed, so it must be a stage at root")
            if not super()._is_arg(arg):
                raise ScheduleError(f"lower_scan: {t.name} is placed into {arg.name}, which is no argument")

    def _is_arg(self, t: Tensor) -> bool:
        return super()._is_arg(t) or id(t) in self.place

    def _unread_ok(self, t: object) -> bool:  # a sequence output only placed into
        return super()._unread_ok(t) or any(arg is t for _, arg, _ in self.place.values())

    def run(self) -> Stmt:
        for t, arg, fn in self.place.values():
            buf = next(b for a, b in zip(self.args, self.params, strict=True) if a is arg)
            self.realized[id(t)] = _Realized(buf, (), fn)
        return super().run()


def lower_scan(
    sched: Schedule,
    args: Sequence[Tensor],
    place: Mapping[Tensor, Placement],
    loop: tuple[Var, int],
    name: str = "scan",
    *,
    passes: bool = True,
) -> LoopFunc:
    """The loop function running `sched` once per value of `loop`'s variable (0 .. extent-1,
    serial), with the stages in `place` stored into their arguments' buffers (module
    docstring). `args` are the parameters, as in `lower`."""
    var, extent = loop
    lw = _ScanLowerer(sched, args, place)
    body = For(var, Const(0), Const(int(extent)), ForKind.SERIAL, lw.run())
    return finish(lw, body, name, passes)
