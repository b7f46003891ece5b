"""`onnx.backend.base.Backend` for tensorir, so ONNX's own backend test suite runs on it.

    rep = TirBackend.prepare(model, device="CPU", target="ref")
    outputs = rep.run([x, y])

`target` picks the executor: "ref" runs the numpy references (the oracle); "host"
compiles every op for this CPU (compute definition + default schedule + LLVM) and runs
the kernels. Later backends (OpenCL) plug in under their target names.
Inputs whose values fix a static shape (e.g. a Reshape target passed as a graph
input) are specialized as constants at run time, as a static-shape compiler must.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, namedtupledict

from tensorir.frontend.onnx import check_supported, from_onnx
from tensorir.frontend.structured import flat_values, regroup
from tensorir.runtime.lengths import trim_graph_outputs
from tensorir.runtime.reference import run_reference

_TARGETS = ("ref", "host")


def _shape_of(v: Any) -> Any:
    """A tensor's shape, or a sequence's list of shapes."""
    return [np.shape(e) for e in v] if isinstance(v, list) else np.asarray(v).shape


class TirBackendRep(BackendRep):
    def __init__(self, model: onnx.ModelProto, target: str) -> None:
        self.model = model
        self.target = target
        inits = {t.name for t in model.graph.initializer}
        self.input_names = [i.name for i in model.graph.input if i.name not in inits]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            feeds = dict(zip(self.input_names, arrays, strict=False))
        shapes = {k: _shape_of(v) for k, v in feeds.items() if v is not None}
        graph = from_onnx(self.model, input_shapes=shapes, input_values=feeds)
        flat = flat_values(feeds)
        flat = {n: flat[n] for n in graph.input_names()}
        if self.target == "ref":
            outs = run_reference(graph, flat)
        else:
            from tensorir.runtime.executor import CompiledGraph

            outs = CompiledGraph(graph, self.target).run(flat)
        names, outs = trim_graph_outputs([n for n, _ in graph.outputs], graph.output_lengths, outs)
        grouped = regroup(self.model.graph.output, names, outs)
        return namedtupledict("Outputs", [o.name for o in self.model.graph.output])(*grouped)


class TirBackend(Backend):
    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        try:
            check_supported(model)
        except Exception:
            return False
        return True

    @classmethod
    def prepare(
        cls, model: onnx.ModelProto, device: str = "CPU", target: str = "ref", **kwargs: Any
    ) -> TirBackendRep:
        if not cls.supports_device(device):
            raise ValueError(f"device {device!r} is not supported (CPU only)")
        if target not in _TARGETS:
            raise ValueError(f"target {target!r} is not one of {_TARGETS}")
        super().prepare(model, device, **kwargs)
        check_supported(model)
        return TirBackendRep(model, target)

    @classmethod
    def run_model(
        cls, model: onnx.ModelProto, inputs: Sequence[np.ndarray], device: str = "CPU", **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"


prepare = TirBackend.prepare
run_model = TirBackend.run_model
supports_device = TirBackend.supports_device
