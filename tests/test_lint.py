"""The code stays clean: ruff (lint and import order) and mypy pass with the settings in
pyproject.toml, and pre-commit runs the same checks for those who use it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_tool(module: str, *args: str, timeout: float = 280) -> subprocess.CompletedProcess[str]:
    """``python -m <module> args`` in the repository root (where pyproject.toml configures it)."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_ruff_passes() -> None:
    pytest.importorskip("ruff", reason="ruff is in the dev extra: pip install 'corral[dev]'")
    result = run_tool("ruff", "check", "--no-fix", "--output-format", "concise", ".")
    assert result.returncode == 0, f"ruff check . found problems:\n{result.stdout}{result.stderr}"


def test_ruff_checks_import_order_and_type_ignores(tmp_path: Path) -> None:
    """The configured rules are live: an unsorted import block and a blanket ``type: ignore`` fail."""
    pytest.importorskip("ruff")
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport os\n\nx: int = os.sep + sys.platform  # type: ignore\n")
    result = run_tool("ruff", "check", "--no-fix", "--no-cache", "--output-format", "concise",
                      "--config", str(ROOT / "pyproject.toml"), str(bad))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "I001" in result.stdout and "PGH003" in result.stdout, result.stdout


def test_mypy_passes() -> None:
    pytest.importorskip("mypy", reason="mypy is in the dev extra: pip install 'corral[dev]'")
    result = run_tool("mypy", timeout=290)
    assert result.returncode == 0, f"mypy (files and settings from pyproject.toml) found errors:\n{result.stdout}"
    assert "Success: no issues found" in result.stdout


def test_pre_commit_runs_the_same_checks() -> None:
    config = (ROOT / ".pre-commit-config.yaml").read_text()
    for command in ("ruff check", "mypy", "lint-imports"):
        assert f"entry: {command}" in config, f".pre-commit-config.yaml has no hook running {command}"
