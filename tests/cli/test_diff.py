"""`tir diff` (issue 14, item 2): the model compiled with its kernels' outputs exposed, each
compared with onnxruntime; the table names the first node outside the tolerance. A kernel made
wrong on purpose (TIR_TEST_BREAK_KERNEL, tensorir/planted_bug.py) must be the node it names.

Tolerances: on a correct fp32 model every exposed tensor agrees with onnxruntime to a max
relative error below 1e-5 (tiny CNN) / 1e-4 (MobileNetV2-96), far inside the defaults (rtol 1e-3,
atol 1e-4, min-cosine 0.9999); the planted kernel scales an activation by 1.5, so its tensor's
relative error is above 0.1, and every tensor before it still passes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.zoo import build
from tensorir.cli import main
from tensorir.pipeline import compile_model
from tensorir.planted_bug import ENV
from tensorir.tools.diff import diff_model

TINY = str(Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx")
TINY_NODES = ["relu1", "pool1", "relu2", "avgpool", "fc"]  # the node each kernel ends with


@pytest.fixture(scope="module", autouse=True)
def _own_cache(tmp_path_factory):
    """Compiled kernels and tuning databases go to a temporary folder, never ~/.cache/tensorir."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIR_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("TIR_DEBUG", raising=False)
        mp.delenv(ENV, raising=False)
        yield


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("zoo") / "mobilenet_v2_96.onnx"
    path.write_bytes(build("mobilenet_v2_96").SerializeToString())
    return str(path)


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.err.strip(), captured.out


def _table(out: str) -> list[list[str]]:
    """The table's rows, split on whitespace (node, op, kernel, body, algorithm, record, figures...)."""
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("node "))
    return [line.split() for line in lines[start + 1 :] if re.search(r"\s(ok|FAIL)", line)]


@pytest.mark.parametrize("target", ["host", "opencl:pocl"])
def test_correct_model_passes_every_node(target, capsys):
    rc, err, out = _cli(["diff", TINY, "--target", target, "--records", "none"], capsys)
    assert rc == 0, err
    rows = _table(out)
    assert [r[0] for r in rows] == TINY_NODES
    assert all(r[-1] == "ok" and float(r[7]) < 1e-5 for r in rows), out
    assert rows[0][3] == "conv2d_nchwc+relu" and rows[0][4] == "direct" and rows[0][5] == "default"
    assert ("@gpu" in rows[0][2]) == (target != "host")
    assert "all 5 tensors within tolerance" in out


@pytest.mark.parametrize("target", ["host", "opencl:pocl"])
@pytest.mark.parametrize("broken", ["pool1", "relu2"])
def test_planted_kernel_is_named(target, broken, monkeypatch, capsys):
    monkeypatch.setenv(ENV, broken)
    rc, err, out = _cli(["diff", TINY, "--target", target, "--records", "none"], capsys)
    assert rc == 1, (err, out)
    rows = _table(out)
    k = TINY_NODES.index(broken)
    assert all(r[-1] == "ok" for r in rows[:k]), out  # before it: right
    assert rows[k][0] == broken and rows[k][-2:] == ["<-", "first"] and float(rows[k][7]) > 0.1, out
    assert f"first node outside tolerance: '{broken}'" in out


def test_exposed_compile_keeps_the_shipped_kernels(mobilenet):
    """The tensors are exposed at kernel ends, so the compiled kernels are those of the model as
    shipped, plus the layout transforms that hand each exposed tensor out in NCHW."""
    shipped = compile_model(mobilenet, "host").manifest["kernels"]
    _, _, exposed = diff_model(mobilenet, "host")
    kept = [k["workload"] for k in exposed.manifest["kernels"] if k["op"] != "layout_transform"]
    assert sorted(kept) == sorted(k["workload"] for k in shipped if k["op"] != "layout_transform")


def test_mobilenet_planted_kernel(mobilenet, monkeypatch, capsys):
    rc, err, out = _cli(["diff", mobilenet, "--records", "none"], capsys)
    assert rc == 0, err
    rows = _table(out)
    assert len(rows) == 48 and all(float(r[7]) < 1e-4 for r in rows)  # 6 depthwise + 1x1 merged
    monkeypatch.setenv(ENV, "features.5.add")
    rc, err, out = _cli(["diff", mobilenet, "--records", "none"], capsys)
    assert rc == 1, err
    (first,) = [r for r in _table(out) if r[-1] == "first"]
    # the block's depthwise conv and project run as one kernel (passes/fuse_dwpw.py)
    assert first[0] == "features.5.add" and first[1] == "Add", out
    assert first[3].startswith("conv2d_nchwc+clip+conv2d_nc"), out
    rc, err, out = _cli(["run", mobilenet, "--records", "none", "--compare-ort"], capsys)
    assert rc == 1 and "logits:" in out and "FAIL" in out


def test_every_node(monkeypatch, capsys):
    monkeypatch.setenv(ENV, "relu2")
    rc, err, out = _cli(["diff", TINY, "--records", "none", "--every-node"], capsys)
    assert rc == 1, err
    rows = _table(out)
    assert [r[0] for r in rows] == ["conv1", "bn1", "relu1", "pool1", "conv2", "bn2", "relu2", "avgpool",
                                    "flatten", "fc"]  # fmt: skip
    assert [r[0] for r in rows if r[-1] == "first"] == ["relu2"]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--rtol", "x"], ["--rtol 'x'"]),
        (["--min-cosine", "-3"], ["--min-cosine -3"]),
        (["--target", "nope"], ["nope"]),
        (["--records", "/nonexistent.db"], ["--records"]),
        (["--input", "nope=x.npy"], ["'nope'", "no such input"]),
    ],
)
def test_bad_options(extra, words, capsys):
    rc, err, _ = _cli(["diff", TINY, *extra], capsys)
    assert rc == 2, err
    assert err and len(err.splitlines()) == 1 and "Traceback" not in err
    for w in words:
        assert w in err, (w, err)


def test_missing_model(tmp_path, capsys):
    rc, err, _ = _cli(["diff", str(tmp_path / "nope.onnx")], capsys)
    assert rc == 2 and "nope.onnx" in err and len(err.splitlines()) == 1
