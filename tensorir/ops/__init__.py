"""Op registry and numpy references; one module per op family."""

from tensorir.ops.registry import OpDef, all_ops, get_op, register_compute, register_op

__all__ = ["OpDef", "all_ops", "get_op", "register_compute", "register_op"]
