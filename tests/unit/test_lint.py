"""The tree stays ruff-clean (lint and format), so CI catches style drift."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_is_clean():
    proc = _ruff("check", ".")
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_ruff_format_is_clean():
    proc = _ruff("format", "--check", ".")
    assert proc.returncode == 0, proc.stdout[-3000:]
