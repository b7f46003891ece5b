"""Every registered op has a compute definition or a kernel builder (so it can be compiled),
with named exceptions."""

from __future__ import annotations

from tensorir.ops.registry import all_ops

# op -> why no kernel computes it
WITHOUT_COMPUTE = {
    "dropout": "training-mode dropout draws numpy's seeded random mask; inference dropout is identity",
    "loop": "its body is a graph compiled as a model of its own, run by a loop of the entry (compiler_loop.py)",
}


def test_every_op_has_a_compute_definition():
    missing = sorted(n for n, d in all_ops().items() if not {"compute", "kernel"} & set(d.extra))
    assert missing == sorted(WITHOUT_COMPUTE), missing
