"""Getting a float model ready for quantization: BatchNormalization folded into the Conv before it.

A BN scales each output channel by gamma / sqrt(var + eps) and removes its mean; quantizing the
Conv before that fold would measure its error against a signal the BN then takes away (the
channel means) and weights its channels as the BN does not (a channel of small variance that
the BN amplifies). Folded, the Conv's weights and output are those the network uses, so its
per-channel weight scales and its SQNR are the real ones (onnxruntime's quant_pre_process
folds BN the same way, through its graph optimizer).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import helper, numpy_helper

from tensorir.quantize.qdq import constants


def _bn_params(node: onnx.NodeProto, inits: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """(per-channel gain, offset) of an inference-mode BatchNormalization with constant parameters."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("training_mode", 0) or len(node.output) != 1 or len(node.input) != 5:
        return None
    params = [inits.get(t) for t in node.input[1:]]
    if any(p is None or p.ndim != 1 for p in params):
        return None
    scale, bias, mean, var = (p.astype(np.float64) for p in params)  # type: ignore[union-attr]
    gain = scale / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))
    return gain, bias - mean * gain


def fold_batchnorm(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with each BatchNormalization that alone reads a Conv's output (constant weights
    and parameters, initializers or Constant nodes as Paddle's exporter writes them) folded
    into that Conv."""
    g = model.graph
    inits = constants(model)
    readers = Counter(i for n in g.node for i in n.input)
    outputs = {o.name for o in g.output}
    producer = {t: n for n in g.node for t in n.output}
    new_inits, drop, renamed = [], set(), {}
    for bn in g.node:
        conv = producer.get(bn.input[0]) if bn.op_type == "BatchNormalization" else None
        if conv is None or conv.op_type != "Conv" or readers[bn.input[0]] != 1 or bn.input[0] in outputs:
            continue
        w = inits.get(conv.input[1])
        folded = _bn_params(bn, inits)
        if w is None or w.dtype != np.float32 or folded is None or folded[0].shape != (w.shape[0],):
            continue
        gain, offset = folded
        b = inits.get(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else np.zeros(w.shape[0])
        if b is None:
            continue
        key = conv.name or conv.output[0]
        w2 = (w * gain.reshape(-1, *[1] * (w.ndim - 1))).astype(np.float32)
        b2 = (b.astype(np.float64) * gain + offset).astype(np.float32)
        new_inits += [numpy_helper.from_array(w2, f"{key}_W_bn"), numpy_helper.from_array(b2, f"{key}_B_bn")]
        renamed[id(conv)] = ([conv.input[0], f"{key}_W_bn", f"{key}_B_bn"], bn.output[0])
        drop.add(id(bn))
    if not drop:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = []
    read = Counter(i for n in g.node if id(n) not in drop and id(n) not in renamed for i in n.input)
    for n, n_out in zip(g.node, out.graph.node, strict=True):
        unread = n.op_type == "Constant" and not read[n.output[0]] and n.output[0] not in outputs
        if id(n) in drop or unread:  # the BN, and the constants only the fold read
            continue
        if id(n) in renamed:
            inputs, y = renamed[id(n)]
            del n_out.input[:]
            n_out.input.extend(inputs)
            n_out.output[0] = y
        nodes.append(n_out)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    out.graph.initializer.extend(new_inits)
    used = {i for n in nodes for i in n.input}
    keep = [t for t in out.graph.initializer if t.name in used or t.name in outputs]
    del out.graph.initializer[:]
    out.graph.initializer.extend(keep)
    kept = {t.name for t in keep}
    stale = {t.name for t in g.initializer} - kept
    inputs = [vi for vi in out.graph.input if vi.name not in stale]
    del out.graph.input[:]
    out.graph.input.extend(inputs)
    del out.graph.value_info[:]
    return out
