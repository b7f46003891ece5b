"""cache_write (register blocking) and pack (layout): before/after IR, numerics, trace
round-trip, errors."""

import pytest

from tensorir.schedule import ScheduleError, compute, create_schedule, placeholder
from tests.schedule.workloads import body, check, conv2d, conv2d_ref, matmul


def test_cache_write_alone():
    A, B, C = matmul(4, 3, 4)
    s = create_schedule([C])
    CC = s.cache_write(C, "local")
    assert CC.name == "C_local" and s[C].op.reduce_axis == () and len(s[CC].op.reduce_axis) == 1
    assert body(check(s, [A, B], [C], lambda a, b: a @ b)) == (
        'C_local = allocate(f32[4,4], "local")\n'
        "for i in range(0, 4):\n"
        "  for j in range(0, 4):\n"
        "    C_local[i*4 + j] = 0.0\n"
        "    for k in range(0, 3):\n"
        "      C_local[i*4 + j] = C_local[i*4 + j] + A[i*3 + k]*B[k*4 + j]\n"
        "for i in range(0, 4):\n"
        "  for j in range(0, 4):\n"
        "    C[i*4 + j] = C_local[i*4 + j]"
    )


def test_register_blocked_matmul():
    A, B, C = matmul(8, 4, 8)
    s = create_schedule([C])
    CC = s.cache_write(C, "local")
    io, jo, _, ji = s[C].tile(*s[C].op.axis, 2, 4)
    s[CC].compute_at(s[C], jo)
    xi, yi = s[CC].op.axis
    (k,) = s[CC].op.reduce_axis
    s[CC].reorder(k, xi, yi)
    s[CC].unroll(xi)
    s[CC].vectorize(yi)
    s[C].vectorize(ji)
    s[C].parallel(io)
    assert body(check(s, [A, B], [C], lambda a, b: a @ b)) == (
        "for i_o in parallel(0, 4):\n"
        "  for j_o in range(0, 2):\n"
        '    C_local = allocate(f32[2,4], "local")\n'
        "    C_local[ramp(0, 1, 4)] = broadcast(0.0, 4)\n"
        "    C_local[ramp(4, 1, 4)] = broadcast(0.0, 4)\n"
        "    for k in range(0, 4):\n"
        "      C_local[ramp(0, 1, 4)] = C_local[ramp(0, 1, 4)]"
        " + broadcast(A[i_o*8 + k], 4)*B[ramp(k*8 + j_o*4, 1, 4)]\n"
        "      C_local[ramp(4, 1, 4)] = C_local[ramp(4, 1, 4)]"
        " + broadcast(A[i_o*8 + k + 4], 4)*B[ramp(k*8 + j_o*4, 1, 4)]\n"
        "    for i_i in range(0, 2):\n"
        "      C[ramp(i_o*16 + i_i*8 + j_o*4, 1, 4)] = C_local[ramp(i_i*4, 1, 4)]"
    )
    assert s.trace.as_python().splitlines()[:2] == [
        "C_local = s.cache_write(s.tensor(\"C\"), 'local')",
        'i_o, j_o, i_i, j_i = s["C"].tile(s["C"].get_axis("i"), s["C"].get_axis("j"), 2, 4)',
    ]


def nchw():
    X = placeholder((1, 4, 3, 3), "float32", "X")
    Y = compute(X.shape, lambda n, c, h, w: X[n, c, h, w] * 2.0, name="Y")
    return X, Y, create_schedule([Y])


def test_pack_input_nchw_to_nchwc():
    X, Y, s = nchw()
    Xp = s.pack(X, 1, 2)
    assert Xp.shape == (1, 2, 3, 3, 2)
    assert body(check(s, [X], [Y], lambda x: x * 2)) == (
        "for i1 in range(0, 2):\n"
        "  for i2 in range(0, 3):\n"
        "    for i3 in range(0, 3):\n"
        "      for i4 in range(0, 2):\n"
        "        X_pack[i1*18 + i2*6 + i3*2 + i4] = X[i1*18 + i4*9 + i2*3 + i3]\n"
        "for c in range(0, 4):\n"
        "  for h in range(0, 3):\n"
        "    for w in range(0, 3):\n"
        "      Y[c*9 + h*3 + w] = X_pack[c//2*18 + h*6 + w*2 + c%2]*2.0"
    )


def test_pack_not_dividing_pads_with_zeros():
    X, Y, s = nchw()
    Xp = s.pack(X, 1, 3)
    assert Xp.shape == (1, 2, 3, 3, 3)
    text = body(check(s, [X], [Y], lambda x: x * 2))
    assert "if i1*3 + i4 < 4:" in text and "else:" in text


def test_pack_computed_at_consumer():
    X, Y, s = nchw()
    Xp = s.pack(X, 1, 3)
    s[Xp].compute_at(s[Y], s[Y].op.axis[1])
    assert body(check(s, [X], [Y], lambda x: x * 2)) == (
        "for c in range(0, 4):\n"
        '  X_pack = allocate(f32[1,1,3,3,1], "local")\n'
        "  for i2 in range(0, 3):\n"
        "    for i3 in range(0, 3):\n"
        "      X_pack[i2*3 + i3] = X[c*9 + i2*3 + i3]\n"
        "  for h in range(0, 3):\n"
        "    for w in range(0, 3):\n"
        "      Y[c*9 + h*3 + w] = X_pack[h*3 + w]*2.0"
    )


def test_pack_conv_weights_oihw_to_oihw_xi_yo():
    X, W, P, Y = conv2d(ci=4, co=4)
    s = create_schedule([Y])
    s[P].compute_inline()
    Wi = s.pack(W, 1, 2)  # O, I/2, H, W, 2i
    Wio = s.pack(Wi, 0, 2)  # O/2, I/2, H, W, 2i, 2o
    s[Wi].compute_inline()
    assert Wio.shape == (2, 2, 3, 3, 2, 2)
    text = check(s, [X, W], [Y], lambda x, w: conv2d_ref(x, w, 1))
    assert (
        "W_pack_pack[i0*72 + i1*36 + i2*12 + i3*4 + i4*2 + i5] = W[i0*72 + i5*36 + i1*18 + i4*9 + i2*3 + i3]"
        in text
    )
    assert "W_pack_pack[f//2*72 + rc//2*36 + rh*12 + rw*4 + rc%2*2 + f%2]" in text


def test_pack_conv_input_and_output_blocks():
    X, W, P, Y = conv2d(ci=4, co=4)
    s = create_schedule([Y])
    Pp = s.pack(P, 1, 2)
    s[P].compute_inline()
    s[Pp].compute_at(s[Y], s[Y].op.axis[2])
    check(s, [X, W], [Y], lambda x, w: conv2d_ref(x, w, 1))


# ---- illegal requests ----------------------------------------------------------------------
def test_cache_write_after_other_primitives():
    _A, _B, C = matmul(4, 4, 4)
    s = create_schedule([C])
    s[C].split(s[C].op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match="apply it to C before other primitives"):
        s.cache_write(C, "local")


def test_cache_write_placeholder_and_bad_scope():
    A, _B, C = matmul(4, 4, 4)
    s = create_schedule([C])
    with pytest.raises(ScheduleError, match="A is a placeholder"):
        s.cache_write(A, "local")
    with pytest.raises(ScheduleError, match="unknown scope"):
        s.cache_write(C, "shared")


@pytest.mark.parametrize(
    ("axis", "factor", "message"),
    [(4, 2, r"axis must be a dimension of X \(0..3\)"), (1, 0, "positive int"), ("c", 2, "axis must be")],
)
def test_pack_bad_arguments(axis, factor, message):
    X, _Y, s = nchw()
    with pytest.raises(ScheduleError, match=message):
        s.pack(X, axis, factor)


def test_pack_foreign_tensor():
    _X, _Y, s = nchw()
    with pytest.raises(ScheduleError, match="not a tensor of this schedule"):
        s.pack(placeholder((2,), "float32", "X"), 0, 2)
