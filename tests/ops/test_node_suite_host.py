"""ONNX's node tests again, with every op compiled for this CPU (target "host").

Each graph op goes through its compute definition, default schedule, lowering and LLVM,
and must match the node test's expected outputs. Tests the compiled path cannot run
(data types the code generator does not handle, ...) are listed with reasons in
tests/frontend/node_test_exclusions_host_<family>.txt.
"""

from __future__ import annotations

from tests.frontend.node_suite import excluded_tests, supported_node_tests
from tests.frontend.node_suite_runner import node_test_cases

EXCLUSIONS = "node_test_exclusions_host*.txt"  # one file per op family
globals().update(node_test_cases("host", __name__, EXCLUSIONS))


def test_host_exclusions_have_reasons() -> None:
    excluded = excluded_tests(EXCLUSIONS)
    assert set(excluded) <= set(supported_node_tests())
    assert all(excluded.values()), "every exclusion needs a reason"
