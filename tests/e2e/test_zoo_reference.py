"""Zoo models end to end: tensorir's reference path against onnxruntime.

Every zoo model is imported with `from_onnx` and run with `run_reference` on the
seeded `sample_inputs`, and compared output by output with onnxruntime (CPU).

Tolerance: rtol=1e-4 with atol=2e-5. Zoo outputs are O(1) (std about 1, |max| < 5);
both sides compute in float32 but sum in different orders (MLAS blocked kernels vs
numpy/BLAS), over up to 4608 terms per output (ResNet's 3x3x512 convs) and through
softmax/LayerNorm/Erf in BERT. The measured max abs difference is 2.4e-7 (tiny_cnn) to
3.8e-6 (bert_encoder), over five input seeds, so 2e-5 leaves a 5x margin; rtol alone
would fail on the few outputs that happen to be near zero. A wrong op (a missed
epsilon, a flipped transpose, a bad pad) is off by 1e-3 or much more.

Outputs of a larger scale than O(1) (yolov8n's decoded boxes, up to 542 pixels) are
differences of large terms: their near-zero elements carry the rounding of those terms,
about one float32 ulp of the output's scale (6e-5 at 542; 4.6e-5 measured on a Zen 3
host, where MLAS sums in AVX2 order). There atol is 1e-6 of max |ort| (8 ulps of it),
5.4e-4 for yolov8n; for O(1) outputs that is under 2e-5 and changes nothing.

The per-output max abs and max rel errors are printed (run with -s to see them) and
recorded as junit properties. Max rel is elementwise, over elements with |ort| > atol
(the few near-zero elements make it larger than the max abs error); "of max" is the
max abs error over max |ort|.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import onnx
import onnx.checker
import onnx.shape_inference
import onnxruntime
import pytest

from benchmarks import zoo
from tensorir.frontend.onnx import from_onnx
from tensorir.runtime.reference import run_reference

RTOL = 1e-4
ATOL = 2e-5
ATOL_OF_MAX = 1e-6  # atol for outputs of large scale: 8 float32 ulps of max |ort|
NAMES = list(zoo.MODELS)


@functools.cache
def _model(name: str) -> onnx.ModelProto:
    return zoo.build_for_tests(name)


@functools.cache
def _ort_outputs(name: str) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    model = _model(name)
    inputs = zoo.sample_inputs(model)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return inputs, session.run(None, inputs)


def _errors(ours: np.ndarray, ref: np.ndarray) -> tuple[float, float, float]:
    """Max abs error, max elementwise rel error (over |ref| > ATOL), max abs over max |ref|."""
    ref = ref.astype(np.float64)
    diff = np.abs(ours.astype(np.float64) - ref)
    big = np.abs(ref) > ATOL
    rel = diff[big] / np.abs(ref[big])
    return float(diff.max()), float(rel.max()) if rel.size else 0.0, float(diff.max() / np.abs(ref).max())


@pytest.mark.parametrize("name", NAMES)
def test_reference_matches_onnxruntime(name: str, record_property) -> None:
    model = _model(name)
    inputs, expected = _ort_outputs(name)
    outs = run_reference(from_onnx(model), inputs)
    out_names = [o.name for o in model.graph.output]
    assert len(outs) == len(expected) == len(out_names)
    for out_name, ours, ref in zip(out_names, outs, expected, strict=True):
        assert ours.shape == ref.shape and ours.dtype == ref.dtype, (ours.shape, ours.dtype, ref.shape)
        max_abs, max_rel, of_max = _errors(ours, ref)
        print(
            f"\n{name}/{out_name}: max abs err {max_abs:.3e}, max rel err {max_rel:.3e} ({of_max:.2e} of max)"
        )
        record_property(f"{out_name}_max_abs_err", max_abs)
        record_property(f"{out_name}_max_rel_err", max_rel)
        record_property(f"{out_name}_max_abs_err_of_max", of_max)
        atol = max(ATOL, ATOL_OF_MAX * float(np.abs(ref).max()))
        np.testing.assert_allclose(ours, ref, rtol=RTOL, atol=atol, err_msg=f"{name}/{out_name}")


# ---- the zoo itself: valid, sane, deterministic, the real architectures -------------------
@pytest.mark.parametrize("name", NAMES)
def test_zoo_model_is_valid(name: str) -> None:
    model = _model(name)
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    names = [n.name for n in model.graph.node]
    assert all(names) and len(set(names)) == len(names), "node names must be unique and non-empty"
    for vi in model.graph.input:
        assert all(d.dim_value > 0 for d in vi.type.tensor_type.shape.dim), vi.name


@pytest.mark.parametrize("name", NAMES)
def test_zoo_outputs_are_finite_and_order_one(name: str) -> None:
    _, outs = _ort_outputs(name)
    for y in outs:
        assert np.isfinite(y).all()
        if name.startswith("yolo"):  # [1, 4 + classes, anchors]: boxes in pixels, then probabilities
            size = _model(name).graph.input[0].type.tensor_type.shape.dim[2].dim_value
            boxes, probs = y[0, :4], y[0, 4:]
            assert np.all(boxes[2:] >= 0) and 0.05 * size < float(boxes.std()) < size, boxes.std()
            assert np.all((probs >= 0) & (probs <= 1)) and 0.01 < float(probs.std()) < 0.5, probs.std()
            continue
        assert 0.3 < float(y.std()) < 3.0, f"{name}: output std {y.std():.3g} is not O(1)"
        assert float(np.abs(y).max()) < 20.0


@pytest.mark.parametrize(
    "name", ["tiny_cnn", "mobilenet_v2_96", "bert_encoder", "squeezenet1_1", "yolov8n_320", "densenet121"]
)
def test_builds_are_byte_identical(name: str) -> None:
    assert zoo.build_for_tests(name).SerializeToString() == _model(name).SerializeToString()
    a, b = zoo.sample_inputs(_model(name), seed=3), zoo.sample_inputs(_model(name), seed=3)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


# torchvision's parameter counts and multiply-accumulates for the same architectures
@pytest.mark.parametrize(
    ("name", "params", "gmacs"),
    [
        ("resnet18", 11_689_512, 1.814),
        ("resnet50", 25_557_032, 4.089),
        ("mobilenet_v2_224", 3_504_872, 0.301),
        ("squeezenet1_1", 1_235_496, 0.349),
        ("mobilenet_v1", 4_231_976, 0.569),  # the paper: 569 M multiply-adds, 4.2 M parameters
        ("mobilenet_v3_small", 2_542_856, 0.0565),  # the paper: 56 M multiply-adds
        ("densenet121", 7_978_856, 2.834),
    ],
)
def test_architectures_match_torchvision(name: str, params: int, gmacs: float) -> None:
    model = zoo.build(name)  # full size (the tests otherwise run some at smaller sizes)
    stats = zoo.model_stats(model)
    learnable = stats["learnable_params"]
    if name.startswith("mobilenet_v2"):
        # BN folded: each BN's C scales + C shifts became the conv's C biases
        learnable += sum(
            math.prod(t.dims)
            for t in model.graph.initializer
            if t.name.endswith(".bias") and "classifier" not in t.name
        )
    assert learnable == params
    assert stats["macs"] / 1e9 == pytest.approx(gmacs, abs=0.0005)


def test_bert_mask_and_structure() -> None:
    model = _model("bert_encoder")
    inputs = zoo.sample_inputs(model)
    assert inputs["x"].shape == (1, 128, 256) and inputs["x"].dtype == np.float32
    mask = inputs["attention_mask"]
    assert mask.dtype == np.int64 and mask.shape == (1, 128)
    assert mask[0, 0] == 1 and np.all(np.diff(mask[0]) <= 0), "a padding mask: ones, then zeros"
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("LayerNormalization") == 4 and ops.count("Softmax") == 2 and ops.count("Erf") == 2
    no_mask = zoo.bert_encoder(attention_mask=False)
    assert [i.name for i in no_mask.graph.input] == ["x"]


def test_cli_writes_a_model(tmp_path, capsys) -> None:
    path = tmp_path / "tiny.onnx"
    assert zoo.main(["tiny_cnn", "-o", str(path)]) == 0
    assert "tiny_cnn" in capsys.readouterr().out
    assert onnx.load(str(path)).SerializeToString() == _model("tiny_cnn").SerializeToString()
    with pytest.raises(KeyError, match="no zoo model"):
        zoo.build("resnet1000")
