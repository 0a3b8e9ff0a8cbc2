"""``corral eval <run> key=value``: an override its run would ignore (a field's ``applies_if``, here one on
another group's setting: ``env.goal_radius`` under the dense reward and ``worker=default``) is one
``corral: warning:`` line; the run's own values, given when it was trained, are not the evaluation's to
undo and are not named again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 300


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command as a user runs it (bounded)."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture(scope="module")
def point_nav_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-epoch PPO point-robot run trained with a value it ignores (``trainer.eval_episodes`` while
    ``trainer.eval_every=0``), which training named."""
    where = tmp_path_factory.mktemp("applies_if_eval")
    trained = run([sys.executable, str(REPO / "train.py"), "env=point_nav", "trainer.n_epochs=1",
                   "trainer.batch_size=40", "trainer.eval_every=0", "trainer.eval_episodes=3", "trainer.progress=false",
                   "logger=[csv]", f"hydra.run.dir={where / 'run'}"], where)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "corral: warning: trainer.eval_episodes=3 has no effect" in trained.stderr
    return where / "run"


def test_corral_eval_names_an_override_the_run_would_ignore(point_nav_run: Path) -> None:
    proc = run([sys.executable, "-m", "corral.framework.cli", "eval", str(point_nav_run), "env.goal_radius=0.5",
                "--episodes", "1", "-o", ""], point_nav_run.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [line for line in proc.stderr.splitlines() if "warning" in line] == [
        "corral: warning: env.goal_radius=0.5 has no effect while env.sparse=false and worker=default, which has no "
        "setting context_reward: the dense reward is minus the distance to the goal; it applies only with "
        "env.sparse=true or worker.context_reward=sparse_reward or worker.context_reward=success; set that, or leave "
        "env.goal_radius at its default (0.2)"], proc.stderr
    applies = run([sys.executable, "-m", "corral.framework.cli", "eval", str(point_nav_run), "env.goal_radius=0.5",
                   "env.sparse=true", "--episodes", "1", "-o", ""], point_nav_run.parent)
    assert applies.returncode == 0 and "warning" not in applies.stderr, applies.stderr[-3000:]


def test_corral_eval_does_not_name_the_runs_own_values_again(point_nav_run: Path) -> None:
    proc = run([sys.executable, "-m", "corral.framework.cli", "eval", str(point_nav_run), "--episodes", "1", "-o", ""],
               point_nav_run.parent)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr[-3000:]
