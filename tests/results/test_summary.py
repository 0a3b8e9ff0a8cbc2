"""corral.results.summary: atomic summary.json, finding runs, parsing overrides."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from corral.results.summary import find_runs, parse_overrides, read_run, unfinished_job_dirs, write_summary


def test_write_summary_is_atomic_and_leaves_no_temporary_file(tmp_path: Path, monkeypatch) -> None:
    write_summary(tmp_path, {"status": "completed", "env_steps": 10})

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        write_summary(tmp_path, {"status": "completed", "env_steps": 20})
    # The old summary is intact and the half-written one was removed.
    assert json.loads((tmp_path / "summary.json").read_text())["env_steps"] == 10
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_parse_overrides() -> None:
    assert parse_overrides(["algo=ppo", "+x.y=1", "++z=a=b", "~logger"]) == {
        "algo": "ppo", "x.y": "1", "z": "a=b", "logger": "~"}


def _job(root: Path, num: int, overrides: list[str], status: str = "completed", hydra_only: bool = False) -> Path:
    d = root / str(num)
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    summary = {"status": status, "env_steps": 100, "job": {"num": num}}
    if not hydra_only:
        summary["overrides"] = overrides
    write_summary(d, summary)
    return d


def test_find_runs_in_job_order_with_overrides(tmp_path: Path) -> None:
    for num in (10, 2, 1):
        _job(tmp_path, num, [f"seed={num}", "algo=ppo"], hydra_only=(num == 2))
    (tmp_path / "11" / ".hydra").mkdir(parents=True)  # a job that never finished
    runs = find_runs(tmp_path)
    assert [r.path.name for r in runs] == ["1", "2", "10"]
    # Without "overrides" in the summary they come from .hydra/overrides.yaml.
    assert runs[1].override_dict() == {"seed": "2", "algo": "ppo"}
    assert runs[0].status == "completed"
    assert unfinished_job_dirs(tmp_path) == [tmp_path / "11"]
    # A run directory itself is one run.
    assert [r.path for r in find_runs(tmp_path / "2")] == [tmp_path / "2"]
    assert read_run(tmp_path / "10").summary["job"]["num"] == 10


def test_find_runs_of_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        find_runs(tmp_path / "nope")
