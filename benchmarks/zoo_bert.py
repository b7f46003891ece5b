"""A BERT encoder stack in the op layout of a HuggingFace ONNX export (opset 17).

The input is the embedding output `x` [1, seq, hidden] (no token ids, no embedding
tables), plus an optional int64 `attention_mask` [1, seq] (1 = attend, 0 = padding)
turned into an additive bias of -10000 on masked key positions, as BERT does.

Weights are seeded random, scaled like a trained model rather than like BERT's
N(0, 0.02) init: Q/K are large enough that softmax rows are peaked (scores with std
about 2.5), not uniform; V/output/FFN projections keep the residual stream O(1).
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from benchmarks.zoo_cnn import GraphBuilder


def _linear(b: GraphBuilder, x: str, fan_in: int, fan_out: int, name: str, gain: float = 1.0) -> str:
    """MatMul by a [in, out] weight, then Add the bias (two nodes, as exported)."""
    w = b.normal(f"{name}.weight", (fan_in, fan_out), gain / math.sqrt(fan_in))
    bias = b.normal(f"{name}.bias", (fan_out,), 0.02)
    y = b.node("MatMul", [x, w], f"{name}.matmul")
    return b.node("Add", [y, bias], f"{name}.add")


def _layer_norm(b: GraphBuilder, x: str, hidden: int, name: str, out: str | None = None) -> str:
    """LayerNormalization (opset 17) over the hidden axis, BERT's epsilon."""
    scale = b.normal(f"{name}.weight", (hidden,), 0.05, mean=1.0)
    bias = b.normal(f"{name}.bias", (hidden,), 0.05)
    return b.node("LayerNormalization", [x, scale, bias], name, out=out, axis=-1, epsilon=1e-12)


def _gelu(b: GraphBuilder, x: str, name: str, consts: dict[str, str]) -> str:
    """Exact (erf) GELU written out: x * 0.5 * (1 + Erf(x / sqrt(2)))."""
    h = b.node("Mul", [x, consts["half"]], f"{name}.mul_half")
    e = b.node("Div", [x, consts["sqrt2"]], f"{name}.div_sqrt2")
    e = b.node("Erf", [e], f"{name}.erf")
    e = b.node("Add", [e, consts["one"]], f"{name}.add_one")
    return b.node("Mul", [h, e], f"{name}.mul")


def _heads(b: GraphBuilder, x: str, name: str, perm: list[int], consts: dict[str, str]) -> str:
    """[1, seq, hidden] -> [1, seq, heads, head_dim] -> transposed by `perm`."""
    r = b.node("Reshape", [x, consts["split_heads"]], f"{name}.reshape")
    return b.node("Transpose", [r], f"{name}.transpose", perm=perm)


def _attention(
    b: GraphBuilder, x: str, hidden: int, head_dim: int, mask: str | None, name: str, consts: dict[str, str]
) -> str:
    q = _heads(b, _linear(b, x, hidden, hidden, f"{name}.query", 1.6), f"{name}.query", [0, 2, 1, 3], consts)
    k = _heads(b, _linear(b, x, hidden, hidden, f"{name}.key", 1.6), f"{name}.key", [0, 2, 3, 1], consts)
    v = _heads(b, _linear(b, x, hidden, hidden, f"{name}.value"), f"{name}.value", [0, 2, 1, 3], consts)
    s = b.node("MatMul", [q, k], f"{name}.scores")  # [1, heads, seq, seq] = Q K^T
    s = b.node("Div", [s, consts["sqrt_head_dim"]], f"{name}.scale")
    if mask is not None:
        s = b.node("Add", [s, mask], f"{name}.mask")
    p = b.node("Softmax", [s], f"{name}.softmax", axis=-1)
    c = b.node("MatMul", [p, v], f"{name}.context")  # [1, heads, seq, head_dim]
    c = b.node("Transpose", [c], f"{name}.context.transpose", perm=[0, 2, 1, 3])
    return b.node("Reshape", [c, consts["merge_heads"]], f"{name}.context.reshape")


def bert_encoder(
    layers: int = 2,
    hidden: int = 256,
    heads: int = 4,
    seq: int = 128,
    attention_mask: bool = True,
    seed: int = 0,
) -> onnx.ModelProto:
    """`layers` post-LN BERT encoder layers with an FFN of 4 * hidden."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    head_dim = hidden // heads
    b = GraphBuilder("bert_encoder", seed)
    consts = {
        "half": b.const("const.half", 0.5),
        "one": b.const("const.one", 1.0),
        "sqrt2": b.const("const.sqrt2", math.sqrt(2.0)),
        "sqrt_head_dim": b.const("const.sqrt_head_dim", math.sqrt(head_dim)),
        "split_heads": b.const("const.split_heads_shape", [1, seq, heads, head_dim], np.int64),
        "merge_heads": b.const("const.merge_heads_shape", [1, seq, hidden], np.int64),
    }
    x = b.input("x", [1, seq, hidden])
    mask = None
    if attention_mask:
        m = b.input("attention_mask", [1, seq], onnx.TensorProto.INT64)
        m = b.node("Unsqueeze", [m, b.const("mask.axes", [1, 2], np.int64)], "mask.unsqueeze")
        m = b.node("Cast", [m], "mask.cast", to=onnx.TensorProto.FLOAT)  # [1, 1, 1, seq]
        m = b.node("Sub", [consts["one"], m], "mask.invert")
        mask = b.node("Mul", [m, b.const("mask.neg_large", -10000.0)], "mask.bias")
    for i in range(layers):
        name = f"layer.{i}"
        a = _attention(b, x, hidden, head_dim, mask, f"{name}.attention", consts)
        a = _linear(b, a, hidden, hidden, f"{name}.attention.output.dense")
        a = b.node("Add", [a, x], f"{name}.attention.output.residual")
        x = _layer_norm(b, a, hidden, f"{name}.attention.output.LayerNorm")
        f = _linear(b, x, hidden, 4 * hidden, f"{name}.intermediate.dense")
        f = _gelu(b, f, f"{name}.intermediate.gelu", consts)
        f = _linear(b, f, 4 * hidden, hidden, f"{name}.output.dense")
        f = b.node("Add", [f, x], f"{name}.output.residual")
        out = "last_hidden_state" if i == layers - 1 else None
        x = _layer_norm(b, f, hidden, f"{name}.output.LayerNorm", out=out)
    b.output(x, [1, seq, hidden])
    mask_doc = " with an int64 attention_mask" if attention_mask else ""
    return b.model(
        f"BERT encoder: {layers} layers, hidden {hidden}, {heads} heads, seq {seq}{mask_doc}; "
        f"erf GELU written out; seeded random weights (seed {seed})"
    )
