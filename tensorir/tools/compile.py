"""`tir compile`: a model to a folder with the native library, header, manifest and weights."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorir.pipeline import compile_model


def compile_cli(
    model: str,
    target: str,
    out: str,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    weights: str = "embedded",
    dump_dir: str | None = None,
    records: Any = None,
) -> int:
    if dump_dir:
        os.environ["TIR_DUMP_DIR"] = dump_dir
    t0 = time.perf_counter()
    build = compile_model(model, target, input_shapes, records=records)
    build.manifest["source_model"] = str(Path(model).resolve())
    folder = build.write(out, weights)
    seconds = time.perf_counter() - t0
    m = build.manifest
    lib = folder / m.get("library", "libmodel.so")
    files = [f"{lib.name} ({lib.stat().st_size:,} B)", "model.h", "manifest.json"]
    files += ["weights.bin"] if weights == "external" else []
    print(f"compiled {model} for {m['target']} in {seconds:.1f} s -> {folder}/: {', '.join(files)}")
    kernels, ws, wb = len(build.kernels), m["workspace_bytes"], m["weights_bytes"]
    print(f"  {kernels} kernels; workspace {ws:,} B; weights {wb:,} B")
    if records is not None:
        print(
            f"  tuning records: {_records_device(records)}; {m['tuned_kernels']} kernels use one; "
            f"{m['untuned_workloads']} tunable workloads have none (defaults used)"
        )
    return 0


def _records_device(records: Any) -> str:
    """Which device's records a compile used, and how that device was chosen."""
    device, how = getattr(records, "device", None), getattr(records, "how", "exact")
    if device is None:
        return "given as a mapping"
    if not how:
        return f"none fit device {getattr(records, 'wanted', device)}"
    return f"device {device}" + ("" if how == "exact" else f" ({how} of {records.wanted})")
