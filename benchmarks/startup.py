"""Start-up time and artifact size, as the mobile engines report them.

    python -m benchmarks.startup mobilenet_v2_224 resnet18 --repeat 5

Start-up: in a fresh process each time, the time from loading the library (dlopen) through
`tir_create` to the end of the first `tir_run`, with the weights embedded in the library and
with them in weights.bin beside it; beside it onnxruntime's InferenceSession creation plus its
first run (its `import onnxruntime`, which loads its library, is reported apart). Medians of
--repeat processes.

Memory: the growth of the process's resident set (VmRSS) from just before loading the library
(onnxruntime: before its import) to just after the first run, with the weights embedded;
medians of the same processes. It holds the library's pages and its weights as the first run
touched them, the workspace and any prepared weights (onnxruntime: its library, session and
arena).

Size: the library stripped of symbols (llvm-objcopy --strip-all) with external weights: the
code (kernels, entry, thread pool), and the weights file; beside them the onnxruntime CPU
library the wheel ships (the pybind module that holds it), for the order of magnitude (a
minimal ORT build for one model is smaller, a few MB). Kernels: the kernel calls of one run,
after fusion.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import onnx

from benchmarks.zoo import MODELS, build, sample_inputs

_RSS = r"""
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
"""

_OURS = (
    _RSS
    + r"""
import ctypes, json, sys, time
import numpy as np
folder, ins = sys.argv[1], sys.argv[2]
m = json.load(open(folder + "/manifest.json"))
feeds = [np.load(ins + f"/{k}.npy") for k in range(len(m["inputs"]))]
outs = [np.empty(t["shape"], t["dtype"]) for t in m["outputs"]]
ptr = lambda a: (ctypes.c_void_p * max(len(a), 1))(*[x.ctypes.data for x in a])
pi, po = ptr(feeds), ptr(outs)
base = rss()
t0 = time.perf_counter()
lib = ctypes.CDLL(folder + "/" + m["library"])
lib.tir_create.restype = ctypes.c_void_p
lib.tir_create.argtypes = [ctypes.c_char_p]
lib.tir_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
w = m.get("weights_file")
h = lib.tir_create((folder + "/" + w).encode() if w else None)
assert h and lib.tir_run(h, pi, po) == 0
print(time.perf_counter() - t0, rss() - base)
"""
)

_ORT = (
    _RSS
    + r"""
import sys, time
import numpy as np
base = rss()
t0 = time.perf_counter()
import onnxruntime as ort
t1 = time.perf_counter()
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
feeds = {i.name: np.load(sys.argv[2] + f"/{k}.npy") for k, i in enumerate(s.get_inputs())}
s.run(None, feeds)
print(t1 - t0, time.perf_counter() - t1, rss() - base)
"""
)


def _child(code: str, *args: str) -> list[float]:
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return [float(x) for x in p.stdout.split()]


def stripped_size(lib: Path) -> int:
    """Bytes of the shared library `lib` with its symbol tables stripped (llvm-objcopy)."""
    from tensorir.codegen.link import find_tool

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "lib.so"
        subprocess.run([find_tool("llvm-objcopy", "llvm-14"), "--strip-all", str(lib), str(out)], check=True)
        return out.stat().st_size


def ort_library_bytes() -> int:
    import onnxruntime

    capi = Path(onnxruntime.__file__).parent / "capi"
    return sum(p.stat().st_size for p in capi.glob("onnxruntime_pybind11_state*.so"))


def measure(model: onnx.ModelProto, repeat: int = 5) -> dict[str, Any]:
    """Start-up (ms, medians over fresh processes) and sizes (bytes) for one model."""
    import numpy as np

    import tensorir as tir

    feeds = sample_inputs(model)
    with tempfile.TemporaryDirectory(prefix="tir-startup-") as tmp:
        root = Path(tmp)
        ins = root / "inputs"
        ins.mkdir()
        for k, i in enumerate(model.graph.input[: len(feeds)]):
            np.save(ins / f"{k}.npy", np.asarray(feeds[i.name]))
        onnx.save(model, root / "model.onnx")
        mod = tir.compile(model)
        embedded = mod.export(root / "embedded")
        external = tir.compile(model, weights="external").export(root / "external")
        ours = {
            f: [_child(_OURS, str(d), str(ins)) for _ in range(repeat)]
            for f, d in (("e", embedded), ("x", external))
        }
        ort_runs = [_child(_ORT, str(root / "model.onnx"), str(ins)) for _ in range(repeat)]
        code = stripped_size(external / mod.manifest["library"])
        weights = (external / "weights.bin").stat().st_size
    ms = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    return {
        "startup_ms": ms([r[0] for r in ours["e"]]),
        "startup_external_ms": ms([r[0] for r in ours["x"]]),
        "ort_startup_ms": ms([r[1] for r in ort_runs]),
        "ort_import_ms": ms([r[0] for r in ort_runs]),
        "rss_bytes": statistics.median(r[1] for r in ours["e"]),
        "ort_rss_bytes": statistics.median(r[2] for r in ort_runs),
        "code_bytes": code,
        "weights_bytes": weights,
        "kernels": len(mod.manifest["kernels"]),
    }


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    head = f"{'model':<18} {'start ms':>8} {'ext ms':>7} {'ort ms':>7} {'ort import':>10}"
    print(head + f" {'code KB':>8} {'weights KB':>10} {'kernels':>7} {'RSS MiB':>8} {'ort MiB':>8}")
    for name, r in rows.items():
        times = f"{r['startup_ms']:>8.1f} {r['startup_external_ms']:>7.1f} {r['ort_startup_ms']:>7.1f}"
        sizes = f"{r['code_bytes'] / 1024:>8.0f} {r['weights_bytes'] / 1024:>10.0f} {r['kernels']:>7}"
        memory = f"{r['rss_bytes'] / 2**20:>8.1f} {r['ort_rss_bytes'] / 2**20:>8.1f}"
        print(f"{name:<18} {times} {r['ort_import_ms']:>10.1f} {sizes} {memory}")
    print(f"onnxruntime's CPU library in its wheel: {ort_library_bytes() / 2**20:.1f} MB")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="*", default=[m for m in MODELS if m != "tiny_cnn"])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "startup.json"))
    args = p.parse_args(argv)
    rows = {name: measure(build(name), args.repeat) for name in args.models}
    print_table(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
