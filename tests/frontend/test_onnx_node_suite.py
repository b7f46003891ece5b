"""ONNX's own node test suite, run on the reference path through tensorir.onnx_backend.

Covers every node test whose ops are all supported; the few excluded ones are listed
with their reasons in node_test_exclusions.txt, and must stay under 5% of the total.
"""

from __future__ import annotations

from tests.frontend.node_suite import excluded_tests, supported_node_tests
from tests.frontend.node_suite_runner import node_test_cases

globals().update(node_test_cases("ref", __name__, "node_test_exclusions.txt"))


def test_exclusions_are_few_and_real() -> None:
    supported, excluded = supported_node_tests(), excluded_tests()
    unknown = sorted(set(excluded) - set(supported))
    assert not unknown, f"exclusions name tests outside the supported set: {unknown[:5]}"
    assert all(excluded.values()), "every exclusion needs a reason"
    assert len(excluded) <= 0.05 * len(supported), (len(excluded), len(supported))
