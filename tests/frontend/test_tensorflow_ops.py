"""Per-op tests of the TensorFlow converters: small tf.functions frozen to GraphDef .pb files,
imported, run by the reference interpreter and compared with TensorFlow; plus the errors."""

from __future__ import annotations

import numpy as np
import pytest

from tensorir.errors import ModelError, UnsupportedOpError
from tensorir.frontend.tensorflow import from_tensorflow
from tensorir.runtime.reference import run_reference

pytestmark = pytest.mark.tf  # TensorFlow in the process: a session of its own (quickstart.sh)


@pytest.fixture(scope="module")
def tf():
    import tensorflow

    return tensorflow


def _check(tf, tmp_path, fn, *shapes, rtol=1e-5, atol=1e-5):
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    rng = np.random.default_rng(0)
    specs = [tf.TensorSpec(s, tf.float32, name=f"x{i}") for i, s in enumerate(shapes)]
    concrete = tf.function(fn).get_concrete_function(*specs)
    frozen = convert_variables_to_constants_v2(concrete)
    path = tmp_path / "op.pb"
    path.write_bytes(frozen.graph.as_graph_def().SerializeToString())
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    expected = fn(*[tf.constant(x) for x in xs])
    expected = [np.asarray(e) for e in (expected if isinstance(expected, list | tuple) else [expected])]
    g = from_tensorflow(path)
    outs = run_reference(g, {f"x{i}": x for i, x in enumerate(xs)})
    assert len(outs) == len(expected)
    for o, e in zip(outs, expected, strict=True):
        np.testing.assert_allclose(o, e, rtol=rtol, atol=atol)
    return g


W = np.random.default_rng(1).standard_normal((3, 3, 4, 6)).astype(np.float32)


OPS = {
    "conv_same_stride2": lambda tf: lambda x: tf.nn.conv2d(x, W, 2, "SAME"),
    "conv_valid_dilated": lambda tf: lambda x: tf.nn.conv2d(x, W, 1, "VALID", dilations=2),
    "conv_explicit": lambda tf: lambda x: tf.nn.conv2d(x, W, 1, [[0, 0], [1, 2], [0, 1], [0, 0]]),
    "depthwise_mult2": lambda tf: lambda x: tf.nn.depthwise_conv2d(x, W[..., :2], [1, 2, 2, 1], "SAME"),
    "conv_transpose_same": lambda tf: lambda x: tf.nn.conv2d_transpose(x, W, [1, 18, 18, 4], 2, "SAME"),
    "max_avg_pool": lambda tf: lambda x: tf.nn.avg_pool2d(tf.nn.max_pool2d(x, 3, 2, "SAME"), 2, 1, "VALID"),
    "resize_bilinear_half_pixel": lambda tf: lambda x: tf.image.resize(x, (13, 7), "bilinear"),
    "resize_nearest": lambda tf: lambda x: tf.image.resize(x, (18, 5), "nearest"),
    "resize_align_corners": lambda tf: (
        lambda x: tf.compat.v1.image.resize_bilinear(x, (17, 9), align_corners=True)
    ),
    "mirror_pad_pad": lambda tf: (
        lambda x: tf.pad(
            tf.pad(x, [[0, 0], [1, 2], [2, 1], [0, 0]], "REFLECT"), [[0, 0], [1, 0], [0, 0], [0, 3]]
        )
    ),
    "activations": lambda tf: (
        lambda x: (
            tf.nn.elu(x)
            + tf.nn.leaky_relu(x, 0.3)
            + tf.nn.softplus(x)
            + tf.nn.relu6(x * 4)
            + tf.sigmoid(x) * tf.tanh(x)
        )
    ),
    "gelu_swish_hardswish": lambda tf: (
        lambda x: tf.nn.gelu(x, approximate=True) + tf.nn.gelu(x) + tf.nn.silu(x) + x * tf.nn.relu6(x + 3) / 6
    ),
    "math": lambda tf: (
        lambda x: (
            tf.math.squared_difference(x, 0.5)
            + tf.math.rsqrt(tf.abs(x) + 1)
            + tf.pow(tf.abs(x), 1.5)
            + tf.minimum(x, 0.2)
            - tf.maximum(x, -0.1) / 3
        )
    ),
    "reductions": lambda tf: (
        lambda x: [tf.reduce_sum(x, [1, 2]), tf.reduce_max(x, -1, keepdims=True), tf.reduce_mean(x, [0, 3])]
    ),
    "softmax_cast": lambda tf: lambda x: tf.cast(tf.cast(tf.nn.softmax(x) * 100, tf.int32), tf.float32),
    "shape_ops": lambda tf: (
        lambda x: tf.reshape(tf.transpose(tf.expand_dims(tf.squeeze(x[:, :1]), 0), [0, 2, 1]), [-1, 12])
    ),
    "strided_slice": lambda tf: lambda x: [x[:, 1:-1:2, ::-1, 2], x[..., tf.newaxis, 1:3], x[0, -1]],
    "slice_gather_tile": lambda tf: (
        lambda x: tf.tile(
            tf.gather(tf.slice(x, [0, 1, 0, 0], [1, -1, 3, 4]), [2, 0, 1], axis=2), [1, 1, 2, 1]
        )
    ),
    "pack_unpack_concat": lambda tf: (
        lambda x: tf.concat([tf.stack(tf.unstack(x, axis=3), axis=1)[:, 0], x[..., 0]], axis=1)
    ),
    "fill_shape": lambda tf: lambda x: x + tf.fill(tf.shape(x), 2.0),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_op(tf, tmp_path, name):
    shape = (1, 9, 9, 4) if name != "conv_transpose_same" else (1, 9, 9, 6)
    _check(tf, tmp_path, OPS[name](tf), shape)


def test_matmuls_and_einsum(tf, tmp_path):
    def fn(a, b):
        mm = tf.linalg.matmul(a, b, adjoint_a=True)  # BatchMatMulV2 adj_x
        return [mm, tf.einsum("bik,bjk->bij", a, b), tf.matmul(a[0], b[0], transpose_b=True)]

    _check(tf, tmp_path, fn, (2, 5, 5), (2, 5, 5))


def test_nhwc_conv_chain_leaves_no_transposes(tf, tmp_path):
    from tensorir.pipeline import optimize

    w2 = W[..., :4].copy()

    def fn(x):
        y = tf.nn.relu6(tf.nn.conv2d(x, W[..., :4], 1, "SAME") * 0.5 + 0.1)
        padded = tf.pad(y, [[0, 0], [1, 1], [1, 1], [0, 0]])  # folded into the conv's pads
        return tf.reduce_mean(tf.nn.conv2d(padded, w2, 2, "VALID") + y[:, :4, :4, :], [1, 2])

    g = optimize(_check(tf, tmp_path, fn, (1, 8, 8, 4)))
    ops = [g.node(n).op for n in g.op_nodes()]
    assert ops.count("transpose") == 1 and "pad" not in ops, ops  # the input's, once


def test_unsupported_ops_listed_once(tf, tmp_path):
    with pytest.raises(UnsupportedOpError, match=r"unsupported TensorFlow ops: .*Cumsum x1.*Lgamma x1"):
        _check(tf, tmp_path, lambda x: tf.math.cumsum(x) + tf.math.lgamma(x), (2, 3))


def test_bad_files(tmp_path):
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\x00garbage\xff" * 10)
    with pytest.raises(ModelError, match="not a valid frozen GraphDef"):
        from_tensorflow(bad)
    with pytest.raises(ModelError, match="no such file"):
        from_tensorflow(tmp_path / "missing.keras")


def test_unknown_dims_need_input_shape(tf, tmp_path):
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    spec = tf.TensorSpec((None, None, 3), tf.float32, name="x")
    frozen = convert_variables_to_constants_v2(tf.function(lambda x: x * 2).get_concrete_function(spec))
    path = tmp_path / "dyn.pb"
    path.write_bytes(frozen.graph.as_graph_def().SerializeToString())
    with pytest.raises(ModelError, match="--input-shape x="):
        from_tensorflow(path)
    g = from_tensorflow(path, input_shapes={"x": [1, 4, 3]})
    assert g.type_of(g.outputs[0][1]).shape == (1, 4, 3)
