"""``corral results``: a single run shows no spread; an interrupted sweep still groups by its swept keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from corral.results.summary import RunRecord
from corral.results.table import results_for_dir, results_table

ROOT = Path(__file__).resolve().parents[2]


def record(overrides: list[str], status: str = "completed", **summary: float) -> RunRecord:
    return RunRecord(path=Path("/runs") / "_".join(overrides), summary={"status": status, **summary},
                     overrides=overrides)


def test_a_single_run_shows_its_value_without_a_spread() -> None:
    runs = [record(["algo=ppo", "seed=1"], final_eval_return=10.0),
            record(["algo=vpg", "seed=1"], final_eval_return=20.0), record(["algo=vpg", "seed=2"], final_eval_return=30.0)]
    text = results_table(runs).format()
    ppo = next(line for line in text.splitlines() if "| ppo" in line)
    vpg = next(line for line in text.splitlines() if "| vpg" in line)
    assert "10.0" in ppo and "±" not in ppo
    assert "25.0 ± 7.1" in vpg


def _job(sweep: Path, num: int, overrides: list[str], status: str | None) -> None:
    job = sweep / str(num)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    if status is not None:
        summary = {"status": status, "overrides": overrides, "job": {"num": num}, "final_eval_return": 1.0 + num}
        (job / "summary.json").write_text(json.dumps(summary))


def test_an_interrupted_sweep_still_groups_by_the_swept_keys(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    _job(sweep, 0, ["algo=vpg", "seed=1"], "completed")
    _job(sweep, 1, ["algo=vpg", "seed=2"], "completed")
    _job(sweep, 2, ["algo=ppo", "seed=1"], "interrupted")
    _job(sweep, 3, ["algo=ppo", "seed=2"], None)  # never got to write a summary
    table = results_for_dir(sweep)
    assert table.keys == ["algo"]
    assert [r["key"] for r in table.rows] == [{"algo": "vpg"}]
    assert table.format().splitlines()[0].startswith("| algo ")
    assert len(table.skipped) == 2


def test_results_json_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    """``corral results --json | head -1``: no BrokenPipeError traceback."""
    sweep = tmp_path / "sweep"
    for i in range(1500):  # more than a pipe holds
        _job(sweep, i, [f"x={i}", "seed=1"], "completed")
    script = Path(sys.executable).parent / "corral"
    cmd = f"'{script}' results --json '{sweep}' | head -1"
    proc = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd}"], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "{"
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_plot_without_matplotlib_names_the_extra(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    _job(sweep, 0, ["x=1", "seed=1"], "completed")
    (sweep / "0" / "progress.csv").write_text("epoch,env_steps,train/return_mean\n0,100,1.0\n1,200,2.0\n")
    blocker = tmp_path / "no_matplotlib" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError(\"No module named 'matplotlib'\")\n")
    script = Path(sys.executable).parent / "corral"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(blocker.parent)}
    proc = subprocess.run([str(script), "plot", str(sweep)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "corral plot needs matplotlib: pip install 'corral[plot]'" in proc.stderr
    assert "Traceback" not in proc.stderr
