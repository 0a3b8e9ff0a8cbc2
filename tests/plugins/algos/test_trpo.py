"""``algo=trpo``: the conjugate-gradient solver, the trust region, learning, exact resume, train.py."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

from corral.framework.errors import ConfigError
from corral.plugins.algos.trpo import TRPO, TRPOConfig, conjugate_gradient

ROOT = Path(__file__).resolve().parents[3]
# experiment=trpo_cartpole with 1,024-step epochs; evaluation every 2 epochs, 4 epochs in all.
E2E = ["experiment=trpo_cartpole", "trainer.eval_every=2", "trainer.eval_episodes=2", "trainer.progress=false"]


def test_conjugate_gradient_solves_a_known_spd_system() -> None:
    gen = torch.Generator().manual_seed(0)
    m = torch.randn(12, 12, generator=gen, dtype=torch.float64)
    a = m @ m.T + 0.5 * torch.eye(12, dtype=torch.float64)  # symmetric positive definite
    x_true = torch.randn(12, generator=gen, dtype=torch.float64)
    b = a @ x_true
    calls: list[int] = []

    def matvec(v: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return a @ v

    x = conjugate_gradient(matvec, b, n_iters=12)  # exact in n steps, up to rounding
    torch.testing.assert_close(x, x_true, rtol=1e-6, atol=1e-6)
    assert len(calls) <= 12
    # Fewer iterations: an approximation that still reduces the residual.
    x3 = conjugate_gradient(lambda v: a @ v, b, n_iters=3)
    assert torch.linalg.norm(a @ x3 - b) < torch.linalg.norm(b)


def _batch(corral_build: Callable[..., Any], *overrides: str) -> tuple[Any, Any]:
    run = corral_build("algo=trpo", "trainer.batch_size=1000", "seed=2", *overrides)
    return run, run.algo.sample(0, 1000)


@pytest.mark.parametrize("max_kl", [0.01, 0.001])
def test_line_search_keeps_the_step_inside_max_kl(corral_build: Callable[..., Any], max_kl: float) -> None:
    run, episodes = _batch(corral_build, f"algo.max_kl={max_kl}")
    algo: TRPO = run.algo
    obs = torch.as_tensor(episodes.observations, dtype=torch.float32)
    with torch.no_grad():
        before = algo.policy.distribution(obs)
    stats = algo.train_once(0, episodes)
    with torch.no_grad():
        kl = torch.distributions.kl_divergence(before, algo.policy.distribution(obs)).mean().item()
    assert 0 < kl <= max_kl, "a step was taken and it stayed inside the trust region"
    assert stats["trpo/kl"] == pytest.approx(kl, rel=1e-4)
    assert stats["trpo/improvement"] > 0 and 0 < stats["trpo/step_fraction"] <= 1


def test_gaussian_policy_step_stays_inside_max_kl(corral_build: Callable[..., Any]) -> None:
    run, episodes = _batch(corral_build, "env=pendulum", "algo.max_kl=0.005")
    obs = torch.as_tensor(episodes.observations, dtype=torch.float32)
    with torch.no_grad():
        before = run.algo.policy.distribution(obs)
    log_std = run.algo.policy.log_std.detach().clone()
    run.algo.train_once(0, episodes)
    with torch.no_grad():
        kl = torch.distributions.kl_divergence(before, run.algo.policy.distribution(obs)).mean().item()
    assert 0 < kl <= 0.005
    assert not torch.equal(log_std, run.algo.policy.log_std.detach()), "log_std is a policy parameter too"


def test_loss_policy_is_the_surrogate_after_the_accepted_step(corral_build: Callable[..., Any]) -> None:
    """``loss/policy`` is minus the surrogate ``mean(pi/pi_old * A)`` at the parameters the step left,
    so it says what the step achieved (it was the surrogate at the old parameters: ratio 1, about 0)."""
    run, episodes = _batch(corral_build)
    algo: TRPO = run.algo
    data = algo.process(episodes)  # before the update: the value function the advantages come from
    adv = (data["advantages"] - data["advantages"].mean()) / (data["advantages"].std() + 1e-8)
    stats = algo.train_once(0, episodes)
    with torch.no_grad():
        log_prob = algo.policy.log_prob_entropy(data["observations"], data["actions"])[0]
        after = float((torch.exp(log_prob - data["old_log_prob"]) * adv).mean())
    assert stats["trpo/step_fraction"] > 0, "the line search accepted a step"
    assert stats["loss/policy"] == pytest.approx(-after, rel=1e-4)
    assert stats["loss/policy"] < -1e-3, "the accepted step improved the surrogate, and the column shows it"
    assert stats["loss/policy"] == pytest.approx(-stats["trpo/improvement"], abs=1e-6)  # standardised: mean(A) = 0


def test_bad_hyperparameters_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="algo.max_kl"):
        TRPOConfig(max_kl=0)
    with pytest.raises(ConfigError, match="algo.backtrack_ratio"):
        TRPOConfig(backtrack_ratio=1.5)


def test_learns_cartpole_within_a_small_budget(corral_build: Callable[..., Any]) -> None:
    """From ~20 steps per episode to several times that within 12 epochs of 1,024 steps."""
    run = corral_build("experiment=trpo_cartpole", "trainer.max_env_steps=12000", "trainer.eval_every=0",
                       "trainer.snapshot_every=0", "logger=[csv]", "seed=1")
    run.train()
    with open(Path(run.trainer.log_dir) / "progress.csv") as f:
        returns = [float(r["train/return_mean"]) for r in csv.DictReader(f)]
    assert len(returns) >= 10
    assert returns[0] < 40
    assert max(returns[-3:]) > 150 and np.mean(returns[-3:]) > 3 * returns[0]


def test_trains_with_the_multiprocessing_sampler_unchanged(corral_build: Callable[..., Any]) -> None:
    run = corral_build("experiment=trpo_cartpole", "sampler=multiprocessing", "sampler.n_workers=2",
                       "trainer.max_env_steps=2048", "trainer.eval_every=0", "logger=[csv]")
    stats = run.train()
    assert stats["env_steps"] >= 2048 and 0 < stats["trpo/kl"] <= 0.01


def train(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``python train.py`` as a user runs it."""
    cmd = [sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={run_dir}", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)


def rows(run_dir: Path) -> list[dict[str, str]]:
    """progress.csv without the wall-clock columns."""
    with open(run_dir / "progress.csv") as f:
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python train.py experiment=trpo_cartpole`` for 4,096 steps."""
    run = tmp_path_factory.mktemp("trpo") / "full"
    proc = train(run, *E2E, "trainer.max_env_steps=4096")
    assert proc.returncode == 0, proc.stderr
    return run


def test_train_py_runs_the_trpo_cartpole_preset(full_run: Path) -> None:
    got = rows(full_run)
    assert len(got) == 4 and float(got[-1]["env_steps"]) >= 4096
    for key in ("trpo/kl", "trpo/step_fraction", "loss/value", "train/return_mean"):
        assert got[-1][key] != "", key
    assert got[1]["eval/return_mean"] != ""
    assert all(float(r["trpo/kl"]) <= 0.01 for r in got)


def test_the_loss_policy_column_is_what_each_step_achieved(full_run: Path) -> None:
    """progress.csv's ``loss/policy`` is ``-trpo/improvement`` (standardised advantages), not about 0."""
    for r in rows(full_run):
        assert float(r["loss/policy"]) == pytest.approx(-float(r["trpo/improvement"]), abs=1e-6), r
        assert float(r["trpo/step_fraction"]) == 0 or float(r["loss/policy"]) < -1e-4, r


def test_resume_continues_bit_for_bit(full_run: Path, tmp_path: Path) -> None:
    first = tmp_path / "first"
    assert train(first, *E2E, "trainer.max_env_steps=2048").returncode == 0
    resumed = tmp_path / "resumed"
    proc = train(resumed, f"trainer.resume={first}", "trainer.max_env_steps=4096")
    assert proc.returncode == 0, proc.stderr
    assert "resumed from" in proc.stderr
    expected = rows(full_run)
    got = rows(resumed)  # the first run's rows, then the resumed epochs: one curve
    assert [float(r["epoch"]) for r in got] == [0.0, 1.0, 2.0, 3.0]
    assert got == expected, "resumed epochs differ from the uninterrupted run"
