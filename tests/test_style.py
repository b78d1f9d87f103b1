"""The repository stays formatted and lint-clean: ``ruff check`` and ``ruff format --check`` (pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    try:
        import ruff  # noqa: F401
    except ImportError:
        pytest.fail("ruff is not installed: pip install -r requirements.txt (it pins ruff)")
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_passes():
    out = _ruff("check", "--no-cache", "--output-format", "concise", ".")
    assert out.returncode == 0, (
        f"ruff check found problems (fix them, or run `ruff check --fix .`):\n{out.stdout}{out.stderr}"
    )


def test_ruff_format_leaves_every_file_as_it_is():
    out = _ruff("format", "--no-cache", "--diff", ".")
    assert out.returncode == 0, f"files need `ruff format .`:\n{out.stdout[-6000:]}{out.stderr}"
