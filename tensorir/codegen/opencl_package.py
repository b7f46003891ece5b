"""Package an OpenCL plan as one shared library: the static C runtime (runtime/opencl/tir_opencl.c),
generated plan tables (plan.c: kernel source, steps, sizes), the weights, the CPU kernels.

    plan = OpenCLPlan(kernels=[...GpuKernel], calls=[...KernelCall], copies=[...Copy],
                      input_bytes=[...], output_bytes=[...], workspace=n, weights=blob)
    lib = write_opencl_library(plan, get_target("android-arm64"), Path("build/libmodel.so"),
                               cpu_objects=[Path("kernels.o")])
    Path("build/model.h").write_text(opencl_header(manifest))

The library imports only libc (and on Android bionic's libdl.so) and dlopens libOpenCL.so
at run time; C API: see `opencl_header`. Objects are built with clang for `target.triple`
without system headers (-ffreestanding -nostdinc), so no NDK is needed for Android. The
runtime's object is cached in `config.cache_dir()/opencl-runtime/` by (source hash, triple).
With `embedded=False` the weights go to `weights.bin` beside the library and tir_create
takes its path.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tensorir import config
from tensorir.codegen.link import defined_symbols, find_tool, link_shared, weights_object
from tensorir.errors import TirError
from tensorir.plan import Arg, Copy, GpuKernel, KernelCall
from tensorir.runtime.opencl import RUNTIME_DIR, RUNTIME_SOURCE
from tensorir.target import Target

WEIGHTS_FILE = "weights.bin"
_BLOB = "tir_weights.bin"  # ld -b binary names its symbols after the file: _binary_tir_weights_bin_*
_KINDS = {"input": "TIR_INPUT", "output": "TIR_OUTPUT", "weight": "TIR_WEIGHT", "workspace": "TIR_WORKSPACE"}
_C_KINDS = {**_KINDS, "image": "TIR_IMAGE"}  # plan.c only: a weight read as an image (a row of images[])
_CFLAGS = ("-ffreestanding", "-nostdinc", "-fno-stack-protector", "-fPIC", "-O2", "-fvisibility=hidden")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_THREAD_API = ("tir_set_num_threads", "tir_get_num_threads")


@dataclass
class OpenCLPlan:
    """What the runtime executes: GPU kernels (unique by name), the steps in order (device "gpu":
    a GpuKernel name, "cpu": an LLVM symbol in `cpu_objects`), the final copies, buffer sizes."""

    kernels: list[GpuKernel]
    calls: list[KernelCall]
    copies: list[Copy] = field(default_factory=list)
    input_bytes: list[int] = field(default_factory=list)
    output_bytes: list[int] = field(default_factory=list)
    workspace: int = 0
    weights: bytes = b""

    @property
    def source(self) -> str:
        """All kernels as one OpenCL C program."""
        return "\n".join(k.source.rstrip() + "\n" for k in self.kernels)


def clang() -> str:
    """clang (any version find_tool knows; Debian's PoCL package brings clang-15)."""
    return find_tool("clang", "clang-15")


def c_string(text: str) -> str:
    """`text` as a C string literal, one source line per line of text (UTF-8, octal escapes)."""
    out, line = [], []
    for b in text.encode():
        c = chr(b)
        if c in '\\"?':
            line.append("\\" + c)  # '?' too: no trigraphs
        elif c == "\n":
            line.append("\\n")
            out.append('"' + "".join(line) + '"')
            line = []
        elif 32 <= b < 127:
            line.append(c)
        else:
            line.append(f"\\{b:03o}")  # three octal digits: never swallows a following digit
    if line or not out:
        out.append('"' + "".join(line) + '"')
    return "\n    ".join(out)


def _check(plan: OpenCLPlan) -> dict[str, int]:
    """name -> index in plan.kernels, after checking the plan."""
    index: dict[str, int] = {}
    names: set[str] = set()
    for k in plan.kernels:
        for la in k.launches:
            if not _IDENT.fullmatch(la.name) or la.name in names:
                raise TirError(f"GPU kernel name {la.name!r} is not a unique C identifier")
            if not 1 <= len(la.global_size) <= 3 or len(la.local_size) not in (0, len(la.global_size)):
                raise TirError(f"GPU kernel {la.name}: global {la.global_size} / local {la.local_size} sizes")
            names.add(la.name)
        index[k.name] = len(index)
    for c in plan.calls:
        if not _IDENT.fullmatch(c.symbol):
            raise TirError(f"kernel call symbol {c.symbol!r} is not a C identifier")
        if c.device == "gpu":
            if c.symbol not in index:
                raise TirError(f"GPU step {c.symbol}: no GpuKernel of that name in the plan")
            params = plan.kernels[index[c.symbol]].params
            if len(params) != len(c.args):
                raise TirError(f"GPU step {c.symbol}: {len(c.args)} args for {len(params)} buffer params")
        elif c.device != "cpu":
            raise TirError(f"step {c.symbol}: device {c.device!r} (expected 'cpu' or 'gpu')")
        if c.arg_bytes and len(c.arg_bytes) != len(c.args):
            raise TirError(f"step {c.symbol}: {len(c.arg_bytes)} arg_bytes for {len(c.args)} args")
        for a in c.args:
            _check_arg(plan, a, c.symbol)
    for cp in plan.copies:
        _check_arg(plan, cp.src, "copy")
        _check_arg(plan, cp.dst, "copy")
    return index


def _check_arg(plan: OpenCLPlan, a: Arg, where: str) -> None:
    n = {"input": len(plan.input_bytes), "output": len(plan.output_bytes)}
    if a.kind not in _KINDS or (a.kind in n and not 0 <= a.index < n[a.kind]) or a.index < 0:
        raise TirError(f"{where}: bad argument {a.to_json()}")


def _arg(a: Arg, nbytes: int) -> str:
    return f"{{{_C_KINDS[a.kind]}, {a.index}ULL, {nbytes}ULL}}"


def _u64_array(name: str, values: Sequence[int]) -> str:
    body = ", ".join(f"{v}ULL" for v in values) or "0"
    return f"static const tir_u64 {name}[] = {{{body}}};"


def plan_c(plan: OpenCLPlan, embedded: bool, thread_stubs: bool) -> str:
    """The generated C file: `tir_the_plan` and one trampoline per CPU kernel."""
    index = _check(plan)
    source = plan.source
    lines = ['#include "tir_opencl_plan.h"', ""]
    if embedded:
        lines.append("extern const unsigned char _binary_tir_weights_bin_start[];")
    cpu_fns: dict[tuple[str, int], str] = {}
    for c in plan.calls:
        if c.device == "cpu" and (c.symbol, len(c.args)) not in cpu_fns:
            name = f"tir_cpu_{len(cpu_fns)}"
            cpu_fns[(c.symbol, len(c.args))] = name
            params = ", ".join(["void *"] * len(c.args)) or "void"
            call = ", ".join(f"a[{i}]" for i in range(len(c.args)))
            lines.append(f"extern void {c.symbol}({params});")
            lines.append(f"static void {name}(void *const *a) {{ (void)a; {c.symbol}({call}); }}")
    lines.append("")
    lines.append(f"static const char source[] =\n    {c_string(source)};")
    kinfo, first = [], {}  # a row per launch; a kernel's first row
    for k in plan.kernels:
        first[k.name] = len(kinfo)
        for la in k.launches:
            g = ", ".join(str(x) for x in (*la.global_size, 0, 0, 0)[:3])
            loc = ", ".join(str(x) for x in (*la.local_size, 0, 0, 0)[:3])
            kinfo.append(f'    {{"{la.name}", {len(la.global_size)}, {{{g}}}, {{{loc}}}}},')
    lines.append("static const tir_kernel_info kernels[] = {\n" + ("\n".join(kinfo) or "    {0}") + "\n};")
    steps, images = [], image_table(plan, index)
    for s, c in enumerate(plan.calls):
        nbytes = c.arg_bytes or (0,) * len(c.args)
        call_args = image_args(plan, index, c, images)
        args = ", ".join(_arg(a, n) for a, n in zip(call_args, nbytes, strict=True)) or "{0}"
        lines.append(f"static const tir_arg args{s}[] = {{{args}}};")
        if c.device == "gpu":
            n = len(plan.kernels[index[c.symbol]].launches)
            steps.append(f'    {{"{c.symbol}", TIR_GPU, {first[c.symbol]}, {n}, 0, {len(c.args)}, args{s}}},')
        else:
            fn = cpu_fns[(c.symbol, len(c.args))]
            steps.append(f'    {{"{c.symbol}", TIR_CPU, -1, 0, {fn}, {len(c.args)}, args{s}}},')
    lines.append("static const tir_step steps[] = {\n" + ("\n".join(steps) or "    {0}") + "\n};")
    copies = [f"    {{{_arg(c.dst, 0)}, {_arg(c.src, 0)}, {c.nbytes}ULL}}," for c in plan.copies]
    lines.append("static const tir_copy copies[] = {\n" + ("\n".join(copies) or "    {{0}}") + "\n};")
    rows = [f"    {{{off}ULL, {w}, {h}, {int(half)}}}," for off, w, h, half in images]
    lines.append("static const tir_image images[] = {\n" + ("\n".join(rows) or "    {0}") + "\n};")
    lines.append(_u64_array("input_bytes", plan.input_bytes))
    lines.append(_u64_array("output_bytes", plan.output_bytes))
    digest = hashlib.sha256(source.encode()).hexdigest()
    weights = "_binary_tir_weights_bin_start" if embedded else "0"
    lines.append(
        f"""
const tir_plan tir_the_plan = {{
    source, sizeof source - 1, "{digest}",
    {len(kinfo)}, kernels,
    {len(plan.calls)}, steps,
    {len(plan.copies)}, copies,
    {len(plan.input_bytes)}, input_bytes,
    {len(plan.output_bytes)}, output_bytes,
    {plan.workspace}ULL, {len(plan.weights)}ULL,
    {weights},
    {len(images)}, images,
}};"""
    )
    if thread_stubs:  # the same header as CPU builds; no CPU kernel brought the thread pool
        lines.append(
            '\n__attribute__((visibility("default"))) void tir_set_num_threads(int n) { (void)n; }\n'
            '__attribute__((visibility("default"))) int tir_get_num_threads(void) { return 1; }'
        )
    return "\n".join(lines) + "\n"


def image_table(plan: OpenCLPlan, index: dict[str, int]) -> dict[tuple[int, int, int, bool], int]:
    """The distinct images the GPU steps read, (weight offset, width, height, half) -> row; the
    runtime makes each once, at load, from the weights."""
    table: dict[tuple[int, int, int, bool], int] = {}
    for c in plan.calls:
        kernel = plan.kernels[index[c.symbol]] if c.device == "gpu" else None
        for im in kernel.images if kernel else ():
            a = c.args[im.index]
            if a.kind != "weight":
                raise TirError(f"GPU step {c.symbol}: image parameter {im.index} is a {a.kind}, not a weight")
            table.setdefault((a.index, im.width, im.height, im.channel_type == "half"), len(table))
    return table


def image_args(plan: OpenCLPlan, index: dict[str, int], c: KernelCall, table: dict) -> list[Arg]:
    """`c`'s arguments with those of image parameters as ("image", row of `table`)."""
    if c.device != "gpu":
        return list(c.args)
    args = list(c.args)
    for im in plan.kernels[index[c.symbol]].images:
        key = (args[im.index].index, im.width, im.height, im.channel_type == "half")
        args[im.index] = Arg("image", table[key])
    return args


def _compile(src: Path, target: Target, out: Path) -> Path:
    cmd = [
        clang(),
        f"--target={target.triple}",
        *_CFLAGS,
        "-I",
        str(RUNTIME_DIR),
        "-c",
        str(src),
        "-o",
        str(out),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise TirError(f"clang failed on {src.name} for {target.triple}: {p.stderr.strip()[-2000:]}")
    return out


def runtime_object(target: Target) -> Path:
    """tir_opencl.c compiled for target.triple, cached by (sources, flags, triple)."""
    sources = [RUNTIME_SOURCE, *sorted(RUNTIME_DIR.glob("*.h"))]  # the plan and OpenCL API headers
    text = b"".join(p.read_bytes() for p in sources) + " ".join(_CFLAGS).encode()
    key = hashlib.sha256(text + target.triple.encode()).hexdigest()[:24]
    path = config.cache_dir() / "opencl-runtime" / f"{target.triple}-{key}.o"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    _compile(RUNTIME_SOURCE, target, tmp)
    tmp.replace(path)  # atomic: concurrent builds never see a partial object
    return path


def _weights_object(blob: bytes, arch: str, tmp: Path) -> Path:
    """The blob as an ELF object with _binary_tir_weights_bin_* symbols (link.weights_object)."""
    (tmp / _BLOB).write_bytes(blob or bytes(64))
    return weights_object(tmp / _BLOB, arch)


def write_opencl_library(
    plan: OpenCLPlan,
    target: Target,
    out: Path,
    cpu_objects: Sequence[Path] = (),
    embedded: bool = True,
) -> Path:
    """Write the shared library at `out` (and `weights.bin` beside it when not `embedded`)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    has_pool = any(set(_THREAD_API) & defined_symbols(o) for o in cpu_objects)
    with tempfile.TemporaryDirectory(prefix="tir-opencl-") as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "plan.c").write_text(plan_c(plan, embedded, thread_stubs=not has_pool))
        objects = [
            *map(Path, cpu_objects),
            runtime_object(target),
            _compile(tmp / "plan.c", target, tmp / "plan.o"),
        ]
        if embedded:
            objects.append(_weights_object(plan.weights, target.arch, tmp))
        else:
            (out.parent / WEIGHTS_FILE).write_bytes(plan.weights)
        link_shared(objects, target, out)
    return out


def opencl_header(manifest: Mapping[str, Any]) -> str:
    """model.h for an OpenCL artifact (the CPU header's functions plus the OpenCL ones)."""
    io = []
    for kind in ("inputs", "outputs"):
        for k, t in enumerate(manifest["inputs" if kind == "inputs" else "outputs"]):
            io.append(f" *   {kind[:-1]} {k}: {t['name']}  {t['dtype']}{t['shape']}")
    return f"""/* Generated by tensorir {manifest.get("tensorir_version", "")} for target \
{manifest.get("target", "")} ({manifest.get("triple", "")}), OpenCL backend.
 * Model sha256 {manifest.get("model_sha256", "")}.
 *
{chr(10).join(io)}
 *
 * Buffers are dense, row-major host memory in the dtypes above. The library loads
 * libOpenCL.so at run time (TIR_OPENCL_LIBRARY overrides the name; TIR_OPENCL_PLATFORM, a
 * case-insensitive substring of the platform name, restricts the platforms); it uses the
 * first GPU, else the first device of any type. A model object is not thread-safe.
 */
#ifndef TENSORIR_MODEL_H
#define TENSORIR_MODEL_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {{
#endif

#define TIR_NUM_INPUTS {len(manifest["inputs"])}
#define TIR_NUM_OUTPUTS {len(manifest["outputs"])}
#define TIR_WORKSPACE_BYTES {manifest.get("workspace_bytes", 0)}

typedef struct tir_model tir_model;

/* weights_path: NULL when the weights are embedded, else the path of {WEIGHTS_FILE}.
 * program_cache_path: a file for the compiled program binary (read if it matches this
 * program, device and driver; else written after building from source), or NULL.
 * Returns NULL on failure: tir_last_error() says why in one line. */
tir_model *tir_create(const char *weights_path, const char *program_cache_path);
void tir_destroy(tir_model *model);
/* Runs the whole model; returns 0 on success, else see tir_last_error(). */
int tir_run(tir_model *model, void *const *inputs, void *const *outputs);
/* One run with profiling: step_us[k] = microseconds of step k (one per kernel call). */
int tir_profile(tir_model *model, void *const *inputs, void *const *outputs, double *step_us);
const char *tir_last_error(void);
/* "<platform> / <device>" the model runs on. */
const char *tir_device_name(tir_model *model);
/* 1 when tir_create loaded the program from program_cache_path. */
int tir_program_from_cache(tir_model *model);
/* Threads of the CPU kernels' parallel loops (n <= 0: all cores). */
void tir_set_num_threads(int32_t n);
int32_t tir_get_num_threads(void);

#ifdef __cplusplus
}}
#endif
#endif
"""
