"""``trainer.stop_at_eval_return``: the run ends after the first evaluation that reaches the target,
names it as its stop reason, and a resume of it says it already finished until the target is lifted."""

from __future__ import annotations

import json
from pathlib import Path

from corral.framework.resume import finished_message
from corral.testing.modules import import_path

TINY = import_path(Path(__file__).resolve().parents[1] / "conf" / "tiny_runs.py", "tiny_runs")
train = TINY.train_evaluating
evaluations = TINY.eval_returns


def test_the_run_stops_at_the_first_evaluation_that_reaches_the_target_and_a_resume_says_so(tmp_path: Path) -> None:
    # the target: the first return above every earlier one, before the last epoch, of the same run without a
    # target (same seed, same episodes): the run with it must stop right there
    free = tmp_path / "free"
    train(free, "trainer.n_epochs=6", "trainer.eval_every=1", "trainer.eval_episodes=2")
    returns = evaluations(free)
    rising = [i for i in range(1, 5) if returns[i] > max(returns[:i])]
    assert rising, returns  # PPO on CartPole improves on its first evaluation within five epochs
    first = rising[0]
    target = returns[first]

    run = tmp_path / "run"
    done = train(run, "trainer.n_epochs=6", "trainer.eval_every=1", "trainer.eval_episodes=2",
                 f"trainer.stop_at_eval_return={target}")
    assert evaluations(run) == returns[:first + 1]  # the same epochs, up to the first that reached it
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == f"stop_at_eval_return={target:g}" and summary["epochs"] == first + 1
    assert f"corral: completed (stop_at_eval_return={target:g} reached) after {first + 1} epoch" in done.stderr

    again = train(run, f"trainer.resume={run}")
    assert again.stderr.strip().splitlines()[-1] == finished_message(
        run, f"stop_at_eval_return={target:g}", first + 1, summary["env_steps"])
    assert "trainer.stop_at_eval_return=null (or a higher one)" in again.stderr
    # lifting the target trains on to n_epochs, with the same episodes as the run without one
    train(run, f"trainer.resume={run}", "trainer.stop_at_eval_return=null")
    assert evaluations(run) == returns


def test_the_target_is_checked_only_where_an_evaluation_ran(tmp_path: Path) -> None:
    """Evaluating every 3 epochs, a target every evaluation reaches stops the run at epoch 3, not 1."""
    run = tmp_path / "run"
    train(run, "trainer.n_epochs=6", "trainer.eval_every=3", "trainer.eval_episodes=2",
          "trainer.stop_at_eval_return=-1")
    assert json.loads((run / "summary.json").read_text())["epochs"] == 3


def test_a_target_without_evaluation_is_one_warning(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = train(run, "trainer.n_epochs=2", "trainer.eval_every=0", "trainer.stop_at_eval_return=100")
    warnings = [line for line in done.stderr.splitlines() if line.startswith("corral: warning:")]
    assert warnings == ["corral: warning: trainer.stop_at_eval_return=100.0 has no effect while trainer.eval_every=0: "
                        "it applies only with trainer.eval_every > 0; set that, or leave trainer.stop_at_eval_return "
                        "at its default (null)"], done.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["stop_reason"] == "n_epochs=2"
