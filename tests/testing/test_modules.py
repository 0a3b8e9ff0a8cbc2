"""corral.testing.import_path: load a script by path, once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from corral.testing import import_path


def test_loads_once_and_registers_the_name(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text("import itertools\nCOUNT = next(itertools.count())\nfrom dataclasses import dataclass\n"
                      "@dataclass\nclass Row:\n    x: int = 1\n")
    try:
        module = import_path(script, "corral_test_script_module")
        assert module.Row().x == 1
        assert sys.modules["corral_test_script_module"] is module
        assert import_path(script, "corral_test_script_module") is module
    finally:
        sys.modules.pop("corral_test_script_module", None)


def test_a_failing_script_is_not_left_half_imported(tmp_path: Path) -> None:
    script = tmp_path / "broken.py"
    script.write_text("raise RuntimeError('broken script')\n")
    with pytest.raises(RuntimeError, match="broken script"):
        import_path(script, "corral_test_broken_script")
    assert "corral_test_broken_script" not in sys.modules
