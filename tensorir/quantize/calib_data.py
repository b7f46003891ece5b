"""`--calib DIR`: the calibration samples of `tir quantize`.

A sample is one set of model inputs. For a model with one input, every `*.npy` file of the
folder is one sample of it. For several inputs, each file is named after the input it feeds,
`<input>*.npy` (an input name's '/' as '_'; the longest matching name wins), e.g. `ids_000.npy`
and `mask_000.npy`; the files of each input are paired in sorted name order, so every input
needs the same count. An array must have the input's static dims (symbolic dims are free, and
all samples must agree on them, since the model is compiled for one shape) and a dtype of the
input's kind (float64 is read as float32; an integer array for a float input is refused).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from tensorir.errors import InputError
from tensorir.tools.samples import file_stem


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The model's inputs that are not initializers."""
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def declared_dims(vi: onnx.ValueInfoProto) -> list[int | None]:
    """The input's dims, None for a symbolic one (a dim_param, no value, or a value <= 0)."""
    dims = vi.type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]


def _input_dtype(vi: onnx.ValueInfoProto) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))


def _files_by_input(folder: Path, names: Sequence[str]) -> dict[str, list[Path]]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".npy")
    if not files:
        raise InputError(f"--calib {folder}: no .npy files in it (expected one file per sample)")
    if len(names) == 1:
        return {names[0]: files}
    stems = sorted(((file_stem(n), n) for n in names), key=lambda s: -len(s[0]))
    by_input: dict[str, list[Path]] = {n: [] for n in names}
    for p in files:
        name = next((n for stem, n in stems if p.stem.startswith(stem)), None)
        if name is None:
            raise InputError(
                f"--calib {folder}: {p.name} names no model input; with several inputs a file is "
                f"<input>*.npy, the inputs are {list(names)}"
            )
        by_input[name].append(p)
    counts = {n: len(ps) for n, ps in by_input.items()}
    if len(set(counts.values())) != 1:
        raise InputError(f"--calib {folder}: every input needs the same number of samples, got {counts}")
    return by_input


def _read(path: Path, vi: onnx.ValueInfoProto, dims: Sequence[int | None]) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InputError(f"--calib {path}: cannot read a .npy array: {e}") from None
    want = _input_dtype(vi)
    if array.dtype != want:
        if array.dtype.kind != want.kind:
            raise InputError(
                f"--calib {path}: input '{vi.name}' expects {want}, the file holds {array.dtype}"
            )
        array = array.astype(want)
    if array.ndim != len(dims) or any(d not in (None, n) for d, n in zip(dims, array.shape, strict=True)):
        shown = ["?" if d is None else d for d in dims]
        raise InputError(f"--calib {path}: shape {list(array.shape)} does not fit input '{vi.name}' {shown}")
    return array


def read_calibration(
    folder: str | Path, model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None
) -> list[dict[str, np.ndarray]]:
    """The samples of `folder` as feeds {input: array}, checked against the model's inputs
    (`input_shapes`: --input-shape, fixing symbolic dims)."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"--calib {folder}: no such folder")
    inputs = graph_inputs(model)
    names = [vi.name for vi in inputs]
    unknown = sorted(set(input_shapes or {}) - set(names))
    if unknown:
        raise InputError(f"--input-shape names '{unknown[0]}', which is not a model input; inputs: {names}")
    by_input = _files_by_input(root, names)
    samples: list[dict[str, np.ndarray]] = [{} for _ in by_input[names[0]]]
    for vi in inputs:
        dims = declared_dims(vi)
        given = (input_shapes or {}).get(vi.name)
        if given is not None:
            dims = list(given)
        first = None
        for k, path in enumerate(by_input[vi.name]):
            array = _read(path, vi, dims)
            if first is None:
                first = array.shape
            elif array.shape != first:
                raise InputError(
                    f"--calib {path}: shape {list(array.shape)} differs from the first sample's "
                    f"{list(first)} (all samples of '{vi.name}' need one shape)"
                )
            samples[k][vi.name] = array
    return samples
