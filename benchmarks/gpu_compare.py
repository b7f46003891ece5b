"""tensorir's OpenCL path vs PyTorch eager CUDA on the same GPU, batch 1, side by side.

Two steps, because the GPU machine has torch and onnxruntime but not tensorir's compiler
dependencies (llvmlite, clang, ld.lld):

    # here: compile the zoo models for the GPU's OpenCL profile into .gpu_build/<model>/
    python -m benchmarks.gpu_compare build mobilenet_v2_224 resnet18 --target opencl:nvidia
    # on the GPU machine (carry .gpu_build): run both, check outputs, time interleaved
    python3 -m benchmarks.gpu_compare run --dir .gpu_build

`run` needs only numpy, onnx, onnxruntime and torch: the compiled library is driven through
its C API with ctypes (what an app does; no tensorir import), the zoo's ONNX model is
rebuilt from its seed (its sha256 must equal the manifest's), and PyTorch runs the same
ONNX graph op by op with torch.nn.functional on CUDA in eager mode (one launch per op, as
an nn.Module in eval mode would). Every output is checked against onnxruntime (CPU).
Torch runs in true fp32 (TF32 off; its default lets cuDNN convolutions use TF32: `--tf32`).
The trained models of benchmarks/wild.py build and run the same way (their ONNX file is
copied into the build folder).
Timing: `--rounds` rounds, each one tensorir run and one torch run (each followed by a
device synchronisation), after warm-up; medians in ms and the ratio tensorir / torch.
Per-kernel times of tensorir come from OpenCL profiling events (tir_profile).
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

BUILD_DIR = Path(".gpu_build")


# ---- here: compile ---------------------------------------------------------------------
def build_models(
    models: list[str],
    target: str,
    out: Path,
    records: Path | None = None,
    tag: str | None = None,
    weights: str = "embedded",
) -> None:
    """Compile each model (a zoo or wild model's name, or an .onnx file) into out/<name>[.tag]
    (with `records`, a tuning database, compiled with the records whose device key fits
    `target`; its tag defaults to "tuned")."""
    import tensorir as tir  # noqa: F401 - the compiler side only
    from autotune.records import Records
    from benchmarks.wild import WILD, fetch, input_name
    from benchmarks.zoo import build
    from tensorir.pipeline import compile_model
    from tensorir.target import get_target

    recs = Records.for_target(get_target(target), db=records, logs=False) if records else None
    if recs is not None:
        print(f"tuning records of device {recs.device} ({recs.how or 'none fit'}): {len(recs)} workloads")
        tag = tag or "tuned"
    for name in models:
        t0 = time.perf_counter()
        path = fetch([name])[name] if name in WILD else Path(name) if name.endswith(".onnx") else None
        stem = path.stem if path is not None and name not in WILD else name
        folder_name = f"{stem}.{tag}" if tag else stem
        if path is not None:  # the ONNX file travels with the build
            shapes = {input_name(path): WILD[name].shape} if name in WILD else None
            b = compile_model(str(path), target, shapes, records=recs)
            folder = b.write(out / folder_name, weights)
            shutil.copyfile(path, folder / "model.onnx")
        else:
            b = compile_model(build(name), target, records=recs)
            folder = b.write(out / folder_name, weights)
        m = json.loads((folder / "manifest.json").read_text())
        print(
            f"{folder_name}: {m['gpu_kernels']} GPU kernels, {m['cpu_kernels']} CPU kernels, "
            f"{m.get('tuned_kernels', 0)} tuned, compiled in {time.perf_counter() - t0:.1f} s -> {folder}"
        )


# ---- there: run through the C API ------------------------------------------------------
class CModel:
    """A compiled OpenCL folder driven through tir_create / tir_run / tir_profile."""

    def __init__(self, folder: Path) -> None:
        self.manifest = json.loads((folder / "manifest.json").read_text())
        lib = self.lib = ctypes.CDLL(str((folder / self.manifest["library"]).resolve()))
        lib.tir_create.restype = ctypes.c_void_p
        lib.tir_create.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        lib.tir_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.tir_profile.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.tir_last_error.restype = ctypes.c_char_p
        lib.tir_device_name.restype = ctypes.c_char_p
        lib.tir_device_name.argtypes = [ctypes.c_void_p]
        cache = str(Path(os.environ.get("TMPDIR", "/tmp")) / f"tir-{self.manifest['model_sha256'][:16]}.bin")
        blob = folder / "weights.bin"  # external weights (build --weights external)
        self.handle = lib.tir_create(str(blob).encode() if blob.exists() else None, cache.encode())
        if not self.handle:
            raise RuntimeError(f"tir_create: {lib.tir_last_error().decode()}")
        self.device = lib.tir_device_name(self.handle).decode()

    def bind(self, feeds: dict[str, np.ndarray]):
        ins = [np.ascontiguousarray(feeds[t["name"]], dtype=t["dtype"]) for t in self.manifest["inputs"]]
        outs = [np.empty(t["shape"], t["dtype"]) for t in self.manifest["outputs"]]
        pin = (ctypes.c_void_p * len(ins))(*[a.ctypes.data for a in ins])
        pout = (ctypes.c_void_p * len(outs))(*[a.ctypes.data for a in outs])
        keep = (ins, outs, pin, pout)

        def run() -> list[np.ndarray]:
            if self.lib.tir_run(self.handle, pin, pout) != 0:
                raise RuntimeError(f"tir_run: {self.lib.tir_last_error().decode()}")
            return keep[1]

        def profile() -> list[float]:
            n = len(self.manifest["kernels"])
            times = (ctypes.c_double * n)()
            if self.lib.tir_profile(self.handle, pin, pout, times) != 0:
                raise RuntimeError(f"tir_profile: {self.lib.tir_last_error().decode()}")
            return list(times)

        return run, profile


def torch_runner(model, feeds: dict[str, np.ndarray]):
    """The ONNX graph run op by op with torch.nn.functional on CUDA (eager)."""
    import onnx.numpy_helper
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda")

    nodes = list(model.graph.node)
    # shapes, axes, scales and clip bounds stay on the host: read as numbers, no device sync
    host = {i for n in nodes if n.op_type in ("Resize", "Clip") for i in n.input[1:]}

    def const(t):
        a = torch.from_numpy(onnx.numpy_helper.to_array(t).copy())
        return a if a.dtype == torch.int64 or t.name in host else a.to(dev)

    consts = {t.name: const(t) for t in model.graph.initializer}
    inputs = {k: torch.from_numpy(v).to(dev) for k, v in feeds.items()}
    outputs = [o.name for o in model.graph.output]

    def attrs(node) -> dict:
        out = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Constant":
            out["value"].name = node.output[0]
            out["value"] = const(out["value"])
        return out

    def conv(x, w, b=None, **a):
        pads = a.get("pads", [0, 0, 0, 0])
        assert pads[0] == pads[2] and pads[1] == pads[3], "asymmetric pads"
        return F.conv2d(x, w, b, a.get("strides", 1), pads[:2], a.get("dilations", 1), a.get("group", 1))

    def gemm(a, b, c=None, **at):
        a = a.t() if at.get("transA") else a
        b = b.t() if at.get("transB") else b
        y = at.get("alpha", 1.0) * (a @ b)
        return y + at.get("beta", 1.0) * c if c is not None else y

    def maxpool(x, **a):
        pads = a.get("pads", [0, 0, 0, 0])
        return F.max_pool2d(x, a["kernel_shape"], a.get("strides", 1), pads[:2])

    def layernorm(x, s, b=None, **a):
        axis = a.get("axis", -1) % x.dim()
        return F.layer_norm(x, x.shape[axis:], s, b, a.get("epsilon", 1e-5))

    def resize(x, roi=None, scales=None, sizes=None, **a):  # the wild models' nearest/asymmetric/floor
        assert a.get("mode", b"nearest") == b"nearest" and a.get("nearest_mode") == b"floor"
        assert a.get("coordinate_transformation_mode") == b"asymmetric"
        return F.interpolate(x, scale_factor=[float(f) for f in scales.tolist()[2:]], mode="nearest")

    def conv_transpose(x, w, b=None, **a):
        assert not any(a.get("pads", [0])) and "output_padding" not in a
        return F.conv_transpose2d(
            x, w, b, a.get("strides", 1), 0, 0, a.get("group", 1), a.get("dilations", 1)
        )

    ops = {
        "Conv": conv,
        "BatchNormalization": lambda x, s, b, m, v, **a: F.batch_norm(
            x, m, v, s, b, False, 0.0, a.get("epsilon", 1e-5)
        ),
        "Relu": lambda x, **a: F.relu(x),
        "Clip": lambda x, lo=None, hi=None, **a: torch.clamp(x, _number(lo), _number(hi)),
        "Add": lambda a, b, **k: a + b,
        "Sub": lambda a, b, **k: a - b,
        "Mul": lambda a, b, **k: a * b,
        "Div": lambda a, b, **k: a / b,
        "Erf": lambda x, **k: torch.erf(x),
        "GlobalAveragePool": lambda x, **a: F.adaptive_avg_pool2d(x, 1),
        "Flatten": lambda x, **a: torch.flatten(x, a.get("axis", 1)),
        "Gemm": gemm,
        "MaxPool": maxpool,
        "MatMul": lambda a, b, **k: a @ b,
        "Reshape": lambda x, s, **k: x.reshape(
            [int(d) if d != 0 else x.shape[i] for i, d in enumerate(s.tolist())]
        ),
        "Transpose": lambda x, **a: x.permute(a["perm"]),
        "Softmax": lambda x, **a: torch.softmax(x, a.get("axis", -1)),
        "LayerNormalization": layernorm,
        "Unsqueeze": lambda x, ax, **k: x.reshape(_unsqueezed(x.shape, ax.tolist())),
        "Cast": lambda x, **a: x.to({1: torch.float32, 7: torch.int64, 6: torch.int32}[a["to"]]),
        "Constant": lambda **a: a["value"],
        "Sigmoid": lambda x, **a: torch.sigmoid(x),
        "HardSigmoid": lambda x, **a: torch.clamp(a.get("alpha", 0.2) * x + a.get("beta", 0.5), 0, 1),
        "HardSwish": lambda x, **a: F.hardswish(x),
        "Concat": lambda *xs, **a: torch.cat(xs, a["axis"]),
        "Split": lambda x, s, **a: torch.split(x, s.tolist(), a.get("axis", 0)),
        "Resize": resize,
        "ConvTranspose": conv_transpose,
    }

    if any(n.op_type not in ops for n in nodes):
        return None
    # the per-op work decided once, so a run costs what an nn.Module's forward costs
    steps = [(ops[n.op_type], list(n.input), list(n.output), attrs(n)) for n in nodes]

    def run() -> list:
        env = {**consts, **inputs}
        for fn, ins, outs, kw in steps:
            y = fn(*[env[i] if i else None for i in ins], **kw)
            env.update(zip(outs, y, strict=True) if len(outs) > 1 else {outs[0]: y})
        return [env[o] for o in outputs]

    return run


def _model_name(folder: Path) -> str:
    """The model a build folder holds: 'resnet18.tuned' -> 'resnet18'."""
    return folder.name.split(".")[0]


def _number(t):
    """A host tensor as a Python number (clip bounds); None and device tensors as they are."""
    return t.item() if t is not None and t.device.type == "cpu" else t


def _model_and_inputs(folder: Path):
    """The ONNX model of a build folder and its inputs: a wild model's file travels with the
    build (its input a synthetic document page, or seeded random inputs for an ONNX file given
    by path); a zoo model is rebuilt from its seed."""
    import onnx

    from benchmarks.wild import WILD, document_image, input_name
    from benchmarks.zoo import build, sample_inputs

    if (folder / "model.onnx").exists():
        model = onnx.load(str(folder / "model.onnx"))
        if _model_name(folder) not in WILD:  # an ONNX file given by path: seeded random inputs
            return model, sample_inputs(model)
        return model, {input_name(folder / "model.onnx"): document_image(WILD[_model_name(folder)].shape)}
    model = build(_model_name(folder))
    return model, sample_inputs(model)


def _unsqueezed(shape, axes: list[int]) -> list[int]:
    out = list(shape)
    for a in sorted(x % (len(shape) + len(axes)) for x in axes):
        out.insert(a, 1)
    return out


def _check(name: str, got: list[np.ndarray], ref: list[np.ndarray], what: str) -> float:
    err = 0.0
    for g, r in zip(got, ref, strict=True):
        scale = float(np.max(np.abs(r))) or 1.0
        err = max(err, float(np.max(np.abs(g.astype(np.float64) - r))) / scale)
    status = "ok" if err < 1e-3 else "MISMATCH"
    print(f"  {name}: {what} vs onnxruntime: max abs err / max |ref| = {err:.2e}  {status}")
    return err


def run_models(folder: Path, rounds: int, warmup: int, tf32: bool = False) -> int:
    """Check and time every build in `folder`; torch in true fp32 unless `tf32` (PyTorch's
    default lets cuDNN convolutions use TF32: 10-bit mantissas, errors ~1e-3)."""
    import onnxruntime as ort
    import torch

    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = tf32
    rows, bad = [], 0
    for d in sorted(p for p in folder.iterdir() if (p / "manifest.json").exists()):
        model, feeds = _model_and_inputs(d)
        cm = CModel(d)
        if hashlib.sha256(model.SerializeToString()).hexdigest() != cm.manifest["model_sha256"]:
            raise SystemExit(f"{d.name}: the rebuilt zoo model differs from the compiled one")
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        ref = sess.run(None, feeds)
        tir_run, tir_profile = cm.bind(feeds)
        torch_run = torch_runner(model, feeds)
        print(
            f"{d.name}: tensorir on {cm.device}; torch {torch.__version__} on {torch.cuda.get_device_name()}"
            f" ({'tf32' if tf32 else 'fp32'})"
        )
        bad += _check(d.name, tir_run(), ref, "tensorir OpenCL") >= 1e-3
        if torch_run is None:
            print(f"  {d.name}: the torch runner lacks one of its ops: tensorir timed alone")
        elif _check(d.name, [t.float().cpu().numpy() for t in torch_run()], ref, "torch CUDA") >= 1e-3:
            bad += not tf32
        t_tir, t_torch = _interleaved(tir_run, torch_run, rounds, warmup)
        a, b = np.median(t_tir) * 1e3, np.median(t_torch) * 1e3 if t_torch else float("nan")
        steps = tir_profile()
        top = sorted(zip(steps, cm.manifest["kernels"], strict=True), key=lambda x: -x[0])[:5]
        rows.append((d.name, a, b, a / b, sum(steps) / 1e3, len(steps)))
        print("  top kernels: " + ", ".join(f"{k['symbol']} {t:.0f} us" for t, k in top))
    head = ("model", "tensorir ms", "torch ms", "ratio", "sum of kernels ms", "kernels")
    print("\n{:<18} {:>12} {:>10} {:>7} {:>18} {:>8}".format(*head))
    for name, a, b, r, k, n in rows:
        print(f"{name:<18} {a:>12.3f} {b:>10.3f} {r:>7.2f} {k:>18.3f} {n:>8}")
    return 1 if bad else 0


def _interleaved(tir_run, torch_run, rounds: int, warmup: int) -> tuple[list[float], list[float]]:
    """Seconds per run, one tensorir run and one torch run per round (torch may be None)."""
    import torch

    with torch.no_grad():
        for _ in range(warmup):
            tir_run()
            if torch_run:
                torch_run()
        torch.cuda.synchronize()
        t_tir, t_torch = [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            tir_run()  # returns after the outputs are read back
            t_tir.append(time.perf_counter() - t0)
            if torch_run:
                t0 = time.perf_counter()
                torch_run()
                torch.cuda.synchronize()
                t_torch.append(time.perf_counter() - t0)
    return t_tir, t_torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("models", nargs="+")
    b.add_argument("--target", default="opencl:nvidia")
    b.add_argument("--out", type=Path, default=BUILD_DIR)
    b.add_argument("--records", type=Path, help="a tuning database: build <model>.tuned with its records")
    b.add_argument("--tag", help="build into <model>.<tag> (e.g. the algorithm a TIR_ variable forced)")
    b.add_argument("--weights", choices=["embedded", "external"], default="embedded")
    r = sub.add_parser("run")
    r.add_argument("--dir", type=Path, default=BUILD_DIR)
    r.add_argument("--rounds", type=int, default=50)
    r.add_argument("--warmup", type=int, default=10)
    r.add_argument("--tf32", action="store_true", help="let torch use TF32 (its default) instead of fp32")
    args = ap.parse_args()
    if args.cmd == "build":
        build_models(args.models, args.target, args.out, args.records, args.tag, args.weights)
        return 0
    return run_models(args.dir, args.rounds, args.warmup, args.tf32)


if __name__ == "__main__":
    raise SystemExit(main())
