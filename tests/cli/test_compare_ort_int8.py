"""`tir run --compare-ort` on an int8 model: where onnxruntime's own U8S8 products saturate (x86-64
without VNNI, tensorir/tools/ort_caveats.py), a failed comparison says so beside the FAIL line;
elsewhere, and for float models, it says nothing more. The failure is forced with a kernel made
wrong on purpose (tensorir/planted_bug.py), the host's answer with a monkeypatch, so the test
means the same on every CPU."""

from __future__ import annotations

import onnx
import pytest
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

from tensorir.cli import main
from tensorir.planted_bug import ENV
from tensorir.target import host_target
from tensorir.tools import ort_caveats
from tests.cli.test_compare_ort import TINY
from tests.frontend.test_onnx_quant import _float_cnn, _Reader

NOTE = "note: this CPU has no VNNI"


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory) -> str:
    """Two convs, QOperator (QLinearConv), weights over the full int8 range."""
    tmp = tmp_path_factory.mktemp("int8")
    _float_cnn(tmp / "f.onnx", head=False)
    quantize_static(
        str(tmp / "f.onnx"), str(tmp / "q.onnx"), _Reader(), quant_format=QuantFormat.QOperator,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
    )  # fmt: skip
    return str(tmp / "q.onnx")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TIR_DEBUG", raising=False)


@pytest.mark.parametrize("saturates", [True, False])
def test_failed_int8_comparison_names_onnxruntimes_saturation_where_it_applies(
    int8_model, saturates, monkeypatch, capsys
):
    monkeypatch.setattr(ort_caveats, "ort_u8s8_saturates_here", lambda: saturates)
    # the first quantized conv reads its input x 1.5; named by its node, which every CPU keeps
    # (a 3x3 QLinearConv runs as a float conv2d_nchwc; "qconv" matched no kernel on Zen 4)
    monkeypatch.setenv(ENV, "c1_quantized")
    rc = main(["run", int8_model, "--records", "none", "--compare-ort"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "compare-ort: FAIL" in out
    assert (NOTE in out) == saturates, out


def test_float_model_and_passing_int8_model_get_no_note(int8_model, monkeypatch, capsys):
    monkeypatch.setattr(ort_caveats, "ort_u8s8_saturates_here", lambda: True)
    assert ort_caveats.int8_caveat(onnx.load(TINY)) is None
    assert ort_caveats.int8_caveat(onnx.load(int8_model)).startswith(NOTE)
    rc = main(["run", TINY, "--records", "none", "--compare-ort"])
    assert rc == 0 and NOTE not in capsys.readouterr().out


def test_the_host_answer_follows_its_cpu_flags():
    host = host_target()
    if host.arch != "x86_64":
        assert not ort_caveats.ort_u8s8_saturates_here()
        return
    with open("/proc/cpuinfo") as f:
        flags = set(next(line for line in f if line.startswith("flags")).split())
    assert ort_caveats.ort_u8s8_saturates_here() == (not flags & {"avx512_vnni", "avx_vnni"})
