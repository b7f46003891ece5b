"""image2d_t storage of read-only kernel inputs (loop-IR Buffer scope "image") in OpenCL C.

Mobile GPUs (Adreno, Mali) read through the texture path fastest. A buffer of scope "image"
(`Schedule.set_storage(w, "image")`) is the row-major tensor viewed as `height = shape[0]`
rows of `width = size / 4 / height` RGBA texels: element i is lane i % 4 of texel
(x, y) = ((i // 4) % width, (i // 4) // width). A packed conv weight (M/4, C/4, KH, KW, 4, 4)
is then a C*KH*KW x M/4 texture whose texel holds the 4 output channels of one (input
channel, tap): the float4 weight load of the conv's inner loop is one texel read.

    __kernel void k(__read_only image2d_t w, ...) {
      const sampler_t tir_sampler = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;
      ... read_imagef(w, tir_sampler, (int2)(x, y)) ...      // read_imageh when computing in half

A scalar load is a texel read and a component select (`.s2`, or `tir_texel_lane` for an index
not known at compile time); other vector loads are lane by lane. Stores are errors (images
are read-only here). Channel type: CL_FLOAT for float32, CL_HALF_FLOAT for float16.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tensorir.codegen.opencl_c import lane_expr
from tensorir.devices import DeviceProfile
from tensorir.errors import TirError
from tensorir.loop import ir
from tensorir.loop.simplify import simplify
from tensorir.plan import ImageParam

SAMPLER = "tir_sampler"
SAMPLER_DECL = (
    f"const sampler_t {SAMPLER} = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;"
)
_CHANNEL = {"float32": "float", "float16": "half"}
_LANE = (
    "static inline {T} tir_texel_lane_{T}({T}4 v, int k) "
    "{{ return k == 0 ? v.s0 : k == 1 ? v.s1 : k == 2 ? v.s2 : v.s3; }}"
)


def image_extent(shape: Sequence[int]) -> tuple[int, int]:
    """(width, height) in texels of a tensor stored as an image (module docstring)."""
    size = 1
    for d in shape:
        size *= d
    if len(shape) < 2 or shape[0] < 1 or (size // shape[0]) % 4:
        raise TirError(f"a tensor of shape {list(shape)} has no rows of 4-lane texels")
    return size // shape[0] // 4, shape[0]


def image_fits(shape: Sequence[int], dtype: str, profile: DeviceProfile | None) -> bool:
    """`profile` has images and a tensor of this shape and dtype fits its image2d limits."""
    try:
        width, height = image_extent(shape)
    except TirError:
        return False
    if profile is None or not profile.image_support or dtype not in _CHANNEL:
        return False
    return 1 <= width <= profile.image2d_max_width and 1 <= height <= profile.image2d_max_height


def image_param(buf: ir.Buffer, index: int, profile: DeviceProfile | None) -> ImageParam:
    """The plan's description of parameter `buf` (checked against `profile` when given)."""
    if buf.dtype not in _CHANNEL:
        raise TirError(f"image {buf.name}: dtype {buf.dtype} has no image channel type (float32, float16)")
    width, height = image_extent(buf.shape)
    if profile is not None and not image_fits(buf.shape, buf.dtype, profile):
        raise TirError(
            f"image {buf.name} ({width} x {height} texels) does not fit {profile.name} "
            f"(image support {profile.image_support}, max "
            f"{profile.image2d_max_width} x {profile.image2d_max_height})"
        )
    return ImageParam(index, width, height, _CHANNEL[buf.dtype])


def _const(e: ir.Expr) -> int | None:
    return int(e.value) if isinstance(e, ir.Const) else None


def _aligned(element: ir.Expr) -> bool:
    """`element` is provably the first lane of a texel."""
    return _const(simplify(ir.BinOp("%", element, ir.Const(4, element.dtype)))) == 0


class ImageReads:
    """Renders loads from image parameters for a renderer: `expr(e) -> text` renders an
    int32 index expression, `helper(name, source)` adds a helper function once."""

    def __init__(
        self, expr: Callable[[ir.Expr], str], helper: Callable[[str, str], None], half: bool
    ) -> None:
        self.expr, self.helper, self.half = expr, helper, half

    def ctype(self, buf: ir.Buffer) -> str:
        """The element type a read of `buf` gives: half with read_imageh, else float."""
        return "half" if self.half and buf.dtype == "float16" else "float"

    def texel(self, name: str, buf: ir.Buffer, element: ir.Expr) -> str:
        """The texel holding element index `element` of `buf` (a 4-vector)."""
        width, _ = image_extent(buf.shape)
        t = ir.BinOp("//", element, ir.Const(4, element.dtype))
        x = simplify(ir.Cast("int32", ir.BinOp("%", t, ir.Const(width, element.dtype))))
        y = simplify(ir.Cast("int32", ir.BinOp("//", t, ir.Const(width, element.dtype))))
        fn = "read_imageh" if self.ctype(buf) == "half" else "read_imagef"
        return f"{fn}({name}, {SAMPLER}, (int2)({self.expr(x)}, {self.expr(y)}))"

    def scalar(self, name: str, buf: ir.Buffer, index: ir.Expr) -> str:
        """Element `index`: a texel read and a component select."""
        lane = simplify(ir.BinOp("%", index, ir.Const(4, index.dtype)))
        texel = self.texel(name, buf, index)
        k = _const(lane)
        if k is not None:
            return f"{texel}.s{k}"
        ct = self.ctype(buf)
        self.helper(f"tir_texel_lane_{ct}", _LANE.format(T=ct))
        return f"tir_texel_lane_{ct}({texel}, (int)({self.expr(lane)}))"

    def load(self, name: str, buf: ir.Buffer, index: ir.Expr) -> str:
        """`buf[index]` (a scalar or vector index) as OpenCL C."""
        n = index.lanes
        if n == 1:
            return self.scalar(name, buf, index)
        if isinstance(index, ir.Ramp) and n == 4 and _const(index.stride) == 1 and _aligned(index.base):
            return self.texel(name, buf, index.base)
        lanes = [self.scalar(name, buf, lane_expr(index, k)) for k in range(n)]
        return f"(({self.ctype(buf)}{n})({', '.join(lanes)}))"
