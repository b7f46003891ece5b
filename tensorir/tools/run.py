"""`tir run`: execute a model on given or seeded random inputs, optionally against onnxruntime.

A .onnx model is compiled for `--target` and run (what the user ships), or run by the numpy
reference interpreter (`--backend ref`); a compiled folder is run as it is. `--compare-ort`
prints each output's figures against onnxruntime (tensorir/tools/compare.py) and makes the
exit status 1 when one misses the tolerance. TensorFlow and TFLite models are compared with
TensorFlow and tf.lite.Interpreter instead, run in the TensorFlow child process
(frontend/tf_child.py)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tensorir.dtypes import is_float
from tensorir.errors import InputError, TirError
from tensorir.frontend.onnx import from_onnx, load_model, shape_conflict
from tensorir.frontend.tf_child import TFReference
from tensorir.graph.graph import Graph
from tensorir.graph.types import TensorType, np_dtype
from tensorir.runtime.lengths import model_output_names, trim_graph_outputs
from tensorir.runtime.reference import run_reference
from tensorir.tools.compare import DEFAULT, Tolerance, figures
from tensorir.tools.ort_caveats import int8_caveat
from tensorir.tools.ort_io import run_session
from tensorir.tools.samples import file_stem, sample_specs


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
        if dt.kind == "f" or is_float(t.dtype):  # bfloat16, float8 too
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
        return run_session(sess, {k: v for k, v in feeds.items() if k in names})
    except InvalidArgument as e:  # inputs that onnxruntime checks against the model (shapes)
        why = " ".join(str(e).split())
        raise InputError(f"--compare-ort: onnxruntime refuses the inputs: {why}") from None


Sample = tuple[str, dict[str, np.ndarray]]  # (label: "" or the --inputs sub-folder, feeds)


def given_samples(
    specs: Sequence[str], inputs_dir: str | None, dtypes: Mapping[str, np.dtype | None]
) -> list[Sample]:
    """The arrays the user gave: `--input NAME=FILE` (one sample) or `--inputs DIR` (one or more;
    tensorir/tools/samples.py), as the inputs' dtypes. No arrays at all: one empty sample."""
    if inputs_dir is None:
        return [("", _read_npy_args(specs, dtypes))]
    if specs:
        raise InputError("--input and --inputs: give the arrays one way, not both")
    return [(label, _read_npy_args(s, dtypes)) for label, s in sample_specs(inputs_dir, list(dtypes))]


def _same_shapes(samples: Sequence[Sample]) -> None:
    first = {k: v.shape for k, v in samples[0][1].items()}
    for label, feeds in samples[1:]:
        for k, v in feeds.items():
            if v.shape != first[k]:
                raise InputError(
                    f"--inputs: sample '{label}' gives input '{k}' shape {list(v.shape)}, sample "
                    f"'{samples[0][0]}' {list(first[k])}: every sample must have the same shapes"
                )


def _save(save_dir: str, label: str, name: str, out: np.ndarray) -> None:
    folder = Path(save_dir) / label if label else Path(save_dir)
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / f"{file_stem(name)}.npy", out)


def _describe(name: str, out: np.ndarray) -> str:
    line = f"{name}: {out.dtype}{list(out.shape)}"
    if out.size and out.dtype.kind in "fiu":
        f = out.astype(np.float64)
        line += f" mean={f.mean():.6g} std={f.std():.6g} min={f.min():.6g} max={f.max():.6g}"
    return line


Reference = onnx.ModelProto | TFReference


def _reference_outputs(ref: Reference | None, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray] | None:
    """onnxruntime's outputs for an ONNX model, or TensorFlow's / the TFLite interpreter's."""
    if ref is None:
        return None
    return run_onnxruntime(ref, feeds) if isinstance(ref, onnx.ModelProto) else ref(feeds)


def _reference_name(ref: Reference | None) -> str:
    return "onnxruntime" if isinstance(ref, onnx.ModelProto) else getattr(ref, "label", "")


def report(
    names: Sequence[str],
    run: Callable[[Mapping[str, np.ndarray]], list[np.ndarray]],
    samples: Sequence[Sample],
    ort_model: Reference | None,
    tolerance: Tolerance,
    save_dir: str | None,
) -> int:
    """Run every sample, print each output (with its figures against onnxruntime when
    `ort_model` is given); 1 when some output misses `tolerance`, else 0."""
    failed: list[str] = []
    for label, feeds in samples:
        if label:
            print(f"sample {label}:")
        outs = run(feeds)
        theirs = _reference_outputs(ort_model, feeds)
        for i, (name, out) in enumerate(zip(names, outs, strict=True)):
            line = _describe(name, out)
            if theirs is not None:
                figs = figures(out, theirs[i])
                ok = tolerance.passes(figs)
                line += f"  vs {_reference_name(ort_model)}: {figs.text()} {'ok' if ok else 'FAIL'}"
                failed += [] if ok else [f"{label}/{name}" if label else name]
            print(("  " if label else "") + line)
            if save_dir:
                _save(save_dir, label, name, out)
    if ort_model is None:
        return 0
    total = len(names) * len(samples)
    if failed:
        print(f"compare-ort: FAIL: {len(failed)} of {total} outputs outside {tolerance.text()}: {failed}")
        note = int8_caveat(ort_model) if isinstance(ort_model, onnx.ModelProto) else None
        if note:
            print(note)
        return 1
    print(f"compare-ort: ok: {total} outputs within {tolerance.text()}")
    return 0


def model_samples(
    model: onnx.ModelProto, inputs: Sequence[str], inputs_dir: str | None, override_shapes: bool
) -> tuple[list[Sample], dict[str, tuple[int, ...]]]:
    """The given samples of an .onnx model and the input shapes they fix (symbolic dims)."""
    inits = {t.name for t in model.graph.initializer}
    dtypes = {i.name: _elem_dtype(i) for i in model.graph.input if i.name not in inits}
    samples = given_samples(inputs, inputs_dir, dtypes)
    _same_shapes(samples)
    # a given array fixes the shape of an input whose declared shape is symbolic
    shapes = {k: v.shape for k, v in samples[0][1].items() if k in _symbolic_inputs(model)}
    if not override_shapes:
        _check_array_shapes(model, shapes)
    return samples, shapes


def run_model_cli(
    path: str,
    inputs: Sequence[str] = (),
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    compare_ort: bool = False,
    seed: int = 0,
    save_dir: str | None = None,
    override_shapes: bool = False,
    inputs_dir: str | None = None,
    backend: str = "compiled",
    target: str = "host",
    records: Any = None,
    tolerance: Tolerance = DEFAULT,
    profile: bool = False,
    threads: int = 0,
) -> int:
    """`tir run model.onnx`: compiled for `target` and run (backend "compiled"), or run by the
    numpy reference interpreter (backend "ref")."""
    model = load_model(path)
    samples, shapes = model_samples(model, inputs, inputs_dir, override_shapes)
    shapes |= dict(input_shapes or {})
    ort_model = model if compare_ort else None
    if backend == "ref":
        if profile:
            raise TirError("--profile times compiled kernels: it needs --backend compiled")
        g = from_onnx(model, input_shapes=shapes, override_shapes=override_shapes)
        feeds = [(label, random_inputs(g, given, seed)) for label, given in samples]
        return report(*_reference_runner(g), feeds, ort_model, tolerance, save_dir)
    from tensorir.pipeline import compile_model

    build = compile_model(model, target, shapes, records=records, override_shapes=override_shapes)
    return _run_build(path, build, samples, seed, ort_model, tolerance, save_dir, profile, threads)


def _reference_runner(g: Graph) -> tuple[list[str], Callable[[Mapping[str, np.ndarray]], list[np.ndarray]]]:
    """The model's output names and a function running the reference interpreter on feeds,
    outputs with a data-dependent length cut to it (runtime/lengths.py)."""
    names = [n for n, _ in g.outputs]

    def run(feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return trim_graph_outputs(names, g.output_lengths, run_reference(g, feeds))[1]

    return model_output_names(names, g.output_lengths), run


def _run_build(path: str, build: Any, *run_args: Any) -> int:
    """A model compiled on the fly: written to a temporary folder, loaded, run (_run_module)."""
    from tensorir.pipeline import load_folder

    with tempfile.TemporaryDirectory(prefix="tir-run-") as tmp:
        mod = load_folder(build.write(tmp))
        print(f"compiled {path} for {mod.manifest['target']}: {len(build.kernels)} kernels")
        return _run_module(path, mod, *run_args)


def _run_module(
    where: str,
    mod: Any,
    samples: Sequence[Sample],
    seed: int,
    ort_model: Reference | None,
    tolerance: Tolerance,
    save_dir: str | None,
    profile: bool,
    threads: int,
) -> int:
    if profile and not hasattr(mod, "profile"):  # before anything runs
        raise TirError(
            f"{where}: --profile is not available for {mod.manifest['target']} builds on this machine "
            "(they run under emulation; profile on the device, or run without --profile)"
        )
    if threads:
        mod.set_num_threads(threads)
    feeds = [(label, module_feeds(mod, given, seed)) for label, given in samples]
    names = [t["name"] for t in mod.outputs]
    rc = report(names, mod.run, feeds, ort_model, tolerance, save_dir)
    if profile:
        print_profile(mod.profile(feeds[0][1]))
    return rc


def module_feeds(mod: Any, given: Mapping[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """`given` and seeded random arrays for the other inputs of a compiled module."""
    g = Graph("inputs")
    for t in mod.inputs:
        g.add_input(t["name"], TensorType(tuple(t["shape"]), t["dtype"]))
    return random_inputs(g, given, seed)


def print_profile(rows: list[dict], top: int = 0) -> None:
    total = sum(r["seconds"] for r in rows) or 1.0
    print(f"{'kernel':<32} {'op':<14} {'ms':>9} {'share':>7}  node")
    for r in sorted(rows, key=lambda r: -r["seconds"])[: top or None]:
        ms, share = r["seconds"] * 1e3, r["seconds"] / total
        print(f"{r['symbol']:<32} {r['op']:<14} {ms:>9.3f} {share:>7.1%}  {r.get('node', '')}")
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
    inputs_dir: str | None = None,
    tolerance: Tolerance = DEFAULT,
) -> int:
    """`tir run DIR`: run a compiled folder (in process for the host, qemu for linux-arm64)."""
    from tensorir.pipeline import load_folder

    mod = load_folder(folder)  # the backend that wrote the folder picks how it runs here
    samples = given_samples(inputs, inputs_dir, {t["name"]: np_dtype(t["dtype"]) for t in mod.inputs})
    if not compare_ort:
        return _run_module(folder, mod, samples, seed, None, tolerance, save_dir, profile, threads)
    source = onnx_path or mod.manifest.get("source_model")
    if not source or not Path(source).exists():
        raise TirError(f"--compare-ort: give the ONNX model with --onnx (not found: {source})")
    with _reference(source, [t["name"] for t in mod.outputs]) as ref:
        return _run_module(folder, mod, samples, seed, ref, tolerance, save_dir, profile, threads)


@contextlib.contextmanager
def _reference(source: str, names: Sequence[str], signature: str = "serving_default") -> Iterator[Reference]:
    """The reference runtime of a model file: onnxruntime for ONNX, TensorFlow or the TFLite
    interpreter (in the TensorFlow child process, closed afterwards) for the other formats."""
    from tensorir.frontend import model_format

    if model_format(source) == "onnx":
        yield load_model(source)
        return
    with TFReference(source, signature, names) as ref:
        yield ref


def run_graph_model_cli(
    path: str,
    inputs: Sequence[str] = (),
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    compare_ort: bool = False,
    seed: int = 0,
    save_dir: str | None = None,
    override_shapes: bool = False,
    inputs_dir: str | None = None,
    backend: str = "compiled",
    target: str = "host",
    records: Any = None,
    tolerance: Tolerance = DEFAULT,
    profile: bool = False,
    threads: int = 0,
    signature: str = "serving_default",
) -> int:
    """`tir run` for a model that is not ONNX (TensorFlow, TFLite): imported by its frontend,
    compiled for `target` (or run by the reference interpreter); --compare-ort compares it with
    TensorFlow's own outputs (tf.lite.Interpreter for a .tflite)."""
    from tensorir.frontend import load_graph_any, model_bytes
    from tensorir.pipeline import compile_graph
    from tensorir.target import get_target

    compile_for = get_target(target) if backend != "ref" else None  # a bad target before the import
    g = load_graph_any(path, input_shapes, signature=signature, override_shapes=override_shapes)
    samples = given_samples(inputs, inputs_dir, {n: np_dtype(g.type_of(v).dtype) for n, v in _inputs(g)})
    names, ref_run = _reference_runner(g)
    with _reference(path, names, signature) if compare_ort else contextlib.nullcontext() as ref:
        if backend == "ref":
            feeds = [(label, random_inputs(g, given, seed)) for label, given in samples]
            return report(names, ref_run, feeds, ref, tolerance, save_dir)
        raw = model_bytes(path)
        build = compile_graph(g, compile_for or target, records, raw=raw, input_shapes=input_shapes)
        return _run_build(path, build, samples, seed, ref, tolerance, save_dir, profile, threads)


def _inputs(g: Graph) -> list[tuple[str, Any]]:
    from tensorir.graph.graph import Value

    return [(g.node(n).name, Value(n)) for n in g.graph_inputs()]
