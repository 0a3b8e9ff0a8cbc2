"""experiments/combine_seeds.py: per-seed learning.py results merged into one table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from corral.testing.modules import import_path

ROOT = Path(__file__).resolve().parents[2]


def write_part(root: Path, part: str, seed: int, returns: list[float], finished: bool) -> None:
    run = root / "experiments" / "runs" / part / f"seed{seed}"
    run.mkdir(parents=True)
    lines = ["epoch,env_steps,train/return_mean,eval/return_mean,time/total_s"]
    lines += [f"{i},{1000 * (i + 1)},{r},{r},{i + 1}" for i, r in enumerate(returns)]
    (run / "progress.csv").write_text("\n".join(lines) + "\n")
    if finished:
        (root / "experiments" / "results" / f"{part}.md").write_text(
            f"# {part}\n\nCommand: `python experiments/learning.py --name {part} --seeds {seed}`  \n\n"
            "| seed | reached_at_steps | wall_s |\n|---|---|---|\n| 1 | 2,000.0 | 12.5 |\n")


def test_parts_become_one_table_and_running_ones_are_marked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    combine = import_path(ROOT / "experiments" / "combine_seeds.py", "corral_experiments_combine_seeds")
    (tmp_path / "experiments" / "results").mkdir(parents=True)
    write_part(tmp_path, "demo_seed1", 1, [100.0, 480.0], finished=True)
    write_part(tmp_path, "demo_seed2", 2, [90.0, 200.0], finished=False)
    monkeypatch.setattr(combine, "ROOT", tmp_path)
    monkeypatch.setattr(sys, "argv", ["combine_seeds.py", "--name", "demo", "--threshold", "475",
                                      "--parts", "demo_seed1", "demo_seed2"])
    combine.main()
    md = (tmp_path / "experiments" / "results" / "demo.md").read_text()
    assert "- `python experiments/learning.py --name demo_seed1 --seeds 1`" in md
    assert "- `demo_seed2`: still running" in md
    rows = [line for line in md.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert rows[0].split("|")[2].strip() == "2,000.0" and rows[0].rstrip(" |").endswith("12.5")
    assert rows[1].split("|")[2].strip() == "not reached" and "in progress" in rows[1]
    assert "NOT every seed reached it" in md
