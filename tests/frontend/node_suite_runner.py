"""Build the unittest classes that run ONNX's node tests on one tensorir target."""

from __future__ import annotations

import re
from typing import Any

import onnx.backend.test

from tensorir import onnx_backend
from tests.frontend.node_suite import excluded_tests, supported_node_tests


class _TargetBackend(onnx_backend.TirBackend):
    target = "ref"

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        return super().prepare(model, device, target=cls.target, **kwargs)


def node_test_cases(target: str, module: str, exclusions: str) -> dict[str, Any]:
    """Test classes for every supported node test not excluded in `exclusions`."""
    supported = supported_node_tests()
    excluded = excluded_tests(exclusions)
    backend = type(f"TirBackend_{target}", (_TargetBackend,), {"target": target})
    runner = onnx.backend.test.BackendTest(backend, module)
    runner.include("^(" + "|".join(re.escape(n) for n in supported) + ")_cpu$")
    wanted = {f"{n}_cpu" for n in supported if n not in excluded}
    cases = runner.test_cases  # a property that builds fresh classes: read it once
    for case in cases.values():
        # BackendTest makes a skipped test for every other model it knows; keep only ours.
        for attr in [a for a in vars(case) if a.startswith("test_") and a not in wanted]:
            delattr(case, attr)
    return {k: c for k, c in cases.items() if any(a.startswith("test_") for a in vars(c))}
