"""``algo=dqn``: double-DQN targets, epsilon schedule, target updates, learning CartPole, exact resume, train.py."""

from __future__ import annotations

import copy
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from off_policy_helpers import assert_resume_is_exact, evals, rows, train

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.plugins.algos.dqn import DQN
from corral.plugins.policies.qnet import QNetworkPolicy

SPEC = EnvSpec(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), 500)
SMALL = ["experiment=dqn_cartpole", "policy.hidden_sizes=[32,32]", "algo.min_buffer_size=200",
         "algo.batch_size=32", "trainer.eval_every=2", "trainer.eval_episodes=2", "trainer.max_env_steps=null",
         "logger=[csv]"]


def random_batch(n: int = 100, seed: int = 0) -> EpisodeBatch:
    rng = np.random.default_rng(seed)
    step_types = np.full(n, StepType.MID, np.uint8)
    step_types[0] = StepType.FIRST
    step_types[-1] = StepType.TERMINAL
    return EpisodeBatch(observations=rng.uniform(-1, 1, (n, 4)).astype(np.float32),
                        actions=rng.integers(0, 2, n), rewards=np.ones(n), step_types=step_types, lengths=[n],
                        last_observations=np.zeros((1, 4), np.float32))


def make(**kwargs: object) -> DQN:
    torch.manual_seed(0)
    options: dict = {"min_buffer_size": 20, "batch_size": 16, "buffer_size": 1000, **kwargs}
    return DQN(SPEC, QNetworkPolicy(SPEC, hidden_sizes=[16]), **options)


def test_epsilon_schedule_travels_in_the_agent_update() -> None:
    algo = make(exploration_steps=100, exploration_initial_eps=1.0, exploration_final_eps=0.1, gradient_steps=1)
    assert float(algo.get_agent_update()["epsilon"]) == 1.0
    algo.train_once(0, random_batch(10))  # before min_buffer_size: still fully random
    assert float(algo.get_agent_update()["epsilon"]) == 1.0
    algo.train_once(1, random_batch(40))  # 50 steps: half way down the schedule
    assert float(algo.get_agent_update()["epsilon"]) == pytest.approx(0.55)
    stats = algo.train_once(2, random_batch(100))  # collected at 0.55, which is what its row says
    assert float(algo.get_agent_update()["epsilon"]) == pytest.approx(0.1) and stats["dqn/epsilon"] == pytest.approx(0.55)


def test_target_network_is_copied_every_target_update_interval_steps() -> None:
    algo = make(target_update_interval=100, learning_rate=1e-2, gradient_steps=2)
    initial = [p.detach().clone() for p in algo.target.parameters()]
    algo.train_once(0, random_batch(60))  # 60 steps: no interval passed, online net moves, target stays
    assert all(torch.equal(a, b) for a, b in zip(initial, algo.target.parameters()))
    online = [p.detach().clone() for p in algo.policy.parameters()]
    algo.train_once(1, random_batch(60))  # passes 100: the target takes the online weights before training
    assert all(torch.equal(a, b) for a, b in zip(online, algo.target.parameters()))
    soft = make(target_update_interval=10, tau=0.5, gradient_steps=0)
    with torch.no_grad():
        for p in soft.target.parameters():
            p.zero_()
    soft.train_once(0, random_batch(20))  # two intervals passed: two Polyak steps of 0.5
    for t, o in zip(soft.target.parameters(), soft.policy.parameters()):
        torch.testing.assert_close(t, 0.75 * o.detach())


@pytest.mark.parametrize("double", [True, False])
def test_targets_use_double_q_and_never_bootstrap_terminal_steps(double: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    algo = make(double=double, discount=0.5)
    obs = torch.zeros(2, 4)
    with torch.no_grad():  # online net prefers action 0, target net values action 0 at 2 and action 1 at 8
        for net, bias in ((algo.policy, (5.0, 1.0)), (algo.target, (2.0, 8.0))):
            for p in net.parameters():
                p.zero_()
            net.net[-1].bias.copy_(torch.tensor(bias))
    captured: dict[str, torch.Tensor] = {}
    original = torch.nn.functional.smooth_l1_loss

    def spy(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        captured["target"] = target
        return original(q, target)

    monkeypatch.setattr(torch.nn.functional, "smooth_l1_loss", spy)
    algo.gradient_step({"observations": obs, "next_observations": obs, "actions": torch.tensor([0, 1]),
                        "rewards": torch.ones(2), "terminals": torch.tensor([1.0, 0.0])})
    target = captured["target"].tolist()
    assert target[0] == 1.0  # TERMINAL: reward only
    assert target[1] == (1.0 + 0.5 * 2.0 if double else 1.0 + 0.5 * 8.0)  # TIMEOUT/MID: bootstrap


def test_continuous_actions_or_other_policies_are_config_errors() -> None:
    box = EnvSpec(SPEC.observation_space, gym.spaces.Box(-1, 1, (1,), np.float32))
    with pytest.raises(ConfigError, match="algo=dqn needs a Discrete action space"):
        DQN(box, QNetworkPolicy(SPEC))
    with pytest.raises(ConfigError, match="policy=qnet"):
        DQN(SPEC, torch.nn.Linear(1, 1))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="exploration_final_eps"):
        make(exploration_final_eps=1.5)


def test_state_dict_holds_the_buffer_and_restores_training_exactly() -> None:
    first = make(gradient_steps=4)
    first.train_once(0, random_batch(40, seed=1))
    state = copy.deepcopy(first.state_dict())
    second = make(gradient_steps=4, learning_rate=0.5)
    second.load_state_dict(state)
    assert first.train_once(1, random_batch(20, seed=2)) == second.train_once(1, random_batch(20, seed=2))
    for p, q in zip(first.policy.parameters(), second.policy.parameters()):
        assert torch.equal(p, q)


def test_dqn_learns_cartpole(tmp_path: Path) -> None:
    """15,000 steps of double DQN (64-unit network) take CartPole's evaluation return from about 10 to 100+."""
    run = tmp_path / "run"
    proc = train(run, "experiment=dqn_cartpole", "trainer.max_env_steps=15000", "policy.hidden_sizes=[64,64]",
                 "algo.exploration_steps=4000", "trainer.eval_every=4", "trainer.eval_episodes=5", "logger=[csv]",
                 timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    returns = evals(run)
    assert returns[0] < 50, returns  # greedy after the first 128 gradient steps
    assert np.mean(returns[-6:]) >= 80, returns  # a calibration run on this machine averaged 114


def test_resume_with_the_replay_buffer_is_exact(tmp_path: Path) -> None:
    assert_resume_is_exact(tmp_path, SMALL, n_epochs=6, stop_at=3)


def test_same_run_with_default_workers_on_local_and_multiprocessing(tmp_path: Path) -> None:
    """Whole episodes (worker=default) work too, and the sampler changes nothing (same seed, same run)."""
    common = ["algo=dqn", "env=cartpole", "policy=qnet", "policy.hidden_sizes=[32,32]", "algo.min_buffer_size=200",
              "algo.batch_size=32", "trainer.eval_every=2", "trainer.eval_episodes=2", "logger=[csv]",
              "worker=default", "trainer.batch_size=300", "trainer.n_epochs=3"]
    local = train(tmp_path / "local", *common, "sampler=local", "sampler.n_workers=2")
    assert local.returncode == 0, local.stderr[-3000:]
    mp = train(tmp_path / "mp", *common, "sampler=multiprocessing", "sampler.n_workers=2")
    assert mp.returncode == 0, mp.stderr[-3000:]
    assert rows(tmp_path / "local") == rows(tmp_path / "mp")
