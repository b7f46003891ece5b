"""Trained TensorFlow models that nobody on the project built (benchmarks/wild_tf.py): MediaPipe's
BlazeFace face detectors (short range; full range, with sparse weights), face and iris landmark
models, palm detector and hand landmark model (.tflite from mediapipe 0.10.14) and Spotify's
Basic Pitch (a Keras 2 SavedModel from basic-pitch 0.4.0, and its nmp.tflite), compiled for the
host and checked against
TensorFlow (tf.lite.Interpreter; TF's SavedModel loader in a session). Plus the two frontend fixes
they needed, each on a model built here: DivNoNan, and SavedModels whose optimizer slots TF cannot
revive (nmp.tflite needed SQUARE, LOG, EQUAL and SELECT_V2: tests/frontend/test_tflite_ops.py).

The models come from the packages' wheels through pip (PyPI is reachable here and in CI), once per
checkout into .wild/. A failed download fails the test: it never skips. Inputs are a drawn face
and a synthetic melody, so the detector fires (some anchor's score > 0.5) and notes are found.
Tolerance per output: max |ours - tf| <= 1e-4 + 1e-3 max |tf| (float32).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.wild_tf import ATOL, CUSTOM, PUBLIC, RTOL, error, fetch, run_both
from tensorir.frontend.tensorflow import from_tensorflow
from tensorir.runtime.reference import run_reference

pytestmark = pytest.mark.tf  # TensorFlow in the process: a session of its own (quickstart.sh)

ROOT = Path(__file__).resolve().parents[2]
# an output that shows the model responds to its input: (output, threshold on ours)
RESPONDS = {
    "face_detection": ("classificators", 0.0),
    "face_detection_full_range": ("Identity_1", 0.0),  # a face's score logit
    "face_landmark": ("conv2d_31", 0.0),  # the face score's logit: a face
    "iris_landmark": ("output_iris", 10.0),  # iris points in the 64-pixel crop
    "palm_detection": ("Identity", 1.0),  # the boxes (no palm on a face: the scores stay low)
    "hand_landmark": ("Identity", 10.0),  # the 21 points in pixels
    "basic_pitch": ("note", 0.5),
    "basic_pitch_tflite": ("StatefulPartitionedCall:1", 0.5),  # the note output (1, 172, 88)
}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_model_matches_tensorflow(name: str) -> None:
    results = run_both(name, "host", ROOT / ".wild")
    for out, (ours, ref) in results.items():
        assert ours.shape == ref.shape, f"{name}/{out}: shape {ours.shape}, TensorFlow's {ref.shape}"
        assert np.all(np.isfinite(ours)), f"{name}/{out}: not finite"
        diff, ratio = error(ours, ref)
        print(f"{name}/{out}: max |ours - tf| {diff:.3g}, error / tolerance {ratio:.3f}")
        assert ratio <= 1.0, f"{name}/{out}: max |ours - tf| = {diff:.3g} > {ATOL} + {RTOL} max |tf|"
    out, threshold = RESPONDS[name]
    assert np.max(results[out][0]) > threshold, f"{name}: the model does not respond to its input"


def test_selfie_segmentation_with_mediapipe_custom_op_masks_the_face() -> None:
    """MediaPipe's selfie segmentation upsamples with its custom op Convolution2DTransposeBias,
    which TF Lite cannot run by itself: checked on its output instead. On the drawn face the
    mask covers the face (mean above 0.2 inside its ellipse) and nothing else (below 0.02);
    a wrong stride, padding or weight order of the custom op smears or shifts it."""
    import tensorir as tir

    path = fetch(["selfie_segmentation"], ROOT / ".wild")["selfie_segmentation"]
    mod = tir.compile(str(path))
    (y,) = mod.run({mod.inputs[0]["name"]: CUSTOM["selfie_segmentation"].input()})
    mask = y.reshape(256, 256)
    yy, xx = np.mgrid[0:256, 0:256] / 256
    face = ((yy - 0.52) / 0.30) ** 2 + ((xx - 0.5) / 0.23) ** 2 <= 1  # wild_tf.face_image's face
    assert np.all((mask >= 0) & (mask <= 1))
    assert mask[face].mean() > 0.2 and mask[~face].mean() < 0.02, (mask[face].mean(), mask[~face].mean())


def test_div_no_nan(tmp_path: Path) -> None:
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    spec = [tf.TensorSpec((2, 5), tf.float32, name=n) for n in ("x", "y")]
    fn = tf.function(lambda x, y: tf.math.divide_no_nan(x, y) + 1.0).get_concrete_function(*spec)
    path = tmp_path / "div_no_nan.pb"
    path.write_bytes(convert_variables_to_constants_v2(fn).graph.as_graph_def().SerializeToString())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5)).astype(np.float32)
    y = np.where(rng.random((2, 5)) < 0.4, 0.0, rng.standard_normal((2, 5))).astype(np.float32)
    x[0, 0], y[0, 0] = 0.0, 0.0  # 0 / 0 too
    (out,) = run_reference(from_tensorflow(path), {"x": x, "y": y})
    np.testing.assert_allclose(out, fn(tf.constant(x), tf.constant(y)).numpy(), rtol=1e-6, atol=1e-6)


def test_saved_model_with_slots_tf_cannot_revive(tmp_path: Path) -> None:
    """A SavedModel whose object graph names optimizer slots on an object TF revives as a plain
    _UserObject (as a Keras 2 model saved with its optimizer does under TF >= 2.16): TF's
    loader fails with "no attribute 'add_slot'"; the import leaves the slots out."""
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    class Scale(tf.Module):
        def __init__(self) -> None:
            self.w = tf.Variable([[1.5, -2.0, 0.5]])
            self.m = tf.Variable([[0.0, 0.0, 0.0]])  # stands for an optimizer's slot of w

        @tf.function(input_signature=[tf.TensorSpec((None, 3), tf.float32, name="x")])
        def __call__(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": tf.nn.relu(x * self.w)}

    folder = tmp_path / "slots"
    module = Scale()
    tf.saved_model.save(module, str(folder), signatures=module.__call__)
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((folder / "saved_model.pb").read_bytes())
    nodes = sm.meta_graphs[0].object_graph_def.nodes
    ids = {c.local_name: c.node_id for c in nodes[0].children}
    nodes[0].slot_variables.add(
        original_variable_node_id=ids["w"], slot_name="m", slot_variable_node_id=ids["m"]
    )
    (folder / "saved_model.pb").write_bytes(sm.SerializeToString())
    with pytest.raises(AttributeError, match="add_slot"):
        tf.saved_model.load(str(folder))
    x = np.array([[1.0, 2.0, -3.0], [-1.0, 0.5, 4.0]], np.float32)
    g = from_tensorflow(folder, {"x": (2, 3)})
    (out,) = run_reference(g, {"x": x})
    np.testing.assert_array_equal(out, np.maximum(x * [[1.5, -2.0, 0.5]], 0))
