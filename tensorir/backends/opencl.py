"""The OpenCL backend: GPU kernels as OpenCL C, host code native, in one shared library.

codegen   every GPU kernel's loop IR -> OpenCL C (codegen/opencl.py; TIR_DUMP_DIR gets
          each .cl), the kernels without a GPU schedule -> one LLVM object for the CPU
package   + the static C runtime that dlopens libOpenCL.so, builds the embedded
          program (binary cache), uploads the weights once and enqueues the plan
          (runtime/opencl/tir_opencl.c, codegen/opencl_package.py), linked by ld.lld
load      built for this machine: runtime/opencl_module.py (through the C entry
          points, on this machine's OpenCL device); for another: an export-only Artifact
jit       one kernel through pyopencl on the device present (runtime/opencl_device.py)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tensorir.backends.base import Backend

if TYPE_CHECKING:
    from tensorir.compiler import Build
    from tensorir.loop.ir import LoopFunc
    from tensorir.plan import GpuKernel
    from tensorir.target import Target

LIB_NAME = "libmodel.so"
WEIGHTS_FILE = "weights.bin"


@dataclasses.dataclass
class Rendered:
    gpu: list[GpuKernel]  # unique by name, in first-use order
    cpu_object: Path | None  # the CPU kernels' object, None when every kernel is on the GPU


def _profile(target: Target) -> Any:
    """The device profile templates and the renderer read ('opencl': the device present,
    queried; a cross build names its profile, e.g. android-arm64+opencl:adreno640)."""
    return target.device_profile()


class OpenCLBackend(Backend):
    kind = "opencl"

    def codegen(self, build: Build, out: Path) -> Rendered:
        from tensorir.codegen.opencl import dump_kernel, render_opencl

        profile = _profile(build.target)
        gpu, cpu_funcs = {}, []
        for func, call in zip(build.kernels, build.calls, strict=True):
            if call.device == "gpu":
                kernel = render_opencl(func, profile)
                gpu.setdefault(kernel.name, kernel)
                dump_kernel(kernel)
            else:
                cpu_funcs.append(func)
        cpu_object = None
        if cpu_funcs:
            from tensorir.compiler_link import write_kernels_object

            cpu_build = dataclasses.replace(build, kernels=cpu_funcs, target=build.target.cpu_target())
            cpu_object = write_kernels_object(cpu_build, out)
        return Rendered(_one_program(list(gpu.values())), cpu_object)

    def package(self, build: Build, rendered: Rendered, out: Path, weights: str) -> Path:
        from tensorir.codegen.opencl_package import OpenCLPlan, opencl_header, write_opencl_library

        m = build.manifest
        plan = OpenCLPlan(
            kernels=rendered.gpu,
            calls=list(build.calls),
            copies=list(build.copies),
            input_bytes=[_nbytes(t) for t in m["inputs"]],
            output_bytes=[_nbytes(t) for t in m["outputs"]],
            workspace=build.workspace,
            weights=build.weights,
        )
        embedded = weights == "embedded"
        objects = [rendered.cpu_object] if rendered.cpu_object else []
        out.mkdir(parents=True, exist_ok=True)
        with _stage("link"):
            write_opencl_library(plan, build.target, out / LIB_NAME, objects, embedded)
        for o in objects:
            o.unlink()
        manifest = dict(m, backend="opencl", profile=build.target.profile, library=LIB_NAME, weights=weights)
        manifest["gpu_kernels"] = len(rendered.gpu)
        manifest["cpu_kernels"] = sum(c.device == "cpu" for c in build.calls)
        if not embedded:
            manifest["weights_file"] = WEIGHTS_FILE
        (out / "model.h").write_text(opencl_header(manifest))
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        return out

    def load(self, directory: Path, manifest: dict) -> Any:
        from tensorir.target import host_target

        if manifest["triple"].split("-")[0] != host_target().arch or "android" in manifest["triple"]:
            from tensorir.runtime.artifact import Artifact

            return Artifact(directory)
        from tensorir.runtime.opencl_module import OpenCLModule

        return OpenCLModule(directory)

    def jit(self, func: LoopFunc, target: Target) -> Callable[..., None]:
        from tensorir.codegen.opencl import render_opencl
        from tensorir.runtime.opencl_device import run_gpu_kernel

        kernel = render_opencl(func, _profile(target))

        def call(*arrays: np.ndarray) -> None:
            outs, _ = run_gpu_kernel(kernel, list(arrays), target.profile)
            for a, o in zip(arrays, outs, strict=True):
                if isinstance(a, np.ndarray) and a.flags.writeable:
                    a[...] = o

        return call


def _one_program(kernels: list[GpuKernel]) -> list[GpuKernel]:
    """The kernels' sources made fit to concatenate into one program (join_sources)."""
    from tensorir.codegen.opencl_launches import join_sources

    seen: set[str] = set()
    return [dataclasses.replace(k, source=join_sources([k.source], seen)) for k in kernels]


def _nbytes(spec: dict) -> int:
    from tensorir.graph.types import TensorType

    return TensorType(tuple(spec["shape"]), spec["dtype"]).nbytes


def _stage(name: str):
    from tensorir import debug

    return debug.stage(name)
