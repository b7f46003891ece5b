"""Traces: JSON round-trip, replay to identical IR, as_python, malformed traces."""

import json

import pytest

from tensorir.loop.printer import to_text
from tensorir.schedule import Trace, TraceError, create_schedule, lower, verify_trace_roundtrip
from tensorir.schedule.trace import Instruction
from tests.schedule.workloads import conv2d, matmul


def blocked_matmul():
    A, B, C = matmul(8, 4, 8)
    s = create_schedule([C])
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 2, 4)
    s[CC].compute_at(s[C], jo)
    k = s[CC].op.reduce_axis[0]
    s[CC].reorder(k, *s[CC].op.axis)
    s[CC].vectorize(s[CC].op.axis[1])
    s[C].parallel(io)
    f = s[C].fuse(ii, ji)
    s[C].unroll(f)
    return (A, B, C), s


def test_every_primitive_is_recorded_once():
    _, s = blocked_matmul()
    kinds = [i.kind for i in s.trace]
    assert kinds == [
        "cache_write",
        "tile",
        "compute_at",
        "reorder",
        "vectorize",
        "parallel",
        "fuse",
        "unroll",
    ]
    assert s.trace.instructions[1] == Instruction(
        "tile", "C", ({"axis": ["C", "i"]}, {"axis": ["C", "j"]}, 2, 4), {}, ("i_o", "j_o", "i_i", "j_i")
    )


def test_json_round_trip_and_replay_give_identical_ir():
    args, s = blocked_matmul()
    text = s.trace.to_json()
    assert json.loads(text)["version"] == 1
    back = Trace.from_json(text)
    assert back == s.trace and back.to_json() == text
    s2 = back.apply(create_schedule([args[2]]))
    assert to_text(lower(s2, list(args))) == to_text(lower(s, list(args)))
    assert s2.trace == s.trace
    verify_trace_roundtrip(s, list(args))


def test_pack_and_inline_replay():
    X, W, P, Y = conv2d(ci=4, co=4)
    s = create_schedule([Y])
    s[P].compute_inline()
    Wp = s.pack(W, 1, 2)
    s[Wp].compute_at(s[Y], s[Y].op.axis[1])
    s[Y].split(s[Y].op.reduce_axis[0], nparts=2)
    verify_trace_roundtrip(s, [X, W, Y])


def test_as_python_is_executable():
    args, s = blocked_matmul()
    code = s.trace.as_python()
    s2 = create_schedule([args[2]])
    exec(code, {"s": s2})
    assert to_text(lower(s2, list(args))) == to_text(lower(s, list(args)))


def test_replay_that_diverges_fails_clearly():
    _A, _B, C = matmul(8, 4, 8)
    bad = Trace([Instruction("split", "C", ({"axis": ["C", "i"]},), {"factor": 2}, ("x", "y"))])
    with pytest.raises(
        TraceError, match=r"replaying split gave \['i_o', 'i_i'\], the trace has \['x', 'y'\]"
    ):
        bad.apply(create_schedule([C]))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ('{"version": 99, "instructions": []}', "unsupported trace"),
        ('{"version": 1, "instructions": [{"kind": "split"}]}', "malformed trace instruction"),
    ],
)
def test_malformed_json(text, message):
    with pytest.raises(TraceError, match=message):
        Trace.from_json(text)


def test_unknown_primitive_and_reference():
    _A, _B, C = matmul(2, 2, 2)
    s = create_schedule([C])
    with pytest.raises(TraceError, match="unknown schedule primitive 'explode'"):
        Trace([Instruction("explode", "C", ())]).apply(s)
    with pytest.raises(TraceError, match="unknown trace reference"):
        Trace([Instruction("unroll", "C", ({"what": 1},))]).apply(s)
