"""Every registered op has a compute definition or a kernel builder (so it can be compiled),
with named exceptions."""

from __future__ import annotations

from tensorir.ops.registry import all_ops

# op -> why no kernel computes it
WITHOUT_COMPUTE = {
    "dropout": "training-mode dropout draws numpy's seeded random mask; inference dropout is identity",
    "loop": "its body is a graph of its own, compiled as a model and run in a loop of the entry",
}


def test_every_op_has_a_compute_definition():
    missing = sorted(n for n, d in all_ops().items() if not {"compute", "kernel"} & set(d.extra))
    assert missing == sorted(WITHOUT_COMPUTE), missing
