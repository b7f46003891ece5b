"""ONNX's own node test suite, run on the reference path through tensorir.onnx_backend.

Covers every node test whose ops are all supported; the few excluded ones are listed
with their reasons in node_test_exclusions.txt, and must stay under 5% of the total.
"""

from __future__ import annotations

import re

import onnx.backend.test

from tensorir import onnx_backend
from tests.frontend.node_suite import excluded_tests, supported_node_tests

_supported = supported_node_tests()
_excluded = excluded_tests()

backend_test = onnx.backend.test.BackendTest(onnx_backend.TirBackend, __name__)
backend_test.include("^(" + "|".join(re.escape(n) for n in _supported) + ")_cpu$")
for _name in _excluded:
    backend_test.exclude(f"^{re.escape(_name)}_cpu$")
_wanted = {f"{n}_cpu" for n in _supported if n not in _excluded}
_cases = backend_test.test_cases  # a property that builds fresh classes: read it once
for _case in _cases.values():
    # BackendTest makes a skipped test for every other model it knows; keep only ours.
    for _attr in [a for a in vars(_case) if a.startswith("test_") and a not in _wanted]:
        delattr(_case, _attr)
globals().update({k: c for k, c in _cases.items() if any(a.startswith("test_") for a in vars(c))})


def test_exclusions_are_few_and_real() -> None:
    unknown = sorted(set(_excluded) - set(_supported))
    assert not unknown, f"exclusions name tests outside the supported set: {unknown[:5]}"
    assert all(_excluded.values()), "every exclusion needs a reason"
    assert len(_excluded) <= 0.05 * len(_supported), (len(_excluded), len(_supported))
