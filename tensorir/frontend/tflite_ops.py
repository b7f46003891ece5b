"""Converters from TFLite builtin ops to graph ops (see tflite_context.py for the NHWC/NCHW scheme).

A converter reads its op's inputs from the context (`ctx.nhwc(i)` in TFLite's order,
`ctx.nchw(i)` for the NCHW twin of a 4-D tensor) and sets each output with `ctx.set_nhwc` or
`ctx.set_nchw`. Convolutions and pools always compute in NCHW; layout-neutral ops (elementwise,
concat, pad, mean, softmax, resize, strided slice) follow their input: NCHW when it has a
twin, so no transpose separates two convolutions. Shapes and weights are static: shape
inputs are read at import with `ctx.const_input`.

This module is the registry: `CONVERTERS` maps a builtin code to its converter. The registry
and the helpers converters share live in tflite_ops_common.py; the converters, by family,
register themselves with its `converter` decorator when their module is imported, and this
module imports every family (the importer reads `CONVERTERS` from here):

    tflite_ops_nn.py            convolutions, fully connected, pooling, reductions, softmax
    tflite_ops_elementwise.py   activations, binary arithmetic, (de)quantize
    tflite_ops_math.py          square, log, rsqrt, squared difference, comparisons, select
    tflite_ops_tensor.py        concat, reshape, squeeze, transpose, pad, resize, slice, tile, ...
    tflite_ops_matmul.py        batch matmul, gather
"""

from __future__ import annotations

from tensorir.frontend import (  # noqa: F401  (importing a family registers its converters)
    tflite_ops_elementwise,
    tflite_ops_math,
    tflite_ops_matmul,
    tflite_ops_nn,
    tflite_ops_tensor,
)
from tensorir.frontend.tflite_ops_common import (
    CONVERTERS,
    Converter,
    activation,
    converter,
    elementwise_operands,
    first_operand,
    follows_nchw,
    operand_nchw,
    set_output,
)
from tensorir.frontend.tflite_ops_elementwise import dequantize, leaky_relu, quantize
from tensorir.frontend.tflite_ops_nn import (
    conv_2d,
    depthwise_conv_2d,
    fully_connected,
    same_pads,
    softmax,
    transpose_conv,
    transpose_conv_pads,
)
from tensorir.frontend.tflite_ops_tensor import (
    concatenation,
    expand_dims,
    pack,
    pad,
    reshape,
    resize,
    shape_,
    squeeze,
    strided_slice,
    tile,
    transpose,
)

# what this module offered before the converters moved into their families (tflite.py and the
# tflite_ops_* modules imported these from here)
__all__ = [
    "CONVERTERS",
    "Converter",
    "activation",
    "concatenation",
    "conv_2d",
    "converter",
    "depthwise_conv_2d",
    "dequantize",
    "elementwise_operands",
    "expand_dims",
    "first_operand",
    "follows_nchw",
    "fully_connected",
    "leaky_relu",
    "operand_nchw",
    "pack",
    "pad",
    "quantize",
    "reshape",
    "resize",
    "same_pads",
    "set_output",
    "shape_",
    "softmax",
    "squeeze",
    "strided_slice",
    "tile",
    "transpose",
    "transpose_conv",
    "transpose_conv_pads",
]
