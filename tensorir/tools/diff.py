"""`tir diff`: find the first layer where the compiled model departs from onnxruntime.

The model's graph passes are run for the target to learn its kernels (the fusion groups); the
output of the model node each kernel ends with is made a graph output (`--every-node`: every
node's output, which also ends the fused groups there), and that model is compiled for the
target with the same tuning records and layout block. Each exposed tensor is compared with
onnxruntime running the same model (the numpy reference interpreter when onnxruntime cannot
run it), and a table gives per model node: its op, the kernel that computes it (symbol, fused
body, algorithm, tuning record), the figures (tensorir/tools/compare.py) and the first node
outside the tolerance. A kernel's error shows in its node first and carries on downstream, so
the first failing node names the kernel to look at.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tensorir.compiler import Build, lookup_config, model_key
from tensorir.errors import InputError
from tensorir.frontend.onnx import from_onnx, load_model
from tensorir.graph.graph import Value
from tensorir.passes.memory_plan import storage_root
from tensorir.pipeline import compile_model, load_folder, optimize
from tensorir.runtime.reference import run_reference
from tensorir.tools.compare import DEFAULT, Figures, Tolerance, figures
from tensorir.tools.run import model_samples, module_feeds, run_onnxruntime


@dataclass
class Row:
    node: onnx.NodeProto
    tensor: str
    kernel: dict[str, Any] | None  # its manifest entry
    figs: Figures
    ok: bool


def _node_key(n: onnx.NodeProto) -> str:
    return n.name or n.output[0]  # the name the importer gives the node's graph ops


def kernel_node_names(model: onnx.ModelProto, shapes: Mapping, target: str, block: int | None) -> set[str]:
    """Names of the graph nodes that become kernels when `model` is compiled for `target`
    (each fused group carries the name of its last node)."""
    g = optimize(from_onnx(model, input_shapes=shapes), target=target, layout_block=block)
    return {g.node(n).name for n in g.op_nodes() if storage_root(g, Value(n)) == Value(n)}


def exposed_model(model: onnx.ModelProto, keys: set[str] | None) -> tuple[onnx.ModelProto, list[str]]:
    """`model` with the outputs of the nodes named in `keys` (None: every node) added as graph
    outputs; also the exposed tensors (old outputs included) in node order."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    have = {o.name for o in out.graph.output}
    inferred = _value_infos(model)
    tensors = []
    for n in out.graph.node:
        if keys is not None and _node_key(n) not in keys:
            continue
        for t in n.output:
            if t and t not in have:
                out.graph.output.append(inferred.get(t) or onnx.helper.ValueInfoProto(name=t))
                have.add(t)
            if t:
                tensors.append(t)
    return out, tensors


def _value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        return {}
    return {vi.name: vi for vi in inferred.graph.value_info}


def _kernel_of(build: Build, v: Value) -> dict[str, Any] | None:
    """The manifest entry of the kernel that computes `v` (behind views and the layout
    transforms inserted to hand a packed tensor out in NCHW)."""
    g = build.graph
    while True:
        nid = storage_root(g, v).node
        node = g.node(nid)
        if node.op in ("input", "constant"):
            return None
        if node.op != "layout_transform" or nid not in build.nodes:
            break
        v = g.inputs_of(nid)[0]
    return build.manifest["kernels"][build.nodes.index(nid)] if nid in build.nodes else None


def _reference(
    model: onnx.ModelProto, shapes: Mapping, feeds: Mapping[str, np.ndarray]
) -> tuple[str, list[np.ndarray]]:
    try:
        return "onnxruntime", run_onnxruntime(model, feeds)
    except InputError:
        raise
    except Exception as e:
        why = " ".join(str(e).split())[:120]
        g = from_onnx(model, input_shapes=shapes)
        return f"numpy reference (onnxruntime cannot run it: {why})", run_reference(g, feeds)


def diff_model(
    path: str,
    target: str = "host",
    records: Any = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    inputs: Sequence[str] = (),
    seed: int = 0,
    tolerance: Tolerance = DEFAULT,
    every_node: bool = False,
) -> tuple[list[Row], str, Build]:
    """Compile `path` for `target` with its intermediate tensors exposed, run it and the
    reference on the same inputs; one Row per exposed tensor, in model order."""
    model = load_model(path)
    samples, shapes = model_samples(model, inputs, None, False)
    shapes = {**shapes, **dict(input_shapes or {})}
    raw = Path(path).read_bytes()
    block = (lookup_config(records, model_key(raw, shapes)) or {}).get("layout_block")
    keys = None if every_node else kernel_node_names(model, shapes, target, block)
    exposed, tensors = exposed_model(model, keys)
    build = compile_model(exposed, target, shapes, records=records, layout_block=block)
    with tempfile.TemporaryDirectory(prefix="tir-diff-") as tmp:
        mod = load_folder(build.write(tmp))
        feeds = module_feeds(mod, samples[0][1], seed)
        ours = dict(zip([t["name"] for t in mod.outputs], mod.run(feeds), strict=True))
    source, theirs = _reference(exposed, shapes, feeds)
    theirs_by = dict(zip([o.name for o in exposed.graph.output], theirs, strict=True))
    values = dict(build.graph.outputs)
    producer = {t: n for n in exposed.graph.node for t in n.output if t}
    rows = []
    for t in tensors:
        figs = figures(ours[t], theirs_by[t])
        rows.append(Row(producer[t], t, _kernel_of(build, values[t]), figs, tolerance.passes(figs)))
    return rows, source, build


def _record_text(k: dict[str, Any] | None) -> str:
    if k is None:
        return "-"
    if "config" not in k:
        return "default"
    text = json.dumps(k["config"], separators=(",", ":"), sort_keys=True)
    return text if len(text) <= 40 else text[:37] + "..."


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def format_table(rows: Sequence[Row]) -> str:
    head = (
        f"{'node':<24} {'op':<18} {'kernel':<24} {'fused body':<28} {'algorithm':<12} "
        f"{'record':<40} {'max_abs':>9} {'max_rel':>9} {'cosine':>10} {'sqnr_dB':>8}"
    )
    lines = [head]
    first = next((k for k, r in enumerate(rows) if not r.ok), None)
    for k, r in enumerate(rows):
        kern = r.kernel or {}
        symbol = kern.get("symbol", "-") + (f"@{kern['device']}" if "device" in kern else "")
        body = kern.get("workload", "-").split(" ")[0]
        f = r.figs
        cos = "nan" if np.isnan(f.cosine) else f"{f.cosine:.7f}"
        mark = "ok" if r.ok else ("FAIL <- first" if k == first else "FAIL")
        lines.append(
            f"{_cut(_node_key(r.node), 24):<24} {_cut(r.node.op_type, 18):<18} {_cut(symbol, 24):<24} "
            f"{_cut(body, 28):<28} {_cut(kern.get('algorithm', '-'), 12):<12} {_record_text(r.kernel):<40} "
            f"{f.max_abs:>9.3g} {f.max_rel:>9.3g} {cos:>10} {f.sqnr_db:>8.1f}  {mark}"
        )
    return "\n".join(lines)


def diff_cli(
    path: str,
    target: str = "host",
    records: Any = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    inputs: Sequence[str] = (),
    seed: int = 0,
    tolerance: Tolerance = DEFAULT,
    every_node: bool = False,
) -> int:
    """Print the table; 1 when some node is outside the tolerance, else 0."""
    rows, source, build = diff_model(path, target, records, input_shapes, inputs, seed, tolerance, every_node)
    where = "every node" if every_node else "the end of every kernel"
    print(
        f"tir diff {path} for {build.manifest['target']}: {len(rows)} tensors at {where}, "
        f"{len(build.kernels)} kernels, against {source}; tolerance {tolerance.text()}"
    )
    print(format_table(rows))
    bad = [r for r in rows if not r.ok]
    if not bad:
        print(f"all {len(rows)} tensors within tolerance")
        return 0
    r = bad[0]
    kern = r.kernel or {}
    print(
        f"first node outside tolerance: '{_node_key(r.node)}' ({r.node.op_type}), tensor '{r.tensor}', "
        f"kernel {kern.get('symbol', '-')} ({kern.get('workload', '-').split(' ')[0]}, "
        f"algorithm {kern.get('algorithm', '-')}, record {_record_text(r.kernel)}): {r.figs.text()}; "
        f"{len(bad)} of {len(rows)} tensors outside"
    )
    return 1
