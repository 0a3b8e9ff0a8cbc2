"""corral.results.writable: why a directory could not be created, found before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.results.writable import directory_problem


def test_a_directory_that_can_be_made_has_no_problem_and_is_not_made(tmp_path: Path) -> None:
    assert directory_problem(tmp_path) is None
    assert directory_problem(tmp_path / "a" / "b") is None
    assert list(tmp_path.iterdir()) == []  # the check leaves nothing behind


def test_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    assert directory_problem(tmp_path / "f" / "x" / "y") == f"{tmp_path / 'f'} is a file, not a directory"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_file_system_that_takes_no_new_directory() -> None:
    problem = directory_problem("/proc/corral/x")
    assert problem is not None and problem.startswith("/proc takes no new directory (")
