"""A SavedModel with two signatures: `tir.compile(signature=)` and `tir compile --signature`
compile the one named (default serving_default); an unknown name is one line naming the
signatures there, exit 2."""

from __future__ import annotations

import numpy as np
import pytest

import tensorir as tir
from tensorir.cli import main
from tensorir.errors import TirError
from tests.frontend.tf_fixtures import save_two_signatures

pytestmark = pytest.mark.tf  # TensorFlow in the process: a session of its own (quickstart.sh)


@pytest.fixture(scope="module")
def two_signatures(tmp_path_factory) -> str:
    return save_two_signatures(tmp_path_factory.mktemp("sigs") / "saved")


X = np.arange(6, dtype=np.float32).reshape(2, 3)


def test_compile_picks_the_signature(two_signatures):
    (default,) = tir.compile(two_signatures).run({"x": X})
    (double,) = tir.compile(two_signatures, signature="double").run({"x": X})
    np.testing.assert_allclose(default, X + 1)
    np.testing.assert_allclose(double, X * 2)


def test_unknown_signature(two_signatures, tmp_path, capsys):
    with pytest.raises(TirError, match="nope"):
        tir.compile(two_signatures, signature="nope")
    assert main(["compile", two_signatures, "--signature", "nope", "-o", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err and "double" in err, err
