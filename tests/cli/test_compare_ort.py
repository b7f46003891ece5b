"""`tir run --compare-ort` (issue 14, item 1): it compares the code the user ships (a compiled
folder, or the .onnx compiled for --target), prints max abs / rel error, cosine and SQNR per
output, and exits 1 when an output misses the tolerance. A kernel made wrong on purpose
(TIR_TEST_BREAK_KERNEL, tensorir/planted_bug.py) must fail it.

Tolerances: a correct fp32 tiny CNN agrees with onnxruntime to a max relative error below 1e-5
and a cosine above 0.99999 (the defaults, rtol 1e-3 and min-cosine 0.9999, leave a wide margin);
the planted kernel scales an activation by 1.5, which moves the logits by more than 10%.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tensorir.cli import main
from tensorir.planted_bug import ENV

TINY = str(Path(__file__).resolve().parents[2] / "examples" / "tiny_cnn.onnx")


@pytest.fixture(scope="module", autouse=True)
def _own_cache(tmp_path_factory):
    """Compiled kernels and tuning databases go to a temporary folder, never ~/.cache/tensorir."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIR_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("TIR_DEBUG", raising=False)
        mp.delenv(ENV, raising=False)
        yield


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    captured = capsys.readouterr()
    return rc, captured.err.strip(), captured.out


def _figures(out: str) -> list[dict[str, float]]:
    """The figures of every output line: max_abs_err, max_rel_err, cosine, sqnr."""
    rows = []
    for m in re.finditer(r"max_abs_err=(\S+) max_rel_err=(\S+) cosine=(\S+) sqnr=(\S+)dB (ok|FAIL)", out):
        cos = m[3]
        cosine = 1 - float(cos[2:]) if cos.startswith("1-") else float(cos)
        rows.append(
            {
                "abs": float(m[1]),
                "rel": float(m[2]),
                "cosine": cosine,
                "sqnr": float(m[4]),
                "ok": m[5] == "ok",
            }
        )
    return rows


@pytest.fixture(scope="module")
def broken_folder(tmp_path_factory) -> str:
    """tiny_cnn compiled for the host with its first conv kernel (node relu1) made wrong."""
    out = str(tmp_path_factory.mktemp("broken") / "build")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV, "relu1")
        assert main(["compile", TINY, "--records", "none", "-o", out]) == 0
    return out


@pytest.mark.parametrize("target", ["host", "opencl:pocl"])
def test_onnx_is_compiled_for_the_target_and_passes(target, capsys):
    rc, err, out = _cli(["run", TINY, "--target", target, "--records", "none", "--compare-ort"], capsys)
    assert rc == 0, err
    assert f"for {target}:" in out  # compiled, not the reference interpreter
    (figs,) = _figures(out)
    assert figs["ok"] and figs["rel"] < 1e-5 and figs["cosine"] > 0.99999 and figs["sqnr"] > 80
    assert "compare-ort: ok: 1 outputs within rtol=0.001 atol=0.0001 min-cosine=0.9999" in out


def test_backend_ref_runs_the_reference_interpreter(capsys):
    rc, err, out = _cli(["run", TINY, "--backend", "ref", "--compare-ort"], capsys)
    assert rc == 0, err
    assert "compiled" not in out
    (figs,) = _figures(out)
    assert figs["ok"] and figs["rel"] < 1e-5


def test_broken_kernel_fails_in_a_compiled_folder(broken_folder, capsys):
    rc, err, out = _cli(["run", broken_folder, "--compare-ort", "--onnx", TINY], capsys)
    assert rc == 1, (err, out)
    (figs,) = _figures(out)
    assert not figs["ok"] and figs["rel"] > 0.1 and figs["sqnr"] < 20
    assert "logits:" in out and "compare-ort: FAIL: 1 of 1 outputs outside" in out


@pytest.mark.parametrize("target", ["host", "opencl:pocl"])
def test_broken_kernel_fails_when_compiled_on_the_fly(target, monkeypatch, capsys):
    monkeypatch.setenv(ENV, "relu1")
    rc, err, out = _cli(["run", TINY, "--target", target, "--records", "none", "--compare-ort"], capsys)
    assert rc == 1, (err, out)
    (figs,) = _figures(out)
    assert not figs["ok"] and figs["rel"] > 0.1


def test_tolerance_options_decide(broken_folder, capsys):
    argv = ["run", broken_folder, "--compare-ort", "--onnx", TINY]
    rc, err, out = _cli([*argv, "--rtol", "1", "--min-cosine", "0.99"], capsys)
    assert rc == 0, (err, out)
    rc, err, out = _cli([*argv, "--rtol", "1", "--min-cosine", "0.99999"], capsys)  # cosine 0.9993
    assert rc == 1, (err, out)


def test_sub_folder_samples(tmp_path, capsys):
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(2)]
    for k, x in enumerate(xs):
        (tmp_path / "samples" / f"s{k}").mkdir(parents=True)
        np.save(tmp_path / "samples" / f"s{k}" / "input.npy", x)
    argv = [
        "run",
        TINY,
        "--inputs",
        str(tmp_path / "samples"),
        "--save",
        str(tmp_path / "out"),
        "--compare-ort",
    ]
    rc, err, out = _cli(argv, capsys)
    assert rc == 0, err
    assert "sample s0:" in out and "sample s1:" in out
    assert len(_figures(out)) == 2 and all(f["ok"] and f["rel"] < 1e-5 for f in _figures(out))
    assert "compare-ort: ok: 2 outputs" in out
    for k, x in enumerate(xs):  # each sample's output is the one of that input given alone
        np.save(tmp_path / "x.npy", x)
        argv = ["run", TINY, "--input", f"input={tmp_path / 'x.npy'}", "--save", str(tmp_path / "one")]
        rc, err, _ = _cli(argv, capsys)
        assert rc == 0, err
        alone = np.load(tmp_path / "one" / "logits.npy")
        np.testing.assert_array_equal(np.load(tmp_path / "out" / f"s{k}" / "logits.npy"), alone)


def test_one_sample_folder_equals_input_file(tmp_path, capsys):
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (tmp_path / "s").mkdir()
    np.save(tmp_path / "s" / "input.npy", x)
    rc, err, _ = _cli(["run", TINY, "--inputs", str(tmp_path / "s"), "--save", str(tmp_path / "a")], capsys)
    assert rc == 0, err
    argv = ["run", TINY, "--input", f"input={tmp_path / 's' / 'input.npy'}", "--save", str(tmp_path / "b")]
    rc, err, _ = _cli(argv, capsys)
    assert rc == 0, err
    np.testing.assert_array_equal(
        np.load(tmp_path / "a" / "logits.npy"), np.load(tmp_path / "b" / "logits.npy")
    )


# ---- bad input to the new options: one line, exit 2 ----------------------------------------------
def _folder(tmp_path: Path, files: dict[str, tuple]) -> str:
    d = tmp_path / "in"
    for rel, shape in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        np.save(d / rel, np.zeros(shape, np.float32))
    d.mkdir(exist_ok=True)
    return str(d)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--rtol", "abc"], ["--rtol 'abc'", "number"]),
        (["--atol", "-1"], ["--atol -1"]),
        (["--min-cosine", "2"], ["--min-cosine 2"]),
        (["--backend", "gpu"], ["--backend 'gpu'", "compiled or ref"]),
        (["--backend", "ref", "--target", "host"], ["--target", "--backend compiled"]),
        (["--target", "nope"], ["nope"]),
        (["--inputs", "/nonexistent/samples"], ["--inputs", "not a folder"]),
    ],
)
def test_bad_options(extra, words, capsys):
    rc, err, _ = _cli(["run", TINY, *extra], capsys)
    assert rc == 2, err
    assert err and len(err.splitlines()) == 1 and "Traceback" not in err
    for w in words:
        assert w in err, (w, err)


@pytest.mark.parametrize(
    ("files", "words"),
    [
        ({}, ["no <input>.npy files"]),
        ({"input.npy": (1, 3, 32, 32), "s1/input.npy": (1, 3, 32, 32)}, ["both .npy files and sub-folders"]),
        ({"inptu.npy": (1, 3, 32, 32)}, ["inptu.npy names no model input"]),
        ({"s0/input.npy": (1, 3, 32, 32), "s1/other.npy": (1, 3, 32, 32)}, ["s1", "other.npy"]),
        ({"s0/input.npy": (1, 3, 32, 32), "s1/x.npy": (1,)}, ["s1", "x.npy"]),
    ],
)
def test_bad_inputs_folder(files, words, tmp_path, capsys):
    rc, err, _ = _cli(["run", TINY, "--inputs", _folder(tmp_path, files)], capsys)
    assert rc == 2, err
    assert err and len(err.splitlines()) == 1
    for w in words:
        assert w in err, (w, err)


def test_inputs_folder_with_a_wrong_shape(tmp_path, capsys):
    rc, err, _ = _cli(["run", TINY, "--inputs", _folder(tmp_path, {"input.npy": (1, 3, 8, 8)})], capsys)
    assert rc == 2, err
    assert "input" in err and "[1, 3, 8, 8]" in err


def test_input_and_inputs_together(tmp_path, capsys):
    folder = _folder(tmp_path, {"input.npy": (1, 3, 32, 32)})
    rc, err, _ = _cli(["run", TINY, "--inputs", folder, "--input", f"input={folder}/input.npy"], capsys)
    assert rc == 2 and "--input and --inputs" in err


@pytest.mark.parametrize("extra", [["--target", "host"], ["--backend", "ref"], ["--records", "none"]])
def test_build_options_refused_for_a_compiled_folder(extra, broken_folder, capsys):
    rc, err, _ = _cli(["run", broken_folder, *extra], capsys)
    assert rc == 2 and extra[0] in err and len(err.splitlines()) == 1
