"""README stays the user guide: its commands are what CI runs, and it names every built-in option."""

from __future__ import annotations

import re
from pathlib import Path

from corral.framework.plugins import get_registry

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    command = next(line.strip() for line in ci.splitlines() if "pytest" in line and not line.startswith("#"))
    assert command in README, f"README must show the test command CI runs: {command}"
    assert README.index("scripts/bootstrap && .venv/bin/python train.py") < README.index(command)


def test_readme_lists_every_builtin_option() -> None:
    missing = []
    for reg in get_registry():
        if reg.source.distribution != "corral":
            continue
        row = re.search(rf"^\| `{reg.kind}` \|(.*)$", README, re.M)
        if row is None or f"`{reg.name}`" not in row.group(1):
            missing.append(f"{reg.kind}={reg.name}")
    assert not missing, f"README's config-group table lacks: {missing}"
