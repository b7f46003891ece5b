"""`tir compile`: a model to a folder with the native library, header, manifest and weights."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorir.errors import TirError
from tensorir.frontend import check_model_path
from tensorir.pipeline import compile_model


def compile_cli(
    model: str,
    target: str,
    out: str,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    weights: str = "embedded",
    dump_dir: str | None = None,
    records: Any = None,
    override_shapes: bool = False,
    signature: str = "serving_default",
    precision: str = "fp32",
) -> int:
    """Compile `model` into the folder `out` and print what was written (the CLI has run
    check_paths first: before the records are read)."""
    if dump_dir:
        os.environ["TIR_DUMP_DIR"] = dump_dir
    t0 = time.perf_counter()
    build = compile_model(
        model,
        target,
        input_shapes,
        records=records,
        override_shapes=override_shapes,
        signature=signature,
        precision=precision,
    )
    build.manifest["source_model"] = str(Path(model).resolve())
    folder = build.write(out, weights)
    seconds = time.perf_counter() - t0
    m = build.manifest
    lib = folder / m.get("library", "libmodel.so")
    files = [f"{lib.name} ({lib.stat().st_size:,} B)", "model.h", "manifest.json"]
    files += ["weights.bin"] if weights == "external" else []
    print(f"compiled {model} for {m['target']} in {seconds:.1f} s -> {folder}/: {', '.join(files)}")
    kernels, ws, wb = len(build.kernels), m["workspace_bytes"], m["weights_bytes"]
    prepared = f" (+ {m['prepared_bytes']:,} B computed by tir_create)" if m.get("prepared_bytes") else ""
    print(f"  {kernels} kernels; workspace {ws:,} B; weights {wb:,} B{prepared}")
    if "precision" in m:
        p = m["precision"]
        kept = ", ".join(p["float32_ops"]) or "none"
        print(f"  fp16: weights float16, arithmetic {p['arithmetic']}; kept in float32: {kept}")
    if records is not None:
        print(
            f"  tuning records: {_records_device(records)}; {m['tuned_kernels']} kernels use one; "
            f"{m['untuned_workloads']} tunable workloads have none (defaults used)"
        )
        if "tuning_records_ignored" in m:
            print(f"  none used: {m['tuning_records_ignored']}")
    return 0


def check_paths(model: str, out: str) -> None:
    """Before any work: the model is a file and `out` can become the output folder."""
    check_model_path(model)
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise TirError(f"-o {out}: is a file, expected a folder (new or existing)")
    parent = next(p for p in path.absolute().parents if p.exists()) if not path.exists() else path
    if not parent.is_dir():
        raise TirError(f"-o {out}: {parent} is a file, so the folder cannot be created")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TirError(f"-o {out}: cannot write in {parent} (permission denied)")


def _records_device(records: Any) -> str:
    """Which device's records a compile used, and how that device was chosen."""
    device, how = getattr(records, "device", None), getattr(records, "how", "exact")
    if device is None:
        return "given as a mapping"
    if not how:
        return f"none fit device {getattr(records, 'wanted', device)}"
    return f"device {device}" + ("" if how == "exact" else f" ({how} of {records.wanted})")
