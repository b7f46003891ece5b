"""`--inputs DIR`: a folder of .npy input samples for `tir run` and `tir diff`.

The folder holds either one sample, a file `<input>.npy` per model input, or several samples,
one sub-folder each (taken in name order) holding a `<input>.npy` per model input. An input
name's '/' is '_' in its file name. Every sample gives every input; a file that names no input
is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tensorir.errors import InputError


def file_stem(name: str) -> str:
    """The file name (without .npy) of a tensor name, as --save and --inputs write it."""
    return name.replace("/", "_")


def sample_specs(folder: str, input_names: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The samples of `folder` as (label, ["input=path.npy", ...]); label "" for a folder that is
    itself one sample, else the sub-folder's name."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(f"--inputs {folder}: not a folder")
    files = sorted(p for p in root.iterdir() if p.is_file() and p.suffix == ".npy")
    subdirs = sorted(p for p in root.iterdir() if p.is_dir())
    if files and subdirs:
        raise InputError(
            f"--inputs {folder}: holds both .npy files and sub-folders; expected one sample "
            "(<input>.npy files) or one sub-folder per sample"
        )
    if not files and not subdirs:
        raise InputError(f"--inputs {folder}: no <input>.npy files and no sample sub-folders in it")
    if files:
        return [("", _specs(root, files, input_names))]
    samples = []
    for d in subdirs:
        npys = sorted(p for p in d.iterdir() if p.is_file() and p.suffix == ".npy")
        samples.append((d.name, _specs(d, npys, input_names)))
    return samples


def _specs(folder: Path, files: Sequence[Path], input_names: Sequence[str]) -> list[str]:
    by_stem = {file_stem(n): n for n in input_names}
    unknown = [p.name for p in files if p.stem not in by_stem]
    if unknown:
        raise InputError(
            f"--inputs {folder}: {unknown[0]} names no model input; the inputs are {list(input_names)}"
        )
    given = {p.stem for p in files}
    missing = [n for n in input_names if file_stem(n) not in given]
    if missing:
        raise InputError(f"--inputs {folder}: no {file_stem(missing[0])}.npy for input '{missing[0]}'")
    return [f"{by_stem[p.stem]}={p}" for p in files]
