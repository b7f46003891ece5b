"""`tir run`: execute a model on given or seeded random inputs, optionally against onnxruntime."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from tensorir.errors import InputError, TirError
from tensorir.frontend.onnx import from_onnx, load_model, shape_conflict
from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType, np_dtype
from tensorir.runtime.reference import run_reference


def read_input_args(specs: Sequence[str], model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Parse `name=file.npy` arguments; every name must be a model input of the file's dtype."""
    inits = {t.name for t in model.graph.initializer}
    dtypes = {i.name: _elem_dtype(i) for i in model.graph.input if i.name not in inits}
    return _read_npy_args(specs, dtypes)


def _elem_dtype(vi: onnx.ValueInfoProto) -> np.dtype | None:
    elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
    return onnx.helper.tensor_dtype_to_np_dtype(elem) if elem else None


def _read_npy_args(specs: Sequence[str], dtypes: Mapping[str, np.dtype | None]) -> dict[str, np.ndarray]:
    """`name=file.npy` arguments as arrays of the input's dtype (`dtypes`: input -> dtype,
    None: not declared, taken as it is)."""
    names = list(dtypes)
    feeds = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            raise InputError(f"--input {spec!r}: expected NAME=FILE.npy")
        if name not in names:
            raise InputError(f"--input {name!r}: the model has no such input; its inputs are {names}")
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise InputError(f"--input {name}={path}: cannot read a .npy array: {e}") from None
        want = dtypes[name]
        feeds[name] = array if want is None else _as_input_dtype(name, path, array, np.dtype(want))
    return feeds


_SAME_KIND = {"f": "f", "i": "iu", "u": "u", "b": "b", "c": "fc"}


def _as_input_dtype(name: str, path: str, array: np.ndarray, want: np.dtype) -> np.ndarray:
    """The array cast to the input's dtype when of the same kind (float64 for float32); a
    different kind (int32 for float32) is an InputError naming the input and both dtypes."""
    if array.dtype == want:
        return array
    if array.dtype.kind in _SAME_KIND.get(want.kind, "") and np.can_cast(array.dtype, want, "same_kind"):
        return array.astype(want)
    raise InputError(f"--input {name}={path}: input '{name}' expects {want}, the file holds {array.dtype}")


def _symbolic_inputs(model: onnx.ModelProto) -> set[str]:
    return {
        vi.name
        for vi in model.graph.input
        if any(not d.HasField("dim_value") for d in vi.type.tensor_type.shape.dim)
    }


def _check_array_shapes(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> None:
    """An --input array may fill the symbolic dims of its input, not change the static ones."""
    inputs = {vi.name: vi for vi in model.graph.input}
    for name, dims in shapes.items():
        declared = shape_conflict(inputs[name], dims)
        if declared:
            raise InputError(
                f"--input {name}: the array has shape {list(dims)}, input '{name}' is {declared} in the "
                "model: only symbolic dims may differ (--override-shape forces it)"
            )


def random_inputs(g: Graph, given: Mapping[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random arrays for every graph input not in `given`."""
    rng = np.random.default_rng(seed)
    feeds = dict(given)
    for nid in g.graph_inputs():
        node = g.node(nid)
        if node.name in feeds:
            continue
        t = node.outputs[0]
        dt = np_dtype(t.dtype)
        if dt.kind == "f":
            feeds[node.name] = rng.standard_normal(t.shape).astype(dt)
        elif dt.kind == "b":
            feeds[node.name] = rng.random(t.shape) < 0.5
        else:
            feeds[node.name] = rng.integers(0, 10, t.shape).astype(dt)
    return feeds


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    try:
        import onnxruntime as ort
        from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument
    except ImportError:
        raise TirError("--compare-ort needs onnxruntime (pip install onnxruntime)") from None
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    try:
        return sess.run(None, {k: v for k, v in feeds.items() if k in names})
    except InvalidArgument as e:  # inputs that onnxruntime checks against the model (shapes)
        why = " ".join(str(e).split())
        raise InputError(f"--compare-ort: onnxruntime refuses the inputs: {why}") from None


def compare(ours: np.ndarray, theirs: np.ndarray) -> tuple[float, float]:
    """Max absolute error and max relative error (relative to max |theirs|, floored at 1e-12)."""
    a, b = ours.astype(np.float64), np.asarray(theirs).astype(np.float64)
    if a.shape != b.shape:
        return float("inf"), float("inf")
    if a.size == 0:
        return 0.0, 0.0
    err = float(np.max(np.abs(a - b)))
    return err, err / max(float(np.max(np.abs(b))), 1e-12)


def _print_output(name: str, out: np.ndarray, theirs: np.ndarray | None, save_dir: str | None) -> None:
    line = f"{name}: {out.dtype}{list(out.shape)}"
    if out.size and out.dtype.kind in "fiu":
        f = out.astype(np.float64)
        line += f" mean={f.mean():.6g} std={f.std():.6g} min={f.min():.6g} max={f.max():.6g}"
    if theirs is not None:
        abs_err, rel_err = compare(out, theirs)
        line += f"  vs onnxruntime: max_abs_err={abs_err:.3g} max_rel_err={rel_err:.3g}"
    print(line)
    if save_dir:
        Path(save_dir).mkdir(parents=True, exist_ok=True)
        np.save(Path(save_dir) / f"{name.replace('/', '_')}.npy", out)


def run_model_cli(
    path: str,
    inputs: Sequence[str] = (),
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    compare_ort: bool = False,
    seed: int = 0,
    save_dir: str | None = None,
    override_shapes: bool = False,
) -> int:
    model = load_model(path)
    given = read_input_args(inputs, model)
    # a given array fixes the shape of an input whose declared shape is symbolic
    shapes = {k: v.shape for k, v in given.items() if k in _symbolic_inputs(model)}
    if not override_shapes:
        _check_array_shapes(model, shapes)
    shapes |= dict(input_shapes or {})
    g = from_onnx(model, input_shapes=shapes, override_shapes=override_shapes)
    feeds = random_inputs(g, given, seed)
    outs = run_reference(g, feeds)
    ort_outs = run_onnxruntime(model, feeds) if compare_ort else None
    for i, ((name, _), out) in enumerate(zip(g.outputs, outs, strict=True)):
        _print_output(name, out, None if ort_outs is None else ort_outs[i], save_dir)
    return 0


def _load_artifact(folder: str, threads: int):
    from tensorir.pipeline import load_folder

    mod = load_folder(folder)  # the backend that wrote the folder picks how it runs here
    if threads:
        mod.set_num_threads(threads)
    return mod


def _artifact_feeds(mod, specs: Sequence[str], seed: int) -> dict[str, np.ndarray]:
    feeds = _read_npy_args(specs, {t["name"]: np_dtype(t["dtype"]) for t in mod.inputs})
    g = Graph("inputs")
    for t in mod.inputs:
        g.add_input(t["name"], TensorType(tuple(t["shape"]), t["dtype"]))
    return random_inputs(g, feeds, seed)


def print_profile(rows: list[dict], top: int = 0) -> None:
    total = sum(r["seconds"] for r in rows) or 1.0
    print(f"{'kernel':<32} {'op':<14} {'ms':>9} {'share':>7}")
    for r in sorted(rows, key=lambda r: -r["seconds"])[: top or None]:
        print(f"{r['symbol']:<32} {r['op']:<14} {r['seconds'] * 1e3:>9.3f} {r['seconds'] / total:>7.1%}")
    print(f"{'total':<47} {total * 1e3:>9.3f}")


def run_artifact_cli(
    folder: str,
    inputs: Sequence[str] = (),
    compare_ort: bool = False,
    seed: int = 0,
    save_dir: str | None = None,
    profile: bool = False,
    threads: int = 0,
    onnx_path: str | None = None,
) -> int:
    """`tir run DIR`: run a compiled folder (in process for the host, qemu for linux-arm64)."""
    mod = _load_artifact(folder, threads)
    if profile and not hasattr(mod, "profile"):
        raise TirError(
            f"{folder}: --profile is not available for {mod.manifest['target']} builds on this machine "
            "(they run under emulation; profile on the device, or run without --profile)"
        )
    feeds = _artifact_feeds(mod, inputs, seed)
    outs = mod.run(feeds)
    ort_outs = None
    if compare_ort:
        source = onnx_path or mod.manifest.get("source_model")
        if not source or not Path(source).exists():
            raise TirError(f"--compare-ort: give the ONNX model with --onnx (not found: {source})")
        ort_outs = run_onnxruntime(load_model(source), feeds)
    for i, (spec, out) in enumerate(zip(mod.outputs, outs, strict=True)):
        _print_output(spec["name"], out, None if ort_outs is None else ort_outs[i], save_dir)
    if profile:
        print_profile(mod.profile(feeds))
    return 0
