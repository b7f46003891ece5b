"""The kernel of `recurrence` (ops/rnn.py): one time step as tensor expressions, lowered once
inside a serial loop over time (schedule/scan.py); the states live in the Y_h / Y_c output
buffers, updated in place. Per step (`time` the loop variable; d direction, b batch entry,
j hidden unit, n gate row):

    hp[d, b, k]    = (masked) h0 at time 0, else Y_h[d, b, k]        read where it is used
    acc[d, b, n]   = sum_k hp[d, b, k] * rt[d, k, n]                 a register tile (local)
    gates[d, b, n] = acc[d, b, n]                                    scratch, reused every step
    LSTM: c_new = f * cp + i * g -> Y_c;  h_new = o * h(c_new) -> Y_h
    GRU:  h_new = (1 - z) * hh + z * hp -> Y_h (linear_before_reset 0: hh's product reads a
          `reset` stage r * hp, a second matrix-vector product)
    RNN:  h_new = f(gates + x) -> Y_h
    y[d, b, j] = h_new, or 0 past the sequence's length -> Y[pos(d, b), d, b, j]

x is the step's row of xproj (the projection GEMM's output, at time index tt(d, b): `time`
forward, the sequence's last step minus `time` in reverse); every stage that reads the old
state at other elements (the products) runs before the stage that overwrites it. The products
are dense's register tile (rows = batch entries, vectors across gate rows), their column
blocks in parallel when a step has enough work; the gate math is vectorized across j.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tensorir.graph.types import TensorType
from tensorir.loop.ir import Expr, LoopFunc, Var
from tensorir.ops.kernel import argument
from tensorir.ops.nn_compute import acc_type, const, load, pick_block, pick_rows, schedule_copy
from tensorir.ops.registry import NoScheduleError, get_op, register_kernel
from tensorir.ops.rnn import Act, input_names
from tensorir.schedule.scan import lower_scan
from tensorir.schedule.schedule import Schedule, Stage, create_schedule
from tensorir.schedule.te import (
    Tensor,
    call,
    cast,
    compute,
    max_,
    min_,
    placeholder,
    reduce_axis,
    select,
    sum_,
)
from tensorir.target import Target

STEP_PARALLEL_WORK = 1 << 18  # multiply-adds of one step's product worth a parallel launch
MAX_TILE_VECTORS = 8  # vectors across gate rows in one register tile


def te_activation(act: Act, x: Expr, dt: str) -> Expr:
    """ONNX's recurrent activation `act` = (name, alpha, beta) on x (see ops/rnn.py)."""
    name, alpha, beta = act
    a, b, zero, one = const(alpha, dt), const(beta, dt), const(0, dt), const(1, dt)
    table: dict[str, Callable[[], Expr]] = {
        "Relu": lambda: max_(x, zero),
        "Tanh": lambda: call("tanh", x),
        "Sigmoid": lambda: call("sigmoid", x),
        "Affine": lambda: x * a + b,
        "LeakyRelu": lambda: select(x >= zero, x, x * a),
        "ThresholdedRelu": lambda: select(x >= a, x, zero),
        "ScaledTanh": lambda: a * call("tanh", x * b),
        "HardSigmoid": lambda: min_(max_(x * a + b, zero), one),
        "Elu": lambda: select(x >= zero, x, a * (call("exp", min_(x, zero)) - one)),
        "Softsign": lambda: x / (one + call("abs", x)),
        "Softplus": lambda: max_(x, zero) + call("log", one + call("exp", zero - call("abs", x))),
    }
    return table[name]()


class _Step:
    """The tensor expressions of one step, built from the kernel's arguments."""

    def __init__(self, ins: Sequence[Tensor], outs: Sequence[Tensor], attrs: dict[str, Any]) -> None:
        self.a = attrs
        self.cell, self.layout = attrs["cell"], attrs["layout"]
        self.arg = dict(zip(input_names(attrs), ins, strict=True))  # tensors by name
        self.arg |= dict(zip(("Y", "Y_h", "Y_c"), outs, strict=False))
        xp, rt = self.arg["xp"], self.arg["rt"]
        self.seq, self.batch = (xp.shape[1], xp.shape[0]) if self.layout else xp.shape[:2]
        self.dirs, self.hidden = rt.shape[0], rt.shape[1]
        self.dt = acc_type(xp.dtype)
        self.time = Var("time")

    # ---- indexing: layouts, directions, sequence lengths --------------------------------
    def sidx(self, d: Expr, b: Expr, j: Expr) -> tuple[Expr, ...]:
        return (b, d, j) if self.layout else (d, b, j)

    def length(self, b: Expr) -> Expr:
        return min_(max_(cast(self.arg["lens"][b], "int64"), 0), self.seq)

    def valid(self, b: Expr) -> Expr | None:
        return self.time < self.length(b) if self.a["lens"] else None

    def tt(self, d: Expr, b: Expr) -> Expr:
        """The time index step `time` reads and writes for direction d, batch entry b."""
        last = self.length(b) - 1 if self.a["lens"] else self.seq - 1
        back = max_(last - self.time, 0) if self.a["lens"] else last - self.time
        dirs = self.a["directions"]
        if len(dirs) == 2:
            return select(d.eq(1), back, self.time)
        return back if dirs[0] == "reverse" else self.time

    def yidx(self, d: Expr, b: Expr, j: Expr) -> tuple[Expr, ...]:
        ok = self.valid(b)
        pos = self.tt(d, b) if ok is None else select(ok, self.tt(d, b), self.time)
        return (b, pos, d, j) if self.layout else (pos, d, b, j)

    def x(self, d: Expr, b: Expr, n: Expr) -> Expr:
        tt = self.tt(d, b)
        return load(self.arg["xp"], (b, tt, d, n) if self.layout else (tt, b, d, n), self.dt)

    def prev(self, state: str, d: Expr, b: Expr, j: Expr) -> Expr:
        """The state before this step: the initial one (zero for an empty sequence) at time 0."""
        init = load(self.arg["h0" if state == "h" else "c0"], self.sidx(d, b, j), self.dt)
        if self.a["lens"]:
            init = select(self.length(b) > 0, init, const(0, self.dt))
        now = load(self.arg["Y_h" if state == "h" else "Y_c"], self.sidx(d, b, j), self.dt)
        return select(self.time.eq(0), init, now)

    def keep(self, b: Expr, new: Expr, old: Expr) -> Expr:
        ok = self.valid(b)
        return new if ok is None else select(ok, new, old)

    # ---- gate math ------------------------------------------------------------------------
    def act(self, k: int, d: Expr, x: Expr) -> Expr:
        fwd, *rest = (acts[k] for acts in self.a["acts"])
        out = te_activation(fwd, x, self.dt)
        if rest and rest[0] != fwd:
            out = select(d.eq(1), te_activation(rest[0], x, self.dt), out)
        return out

    def clip(self, x: Expr) -> Expr:
        c = self.a["clip"]
        return x if c is None else min_(max_(x, const(-c, self.dt)), const(c, self.dt))

    def matvec(self, h: Callable[[Expr, Expr, Expr], Expr], lo: int, width: int, name: str) -> Tensor:
        """gates[d, b, n] = sum_k h(d, b, k) * rt[d, k, lo + n] (an acc tile, then scratch)."""
        rt = self.arg["rt"]
        k = reduce_axis(self.hidden, "k")
        acc = compute(
            (self.dirs, self.batch, width),
            lambda d, b, n: sum_(h(d, b, k) * load(rt, self.rt_index(d, k, lo + n), self.dt), axis=k),
            name=f"{name}_acc",
        )
        return compute(acc.shape, lambda d, b, n: acc[d, b, n], name=name)

    def rt_index(self, d: Expr, k: Expr, n: Expr) -> tuple[Expr, ...]:
        """rt's element (d, k, n), in rt_block's gate blocks where it has them (rnn.block_rt)."""
        width = self.a.get("rt_block", 0)
        if not width:
            return (d, k, n)
        gh = self.arg["rt"].shape[2]
        flat = (n // width) * (self.hidden * width) + k * width + n % width
        return (d, flat // gh, flat % gh)

    def hp(self, d: Expr, b: Expr, k: Expr) -> Expr:
        return self.prev("h", d, b, k)

    def state(self, body: Callable[[Expr, Expr, Expr], Expr], name: str) -> Tensor:
        return compute((self.dirs, self.batch, self.hidden), body, name=name)

    def lstm(self) -> dict[str, Tensor]:
        hid, peep = self.hidden, self.a.get("peepholes")
        gates = self.matvec(self.hp, 0, 4 * hid, "gates")

        def pre(g: int, d: Expr, b: Expr, j: Expr) -> Expr:  # gate g: 0 i, 1 o, 2 f, 3 c
            return gates[d, b, g * hid + j] + self.x(d, b, g * hid + j)

        def pp(g: int, d: Expr, j: Expr, c: Expr) -> Expr:  # + P[g] * c (P: i, o, f)
            return c * load(self.arg["p"], (d, g * hid + j), self.dt) if peep else const(0, self.dt)

        def c_body(d: Expr, b: Expr, j: Expr) -> Expr:
            cp = self.prev("c", d, b, j)
            i = self.act(0, d, self.clip(pre(0, d, b, j) + pp(0, d, j, cp)))
            if self.a["input_forget"]:
                f = const(1, self.dt) - i
            else:
                f = self.act(0, d, self.clip(pre(2, d, b, j) + pp(2, d, j, cp)))
            return self.keep(b, f * cp + i * self.act(1, d, self.clip(pre(3, d, b, j))), cp)

        c_new = self.state(c_body, "c_new")

        def h_body(d: Expr, b: Expr, j: Expr) -> Expr:
            c = c_new[d, b, j]
            o = self.act(0, d, self.clip(pre(1, d, b, j) + pp(1, d, j, c)))
            return self.keep(b, o * self.act(2, d, c), self.hp(d, b, j))

        return {"h": self.state(h_body, "h_new"), "c": c_new}

    def gru(self) -> dict[str, Tensor]:
        hid, lbr = self.hidden, self.a["linear_before_reset"]
        gates = self.matvec(self.hp, 0, (3 if lbr else 2) * hid, "gates")

        def gate(g: int, d: Expr, b: Expr, j: Expr) -> Expr:  # z (0) or r (1)
            return self.act(0, d, self.clip(gates[d, b, g * hid + j] + self.x(d, b, g * hid + j)))

        if lbr:
            rbh = self.arg.get("rbh")

            def hh(d: Expr, b: Expr, j: Expr) -> Expr:
                rec = gates[d, b, 2 * hid + j]
                rec = rec if rbh is None else rec + load(rbh, (d, j), self.dt)
                return self.x(d, b, 2 * hid + j) + gate(1, d, b, j) * rec

        else:
            reset = self.state(lambda d, b, k: gate(1, d, b, k) * self.hp(d, b, k), "reset")
            hg = self.matvec(lambda d, b, k: reset[d, b, k], 2 * hid, hid, "gates_h")

            def hh(d: Expr, b: Expr, j: Expr) -> Expr:
                return self.x(d, b, 2 * hid + j) + hg[d, b, j]

        def h_body(d: Expr, b: Expr, j: Expr) -> Expr:
            z, hp = gate(0, d, b, j), self.hp(d, b, j)
            new = (const(1, self.dt) - z) * self.act(1, d, self.clip(hh(d, b, j))) + z * hp
            return self.keep(b, new, hp)

        return {"h": self.state(h_body, "h_new")}

    def rnn(self) -> dict[str, Tensor]:
        gates = self.matvec(self.hp, 0, self.hidden, "gates")

        def h_body(d: Expr, b: Expr, j: Expr) -> Expr:
            new = self.act(0, d, self.clip(gates[d, b, j] + self.x(d, b, j)))
            return self.keep(b, new, self.hp(d, b, j))

        return {"h": self.state(h_body, "h_new")}

    def output(self, h_new: Tensor) -> Tensor:
        def body(d: Expr, b: Expr, j: Expr) -> Expr:
            return self.keep(b, h_new[d, b, j], const(0, self.dt))

        return self.state(body, "y")


# ---- schedule ---------------------------------------------------------------------------
def schedule_matvec(acc: Stage, gates: Stage, target: Target) -> None:
    """dense's register tile: for each (direction, block of gate rows) -- the parallel loop
    when a step has STEP_PARALLEL_WORK -- the batch rows x block accumulators in registers
    over k, then written out to `gates`."""
    d, b, n = gates.op.axis
    lanes = target.vector_lanes(acc.tensor.dtype)
    v, u = pick_block(n.extent, lanes, MAX_TILE_VECTORS)
    mr = pick_rows(b.extent, max(1, min(8, (target.num_vector_registers - u - 1) // u)))
    no, ni = gates.split(n, factor=v * u)
    nu, nv = gates.split(ni, factor=v)
    gates.reorder(d, no, b, nu, nv)
    outer = gates.fuse(d, no)
    gates.vectorize(nv)
    work = d.extent * b.extent * n.extent * acc.op.reduce_axis[0].extent
    if outer.extent > 1 and work >= STEP_PARALLEL_WORK:
        gates.parallel(outer)
    acc.compute_at(gates, outer)
    ad, ab, an = acc.op.axis
    (k,) = acc.op.reduce_axis
    bo, bi = acc.split(ab, factor=mr)
    au, av = acc.split(an, factor=v)
    acc.reorder(ad, bo, k, bi, au, av)
    acc.unroll(bi)
    acc.unroll(au)
    acc.vectorize(av)


def rt_block_width(in_types: Sequence[TensorType], attrs: Mapping[str, Any], target: Target) -> int:
    """The gate columns per parallel iteration of the step product (schedule_matvec's block),
    where rt can be read in such blocks: one product over all of rt's columns (LSTM, RNN, GRU
    with linear_before_reset) in more than one block; else 0."""
    xp, rt = in_types[:2]
    gh = rt.shape[2]
    single = attrs["cell"] != "gru" or attrs.get("linear_before_reset", 0)
    v, u = pick_block(gh, target.vector_lanes(acc_type(xp.dtype)), MAX_TILE_VECTORS)
    return v * u if single and v * u < gh else 0


def schedule_step(s: Schedule, target: Target) -> None:
    """Each product (`<name>_acc` and its `<name>`) as a register tile; the rest (the state
    updates, `reset`, `y`) elementwise, vectorized across hidden units."""
    done: set[str] = set()
    for st in s.stages:
        if st.name.endswith("_acc"):
            gates = s[st.name.removesuffix("_acc")]
            schedule_matvec(st, gates, target)
            done |= {st.name, gates.name}
    for st in s.stages:
        if st.name not in done:
            schedule_copy(st, target)


@register_kernel("recurrence")
def recurrence_kernel(
    in_types: list[TensorType], attrs: dict[str, Any], target: Target, name: str, passes: bool = True
) -> LoopFunc:
    """The recurrence's loop function: parameters the op's inputs, Y, Y_h (, Y_c), then the
    scratch of the gate stages."""
    if target.kind != "llvm":
        raise NoScheduleError("recurrence has no GPU schedule")
    attrs = dict(attrs)
    ins = [argument(t, f"in{i}") for i, t in enumerate(in_types)]
    out_types = get_op("recurrence").infer(in_types, attrs)
    outs = [placeholder(t.shape, t.dtype, n) for t, n in zip(out_types, ("Y", "Y_h", "Y_c"), strict=False)]
    step = _Step(ins, outs, attrs)
    new = getattr(step, step.cell)()
    y = step.output(new["h"])
    s = create_schedule([*new.values(), y])
    schedule_step(s, target)
    place = {new["h"]: (outs[1], step.sidx), y: (outs[0], step.yidx)}
    if "c" in new:
        place[new["c"]] = (outs[2], step.sidx)
    return lower_scan(s, [*ins, *outs], place, (step.time, step.seq), name, passes=passes)
