"""`tir quantize` (tensorir/quantize/): QDQ models that onnx.checker accepts and onnxruntime
runs, close to the float model; tensorir's compiled code on them matches onnxruntime; the
calibration thresholds on a known distribution; --min-sqnr / --keep-float; bad --calib."""

from __future__ import annotations

import collections
import json
import math
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from benchmarks import zoo
from benchmarks.wild import WILD, fetch, input_name
from benchmarks.wild_quantize import line_crop
from tensorir.cli import main
from tensorir.errors import InputError
from tensorir.frontend.onnx import from_onnx
from tensorir.graph.printer import print_graph
from tensorir.pipeline import optimize
from tensorir.quantize import quantize_model, read_calibration
from tensorir.quantize.calibrate import HistogramCollector, RangeCollector, activation_ranges
from tensorir.runtime.executor import CompiledGraph
from tests.int8_oracle import int8_session

ROOT = Path(__file__).resolve().parents[2]
CALIB, HELD_OUT = 16, 8
MIN_MODEL_SQNR_DB = 25.0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """tiny_cnn (conv-bn-relu-pool, conv-bn-relu-GAP, gemm) and a folder of calibration samples."""
    root = tmp_path_factory.mktemp("tiny")
    model = zoo.build("tiny_cnn")
    onnx.save(model, root / "f.onnx")
    (root / "calib").mkdir()
    for k in range(CALIB):
        np.save(root / "calib" / f"input_{k:03d}.npy", zoo.sample_inputs(model, seed=100 + k)["input"])
    return root


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _inits(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


@pytest.mark.parametrize("method", ["minmax", "percentile", "kl"])
def test_quantized_model_is_checked_qdq_close_to_float_and_tensorir_matches_ort(tiny, method, capsys):
    out = tiny / f"q_{method}.onnx"
    assert (
        main(
            [
                "quantize",
                str(tiny / "f.onnx"),
                "--calib",
                str(tiny / "calib"),
                "-o",
                str(out),
                "--method",
                method,
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "3 of 3 ops quantized" in printed
    figure = float(printed.split("calibration samples: SQNR 'logits' ")[1].split(" dB")[0])
    assert figure >= MIN_MODEL_SQNR_DB
    q = onnx.load(out)
    onnx.checker.check_model(q, full_check=True)
    assert next(o.version for o in q.opset_import if o.domain == "") >= 13
    # conv1's weight, with bn1 folded in: int8, per output channel, scale max|w_c| / 127, behind a
    # DequantizeLinear on axis 0
    f, inits = zoo.build("tiny_cnn"), _inits(q)
    conv, bn = (next(n for n in f.graph.node if n.name == k) for k in ("conv1", "bn1"))
    gamma, _, _, var = (_inits(f)[t] for t in bn.input[1:])
    eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    w = _inits(f)[conv.input[1]] * (gamma / np.sqrt(var + eps))[:, None, None, None]
    assert not any(n.op_type == "BatchNormalization" for n in q.graph.node)
    dq = next(
        n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "conv1_W_dequantized"
    )
    assert inits[dq.input[0]].dtype == np.int8 and dq.attribute[0].i == 0
    np.testing.assert_allclose(inits[dq.input[1]], np.abs(w).max(axis=(1, 2, 3)) / 127, rtol=1e-6)
    np.testing.assert_allclose(
        inits[dq.input[0]] * inits[dq.input[1]][:, None, None, None],
        w,
        atol=inits[dq.input[1]].max() / 2 + 1e-7,
    )
    # activations: uint8 Q/DQ pairs in front of each quantized op
    qs = [n for n in q.graph.node if n.op_type == "QuantizeLinear"]
    assert len(qs) == 3 and all(inits[n.input[2]].dtype == np.uint8 for n in qs)

    ref, got = _session(f), int8_session(q)  # onnxruntime where exact (tests/int8_oracle.py)
    compiled = CompiledGraph(from_onnx(q), "host")
    signal = noise = 0.0
    outs = []
    for k in range(HELD_OUT):
        feeds = zoo.sample_inputs(f, seed=1000 + k)
        y, yq = ref.run(None, feeds)[0], got.run(None, feeds)[0]
        signal += float(np.sum(y.astype(np.float64) ** 2))
        noise += float(np.sum((yq.astype(np.float64) - y) ** 2))
        outs.append((y, yq, compiled.run(feeds)[0]))
    assert 10 * math.log10(signal / noise) >= MIN_MODEL_SQNR_DB
    # one step of the output, had it been quantized to uint8 over its float range
    step = (max(y.max() for y, _, _ in outs) - min(y.min() for y, _, _ in outs)) / 255
    assert max(float(np.abs(ours - yq).max()) for _, yq, ours in outs) <= step


def _known_distribution() -> tuple[RangeCollector, HistogramCollector]:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(400_000), [60.0, -55.0, 58.0]]).astype(np.float32)
    relu = np.maximum(rng.standard_normal(400_000), 0).astype(np.float32)
    relu[:2] = 40.0
    ranges = RangeCollector(["x", "relu"])
    ranges.observe({"x": x, "relu": relu})
    hists = HistogramCollector(ranges.ranges)
    hists.observe({"x": x, "relu": relu})
    return ranges, hists


def test_percentile_and_kl_clip_the_outliers_of_a_gaussian_and_minmax_keeps_them():
    ranges, hists = _known_distribution()
    mm = activation_ranges(ranges.ranges, hists, "minmax")
    assert mm["x"] == (-55.0, 60.0) and mm["relu"] == (0.0, 40.0)
    pc = activation_ranges(ranges.ranges, hists, "percentile", 99.99)
    # the 99.99th percentile of |N(0, 1)| is 3.8906; a bin is 60 / 2048 = 0.03 wide
    assert pc["x"][1] == pytest.approx(3.8906, abs=0.1) and pc["x"][0] == -pc["x"][1]
    assert pc["relu"][0] == 0.0 and pc["relu"][1] == pytest.approx(3.7190, abs=0.1)  # 99.99% of max(N, 0)
    kl = activation_ranges(ranges.ranges, hists, "kl")
    # the entropy threshold of a unit Gaussian at 8 bits lies between 3 and 6 sigma, far below the outliers
    assert 3.0 < kl["x"][1] < 6.0 and kl["x"][0] == -kl["x"][1]
    # a ReLU tensor: 256 levels on [0, T], and its exact zeros do not drag T below the bulk
    assert kl["relu"][0] == 0.0 and 2.5 < kl["relu"][1] < 6.0


def test_a_layer_under_min_sqnr_and_a_kept_one_stay_float_and_the_report_says_why(tiny, capsys):
    samples = read_calibration(tiny / "calib", zoo.build("tiny_cnn"))
    first = quantize_model(zoo.build("tiny_cnn"), samples, min_sqnr=0.0, progress=False)
    by_sqnr = sorted((r.sqnr_db, r.node) for r in first.rows if r.node != "fc")
    assert len(by_sqnr) == 2 and by_sqnr[0][0] < by_sqnr[1][0]
    worst, threshold = by_sqnr[0][1], round((by_sqnr[0][0] + by_sqnr[1][0]) / 2, 2)
    out, report = tiny / "q_min.onnx", tiny / "report.json"
    args = ["quantize", str(tiny / "f.onnx"), "--calib", str(tiny / "calib"), "-o", str(out)]
    args += ["--min-sqnr", str(threshold), "--keep-float", "fc", "--report", str(report)]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert f"SQNR {by_sqnr[0][0]:.1f} dB < --min-sqnr {threshold:g} dB" in table
    layers = {r["node"]: r for r in json.loads(report.read_text())["layers"]}
    assert not layers[worst]["quantized"] and "--min-sqnr" in layers[worst]["reason"]
    assert layers[worst]["sqnr_db"] == pytest.approx(by_sqnr[0][0])
    assert not layers["fc"]["quantized"] and layers["fc"]["reason"] == "--keep-float"
    assert layers[by_sqnr[1][1]]["quantized"]
    q = onnx.load(out)
    onnx.checker.check_model(q)
    nodes = {n.name: n for n in q.graph.node}
    float_weights = {t.name for t in q.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    assert nodes[worst].input[1] in float_weights and nodes["fc"].input[1] in float_weights
    assert nodes[by_sqnr[1][1]].input[1].endswith("_W_dequantized")


@pytest.mark.parametrize(
    "make, expect",
    [
        (lambda d: d / "nowhere", "--calib {d}/nowhere: no such folder"),
        (lambda d: d, "--calib {d}: no .npy files in it"),
        (
            lambda d: _npy(d, np.zeros((1, 3, 16, 16), np.float32)),
            "does not fit input 'input' [1, 3, 32, 32]",
        ),
        (
            lambda d: _npy(d, np.zeros((1, 3, 32, 32), np.int64)),
            "input 'input' expects float32, the file holds int64",
        ),
    ],
)
def test_bad_calib_folder_is_one_line_naming_it_and_exit_2(tiny, tmp_path, capsys, make, expect):
    calib = make(tmp_path)
    code = main(["quantize", str(tiny / "f.onnx"), "--calib", str(calib), "-o", str(tmp_path / "q.onnx")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and err.startswith("tir quantize: error: --calib")
    assert expect.format(d=tmp_path) in err


def _npy(folder, array):
    np.save(folder / "input_000.npy", array)
    return folder


def test_trained_text_direction_classifier_int8_agrees_with_fp32_on_98_percent_of_lines():
    """PaddleOCR's text direction classifier (rapidocr_onnxruntime's wheel, fetched with pip into
    .wild/), calibrated on 32 text lines of scikit-image's scanned page (its wheel, the same way),
    run by tensorir's reference interpreter; 200 other crops of those lines, half of them upside
    down, held out (benchmarks/wild_quantize.py)."""
    path = fetch(["ocr_cls"], ROOT / ".wild")["ocr_cls"]
    shape, x = WILD["ocr_cls"].shape, input_name(path)
    calib = [{x: line_crop(shape, s)} for s in range(32)]
    result = quantize_model(
        onnx.load(path), calib, "percentile", backend="ref", progress=False, check_model=False
    )
    onnx.checker.check_model(result.model)
    assert sum(r.quantized for r in result.rows) == len(result.rows) == 54
    f32, i8 = _session(onnx.load(path)), _session(result.model)
    lines = [{x: line_crop(shape, s)} for s in range(100, 300)]
    same = [f32.run(None, feeds)[0].argmax() == i8.run(None, feeds)[0].argmax() for feeds in lines]
    assert np.mean(same) >= 0.98, np.mean(same)
    # compiled, every conv but the 3-channel stem is an integer op (the BN folded first; the
    # hard swishes in the requantize or after a dequantizing epilogue; the squeeze-excite
    # convs whose channels are not a multiple of 4 through im2col's channel padding)
    text = print_graph(optimize(from_onnx(result.model, input_shapes={x: shape}), fuse=False))
    ops = collections.Counter(re.findall(r" = (qconv1x1|qdwconv|conv|im2col)\(", text))
    assert ops == {"qconv1x1": 41, "qdwconv": 11, "im2col": 7, "conv": 1}, ops


def _convtranspose_matmul() -> onnx.ModelProto:
    """ConvTranspose 4->6 stride 2 (+ bias), Relu, Reshape to [6, 81], MatMul by an 81x5 constant."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.3, (4, 6, 3, 3)).astype(np.float32), "wt"),
        numpy_helper.from_array(rng.normal(0, 0.1, 6).astype(np.float32), "bt"),
        numpy_helper.from_array(rng.normal(0, 0.3, (81, 5)).astype(np.float32), "wm"),
        numpy_helper.from_array(np.array([-1, 81], np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("ConvTranspose", ["x", "wt", "bt"], ["t"], strides=[2, 2], name="up"),
        helper.make_node("Relu", ["t"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", "wm"], ["y"], name="mm"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 5])
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_convtranspose_and_matmul_weights_per_output_channel_on_their_axis():
    model = _convtranspose_matmul()
    rng = np.random.default_rng(1)
    samples = [{"x": rng.standard_normal((1, 4, 4, 4)).astype(np.float32)} for _ in range(8)]
    result = quantize_model(model, samples, backend="ref", progress=False)
    assert [(r.node, r.channels, r.quantized) for r in result.rows] == [("up", 6, True), ("mm", 5, True)]
    assert result.output_sqnr["y"] >= MIN_MODEL_SQNR_DB
    q = result.model
    onnx.checker.check_model(q, full_check=True)
    axes = {
        n.output[0]: n.attribute[0].i for n in q.graph.node if n.op_type == "DequantizeLinear" and n.attribute
    }
    assert (
        axes["up_W_dequantized"] == 1 and axes["mm_W_dequantized"] == 1
    )  # ConvTranspose: (Cin, Cout, kh, kw)
    inits = _inits(q)
    assert inits["up_B_quantized"].dtype == np.int32  # bias scale s_x * s_w per channel
    x_scale = float(inits["x_scale"])
    np.testing.assert_allclose(inits["up_B_scale"], x_scale * inits["up_W_scale"], rtol=1e-6)
    want = _session(q).run(None, samples[0])[0]
    np.testing.assert_allclose(CompiledGraph(from_onnx(q), "host").run(samples[0])[0], want, atol=1e-5)


def test_calibration_files_of_several_inputs_pair_by_the_longest_input_name(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])
    xm = helper.make_tensor_value_info("x_mask", TensorProto.FLOAT, ["n", 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "x_mask"], ["y"])], "g", [x, xm], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for k in range(2):
        np.save(tmp_path / f"x_{k}.npy", np.full((1, 2), k, np.float64))  # float64: read as float32
        np.save(tmp_path / f"x_mask_{k}.npy", np.full((1, 2), 10 + k, np.float32))
    samples = read_calibration(tmp_path, model)
    assert [(s["x"][0, 0], s["x_mask"][0, 0]) for s in samples] == [(0, 10), (1, 11)]
    assert all(s["x"].dtype == np.float32 for s in samples)
    np.save(tmp_path / "x_mask_2.npy", np.zeros((1, 2), np.float32))
    with pytest.raises(InputError, match="every input needs the same number of samples"):
        read_calibration(tmp_path, model)


def test_batchnorm_with_constant_node_parameters_folds_into_the_conv():
    """Paddle's exporter writes weights and BN parameters as Constant nodes, not
    initializers: the BN still folds (so the conv's QDQ fold sees conv + bias), and the
    Constant nodes only it read are dropped."""
    from tensorir.quantize.prepare import fold_batchnorm

    rng = np.random.default_rng(9)

    def constant(name: str, value: np.ndarray) -> onnx.NodeProto:
        return helper.make_node(
            "Constant", [], [name], value=numpy_helper.from_array(value.astype(np.float32))
        )

    params = [rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal(4), rng.random(4) + 0.5]
    nodes = [
        constant("w", rng.standard_normal((4, 3, 3, 3))),
        *(constant(f"p{i}", p) for i, p in enumerate(params)),
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "p0", "p1", "p2", "p3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folded = fold_batchnorm(model)
    assert [n.op_type for n in folded.graph.node] == ["Conv"]
    assert list(folded.graph.node[0].input)[1:] == ["c_W_bn", "c_B_bn"]
    x = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    np.testing.assert_allclose(_session(folded).run(None, x)[0], _session(model).run(None, x)[0], atol=1e-4)
