"""DQN options that count in whole epochs: ``algo.target_update_interval`` (the online network changes
only in an epoch's gradient steps, and the target is updated before them) and the epsilon schedule
(counted from step 0, so the warm-up uses part or all of it). A given value that is not what runs is
one ``corral: warning:`` line at a fresh run's first epoch; ``dqn/epsilon`` is the epsilon the epoch's
episodes were collected with."""

from __future__ import annotations

import logging
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from off_policy_helpers import rows, train, warning_lines

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import EnvSpec
from corral.plugins.algos.dqn import DQN
from corral.plugins.policies.qnet import QNetworkPolicy

SPEC = EnvSpec(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), 500)
# Epochs of exactly 200 CartPole steps (fragments), 8 gradient steps each, no evaluation.
RUN = ["algo=dqn", "env=cartpole", "policy=qnet", "policy.hidden_sizes=[32,32]", "worker=fragment", "worker.n_envs=1",
       "worker.timesteps_per_call=200", "trainer.batch_size=200", "algo.batch_size=32", "algo.gradient_steps=8",
       "algo.min_buffer_size=200", "trainer.max_env_steps=null", "trainer.eval_every=0", "logger=[csv]"]


def options(*changes: str) -> list[str]:
    """RUN with ``changes`` in place of its own values of the same keys (a key given twice is a warning
    line of its own)."""
    changed = {change.split("=", 1)[0]: change for change in changes}
    return [changed.pop(o.split("=", 1)[0], o) for o in RUN] + list(changed.values())


def batch(n: int, seed: int = 0) -> EpisodeBatch:
    """One episode of ``n`` random steps."""
    rng = np.random.default_rng(seed)
    step_types = np.full(n, StepType.MID, np.uint8)
    step_types[0], step_types[-1] = StepType.FIRST, StepType.TERMINAL
    return EpisodeBatch(observations=rng.uniform(-1, 1, (n, 4)).astype(np.float32), actions=rng.integers(0, 2, n),
                        rewards=np.ones(n), step_types=step_types, lengths=[n],
                        last_observations=np.zeros((1, 4), np.float32))


def make(**kwargs: object) -> DQN:
    """A small DQN (seeded torch) with ``kwargs`` over its defaults."""
    torch.manual_seed(0)
    options: dict = {"min_buffer_size": 20, "batch_size": 16, "buffer_size": 10_000, **kwargs}
    return DQN(SPEC, QNetworkPolicy(SPEC, hidden_sizes=[16]), **options)


def target_params(algo: DQN) -> list[torch.Tensor]:
    """Copies of the target network's parameters."""
    return [p.detach().clone() for p in algo.target.parameters()]


# ------------------------------------------------------------------------------ target_update_interval
def test_an_interval_below_the_epoch_is_one_warning_line_and_runs_as_the_epoch(tmp_path: Path) -> None:
    """``algo.target_update_interval=50`` with epochs of 200 steps copies the target once an epoch, exactly
    the run of 200, and says so once at the start (not on resume); 200 says nothing, and 400 is another run."""
    asked = train(tmp_path / "asked", *options("algo.target_update_interval=50", "trainer.n_epochs=3"))
    assert asked.returncode == 0, asked.stderr[-3000:]
    assert warning_lines(asked) == [
        "corral: warning: algo.target_update_interval=50 counts in whole epochs (the online network changes only in "
        "an epoch's gradient steps and the target is updated before them; this run's first epoch collected 200 "
        "steps), so the target network is copied once an epoch, every 200 environment steps, not every 50; for "
        "every 50, make trainer.batch_size a divisor of it (trainer.batch_size=50), or set "
        "algo.target_update_interval=200 to ask for what runs"], asked.stderr
    runs = train(tmp_path / "runs", *options("algo.target_update_interval=200", "trainer.n_epochs=3"))
    assert runs.returncode == 0, runs.stderr[-3000:]
    assert warning_lines(runs) == [], runs.stderr
    assert rows(tmp_path / "asked") == rows(tmp_path / "runs")  # what the line says
    other = train(tmp_path / "other", *options("algo.target_update_interval=400", "trainer.n_epochs=3"))
    assert other.returncode == 0, other.stderr[-3000:]
    assert warning_lines(other) == [], other.stderr
    assert rows(tmp_path / "other") != rows(tmp_path / "runs")  # the test can tell one copy an epoch from fewer

    resumed = train(tmp_path / "asked", f"trainer.resume={tmp_path / 'asked'}", "trainer.n_epochs=4")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert warning_lines(resumed) == [], resumed.stderr  # said when the run started, not again


def test_an_interval_above_the_epoch_that_is_no_multiple_updates_every_one_or_two_epochs(
        caplog: pytest.LogCaptureFixture) -> None:
    """300 with epochs of 200 steps: the copies come before the gradient steps of the epochs that pass
    300, 600, 900, 1200 (epochs 1, 2, 4, 5): every 1 or 2 epochs, as the line says."""
    algo = make(target_update_interval=300, min_buffer_size=200, learning_rate=1e-2, gradient_steps=2)
    with caplog.at_level(logging.WARNING, logger="corral.rl.off_policy"):
        copied = []
        for epoch in range(6):
            before = target_params(algo)
            online = [p.detach().clone() for p in algo.policy.parameters()]
            algo.train_once(epoch, batch(200, seed=epoch))
            after = target_params(algo)
            if not all(torch.equal(a, b) for a, b in zip(before, after)):
                assert all(torch.equal(a, b) for a, b in zip(online, after))  # the online net before the steps
                copied.append(epoch)
    assert copied == [1, 2, 4, 5]
    assert [r.getMessage() for r in caplog.records] == [
        "corral: algo.target_update_interval=300 counts in whole epochs (the online network changes only in an "
        "epoch's gradient steps and the target is updated before them; this run's first epoch collected 200 steps), "
        "so the target network is copied before the gradient steps of each epoch that passes a multiple of 300 "
        "steps: every 1 or 2 epochs (200 or 400 environment steps), not every 300; for every 300, make "
        "trainer.batch_size a divisor of it (trainer.batch_size=150), or set algo.target_update_interval to a "
        "multiple of the epoch's steps (200 or 400 are the nearest)"]


def test_soft_updates_below_the_epoch_are_one_update_per_epoch_as_the_line_says() -> None:
    """``tau=0.5`` every 10 steps with epochs of 20: two soft updates back to back, which is one update of
    tau 0.75 every 20 steps; the line's 'what runs' gives the same target network."""
    asked = make(target_update_interval=10, tau=0.5, gradient_steps=0)
    assert asked.first_epoch_warnings(20) == [
        "algo.target_update_interval=10 counts in whole epochs (the online network changes only in an epoch's "
        "gradient steps and the target is updated before them; this run's first epoch collected 20 steps), so the 2 "
        "soft updates (algo.tau=0.5) each epoch passes are applied back to back before its gradient steps: one "
        "update of tau=0.75 every 20 environment steps, not one of tau=0.5 every 10; for every 10, make "
        "trainer.batch_size a divisor of it (trainer.batch_size=10), or set algo.target_update_interval=20 "
        "algo.tau=0.75 to ask for what runs"]
    runs = make(target_update_interval=20, tau=0.75, gradient_steps=0)
    assert runs.first_epoch_warnings(20) == []
    for algo in (asked, runs):
        with torch.no_grad():
            for p in algo.target.parameters():
                p.zero_()
        algo.train_once(0, batch(20))
    for a, b in zip(asked.target.parameters(), runs.target.parameters()):
        torch.testing.assert_close(a, b)
    uneven = make(target_update_interval=30, tau=0.5)
    assert uneven.target_update_warning(100) == (
        "algo.target_update_interval=30 counts in whole epochs (the online network changes only in an epoch's "
        "gradient steps and the target is updated before them; this run's first epoch collected 100 steps), so the 3 "
        "or 4 soft updates (algo.tau=0.5) each epoch passes are applied back to back before its gradient steps: one "
        "update of tau=0.875 or 0.9375 every 100 environment steps, not one of tau=0.5 every 30; for every 30, make "
        "trainer.batch_size a divisor of it (trainer.batch_size=30), or set algo.target_update_interval=100 and the "
        "algo.tau you want each epoch")


def test_interval_one_a_multiple_and_the_default() -> None:
    """1 cannot be had with any useful batch; a multiple of the epoch and the default (null: SB3's 10,000,
    not asked for exactly) say nothing."""
    assert make(target_update_interval=1).target_update_warning(200) == (
        "algo.target_update_interval=1 counts in whole epochs (the online network changes only in an epoch's "
        "gradient steps and the target is updated before them; this run's first epoch collected 200 steps), so the "
        "target network is copied once an epoch, every 200 environment steps, not every 1; target updates come at "
        "most once an epoch, so lower trainer.batch_size for more, or set algo.target_update_interval=200 to ask "
        "for what runs")
    assert make(target_update_interval=400).target_update_warning(200) is None
    default = make(min_buffer_size=None)
    assert default.config.target_update_interval is None and default.target_update_interval == 10_000
    assert default.first_epoch_warnings(2048) == []


# ------------------------------------------------------------------------------ the epsilon schedule
def test_the_epsilon_column_is_the_epsilon_the_epoch_acted_with(tmp_path: Path) -> None:
    """Warm-up of one epoch, epsilon 1 -> 0 over 400 steps counted from step 0: the epochs starting at
    steps 0, 200, 400 and 600 act at 1, 0.5, 0 and 0, and their rows say so."""
    proc = train(tmp_path / "run", *options("algo.exploration_steps=400", "algo.exploration_final_eps=0.0",
                                            "trainer.n_epochs=4"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [float(r["dqn/epsilon"]) for r in rows(tmp_path / "run")] == [1.0, 0.5, 0.0, 0.0]

    algo = make(exploration_steps=100, exploration_final_eps=0.1, gradient_steps=1)
    for epoch, n in enumerate((10, 40, 100)):
        acted = float(algo.get_agent_update()["epsilon"])  # what the workers get for this epoch
        assert algo.train_once(epoch, batch(n, seed=epoch))["dqn/epsilon"] == pytest.approx(acted)


def test_an_initial_epsilon_the_warm_up_outlasts_is_one_warning_line(tmp_path: Path) -> None:
    """``algo.exploration_steps=300`` within a warm-up of 400 steps, and ``algo.exploration_steps=0``:
    ``algo.exploration_initial_eps`` is never acted with (the run is the same without it), and the run
    says so once."""
    late = ["algo.min_buffer_size=400", "algo.exploration_steps=300", "trainer.n_epochs=3"]
    asked = train(tmp_path / "asked", *options(*late, "algo.exploration_initial_eps=0.3"))
    assert asked.returncode == 0, asked.stderr[-3000:]
    assert warning_lines(asked) == [
        "corral: warning: algo.exploration_initial_eps=0.3 is never used: the epsilon schedule counts environment "
        "steps from step 0, the warm-up's included, and its algo.exploration_steps=300 end within the warm-up, so "
        "epsilon is 1 for the first 400 environment steps (2 epochs, until the buffer holds algo.min_buffer_size "
        "transitions) and algo.exploration_final_eps=0.05 after them; to use it, set algo.exploration_steps above "
        "400 (the first learned epoch then acts at the schedule's value at step 400)"], asked.stderr
    without = train(tmp_path / "without", *options(*late))
    assert without.returncode == 0, without.stderr[-3000:]
    assert warning_lines(without) == [], without.stderr
    assert rows(tmp_path / "asked") == rows(tmp_path / "without")
    assert [float(r["dqn/epsilon"]) for r in rows(tmp_path / "asked")] == [1.0, 1.0, pytest.approx(0.05)]

    zero = train(tmp_path / "zero", *options("algo.exploration_steps=0", "algo.exploration_initial_eps=0.5",
                                               "trainer.n_epochs=2"))
    assert zero.returncode == 0, zero.stderr[-3000:]
    assert warning_lines(zero) == [
        "corral: warning: algo.exploration_initial_eps=0.5 is never used: algo.exploration_steps=0 ends the epsilon "
        "schedule at step 0, so epsilon is 1 for the first 200 environment steps (1 epoch, until the buffer holds "
        "algo.min_buffer_size transitions) and algo.exploration_final_eps=0.05 after them; to use it, set "
        "algo.exploration_steps above 200 (the first learned epoch then acts at the schedule's value at step 200)"]
    zero_without = train(tmp_path / "zero_without", *options("algo.exploration_steps=0", "trainer.n_epochs=2"))
    assert zero_without.returncode == 0, zero_without.stderr[-3000:]
    assert rows(tmp_path / "zero") == rows(tmp_path / "zero_without")


def test_an_initial_epsilon_the_schedule_reaches_says_nothing_and_the_warm_up_note_tells_how_far() -> None:
    """A schedule that outlasts the warm-up uses ``exploration_initial_eps`` (no line); the warm-up
    warning's note says how much of the schedule the warm-up takes; 1 (the default, what the warm-up
    acts with) and an initial value equal to the final one are never warned about."""
    used = make(min_buffer_size=300, exploration_steps=1000, exploration_initial_eps=0.5, exploration_final_eps=0.0)
    assert used.initial_eps_warning(200) is None
    assert used.first_epoch_warnings(200) == [
        "algo.min_buffer_size=300 counts in whole epochs (the workers' policy changes only between epochs, and this "
        "run's first epoch collected 200 steps), so the first 400 environment steps (2 epochs) act at epsilon 1 "
        "(uniformly random actions), not the first 300, and they use the first 400 of the epsilon schedule's 1,000 "
        "steps (it counts from step 0, from algo.exploration_initial_eps=0.5), so the first learned epoch acts at "
        "epsilon 0.3; for 300, make trainer.batch_size a divisor of it (trainer.batch_size=150), or set "
        "algo.min_buffer_size to a multiple of the epoch's steps (400 is what runs now)"]
    assert make(min_buffer_size=400, exploration_steps=300).initial_eps_warning(200) is None  # 1: the default
    assert make(min_buffer_size=400, exploration_steps=0, exploration_initial_eps=0.1,
                exploration_final_eps=0.1).initial_eps_warning(200) is None
