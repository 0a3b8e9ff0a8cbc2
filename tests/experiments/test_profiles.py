"""experiments/profile_*.py: a short run prints and writes their table, one row per measured case, with
positive figures (profile_gpu_forward.py: without a GPU it says so and exits 2)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str, out: Path) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "experiments" / script), *args, "--out", str(out)],
                          cwd=out.parent, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("# ") and "Command: `python " in text and script in text
    return text


def _rows(text: str) -> list[list[str]]:
    """The cells of every table row; a header is the line above a ``|---`` line."""
    lines = text.splitlines()
    return [[c.strip() for c in line.strip("|").split("|")] for line, below in zip(lines, [*lines[1:], ""])
            if line.startswith("| ") and not below.startswith("|---")]


@pytest.mark.skipif(importlib.util.find_spec("envpool") is None or importlib.util.find_spec("mujoco") is None,
                    reason="needs the envpool and mujoco extras")
def test_profile_envpool_threads_times_both_phases(tmp_path: Path) -> None:
    text = _run("profile_envpool_threads.py", "--n-envs", "8", "--rounds", "1", "--steps", "20", out=tmp_path / "p.md")
    rows = _rows(text)
    assert [(r[0], r[1]) for r in rows] == [("8", "1"), ("8", "2")]
    assert all(len(r) == 12 for r in rows)
    for r in rows:
        policy_us, step_us, cores = (float(x.replace(",", "")) for x in r[2:5])
        assert policy_us > 0 and step_us > 0 and 0 < cores <= 3
    assert re.fullmatch(r"\d+\.\d\dx", rows[1][6])
    assert rows[0][10] == "" and float(rows[1][10].replace(",", "")) > 0  # pipelined halves: 2-thread row only
    assert re.fullmatch(r"\d+\.\d\dx", rows[1][11])


def test_profile_vector_multiprocessing_reports_each_mode(tmp_path: Path) -> None:
    text = _run("profile_vector_multiprocessing.py", "--rounds", "1", "--budget", "0.2", "--batch-size", "256",
                out=tmp_path / "mp.md")
    rows = _rows(text)
    assert [r[0] for r in rows] == ["whole episodes", "fragments", "carried whole episodes"]
    for r in rows:
        assert all(float(x.replace(",", "")) > 0 for x in r[1:4])
        busy = [float(x) for x in r[7].split(",")]
        assert len(busy) == 2 and all(0 < b <= 1.5 for b in busy)
        one, one_ratio, one_busy = float(r[10].replace(",", "")), r[11], float(r[12])  # one worker process alone
        assert one > 0 and re.fullmatch(r"\d+\.\d\dx", one_ratio) and 0 < one_busy <= 1.5


def test_profile_gpu_forward_times_each_variant_or_reports_no_gpu(tmp_path: Path) -> None:
    args = ["--hidden", "8x8", "--batch", "3", "5", "--calls", "20", "--rounds", "1"]
    if not torch.cuda.is_available():
        proc = subprocess.run([sys.executable, str(ROOT / "experiments" / "profile_gpu_forward.py"), *args],
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2 and "no GPU available" in proc.stderr
        return
    rows = _rows(_run("profile_gpu_forward.py", *args, out=tmp_path / "gpu.md"))
    assert [(r[0], r[1]) for r in rows] == [("8x8", "3"), ("8x8", "5")]
    for r in rows:
        assert all(float(x.rstrip("x")) > 0 for x in r[2:])
