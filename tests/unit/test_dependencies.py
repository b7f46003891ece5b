"""Declared dependencies are used, and the heavy optional ones are imported only where needed.

Every distribution in pyproject.toml's `dependencies` (and in the `tf` and `plot` extras, which
package features use) must provide a module that tensorir/ or autotune/ imports; `import
tensorir`, building the CLI and compiling and running a model for the host must not import
pyopencl, TensorFlow, matplotlib, XGBoost or psycopg (a user without OpenCL or TensorFlow can use
them; only a PostgreSQL tuning database loads psycopg).
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tensorir.cli import main

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tensorir", "autotune")
FEATURE_EXTRAS = ("tf", "plot")  # extras the package code uses (dev: the tests' and tools')
HEAVY = ("pyopencl", "tensorflow", "matplotlib", "xgboost", "psycopg")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in FEATURE_EXTRAS:
        reqs += project["optional-dependencies"][extra]
    return [re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r).group(0) for r in reqs]


def _imported_modules() -> set[str]:
    """Top-level names of every module imported anywhere in the package code (lazy imports
    inside functions included)."""
    names: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names


def test_every_declared_dependency_is_imported():
    provides: dict[str, set[str]] = {}  # distribution -> the top-level modules it installs
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in dists:
            provides.setdefault(_canonical(dist), set()).add(module)
    imported = _imported_modules()
    unused, missing = [], []
    for dist in _declared():
        modules = provides.get(_canonical(dist))
        if not modules:
            missing.append(dist)
        elif not modules & imported:
            unused.append(f"{dist} (provides {', '.join(sorted(modules))})")
    assert not missing, f"declared but not installed here (pip install -e '.[dev,tf,plot]'): {missing}"
    assert not unused, f"declared in pyproject.toml but imported nowhere in {PACKAGES}: {unused}"


def _modules_after(code: str, tmp_path: Path) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    p = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_import_tensorir_imports_no_heavy_optional_package(tmp_path):
    assert _modules_after("import tensorir", tmp_path) == []


def test_the_cli_and_a_host_compile_import_no_heavy_optional_package(tmp_path):
    model = ROOT / "examples" / "tiny_cnn.onnx"
    code = (
        "import numpy as np\n"
        "import tensorir as tir\n"
        "from tensorir.cli import build_parser\n"
        "build_parser()\n"
        f"mod = tir.compile({str(model)!r}, target='host')\n"
        "mod.run({'input': np.zeros((1, 3, 32, 32), np.float32)})"
    )
    assert _modules_after(code, tmp_path) == []


def test_tune_plot_without_matplotlib_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    db, png = tmp_path / "t.db", tmp_path / "curve.png"
    argv = ["tune", str(ROOT / "examples" / "tiny_cnn.onnx"), "--db", str(db), "--plot", str(png)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "tir tune: error: --plot needs matplotlib, which is not installed: pip install -e '.[plot]'"
    ]
    assert not db.exists() and not png.exists()
