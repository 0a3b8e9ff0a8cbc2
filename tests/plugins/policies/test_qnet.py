"""policy=qnet: greedy argmax, epsilon from the agent update, per-slot exploration, dueling head."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.plugins.policies.qnet import QNetworkPolicy

SPEC = EnvSpec(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(3), 100)


def obs(n: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, 4)).astype(np.float32)


@pytest.mark.parametrize("dueling", [False, True])
def test_greedy_actions_are_the_argmax_of_q(dueling: bool) -> None:
    torch.manual_seed(0)
    policy = QNetworkPolicy(SPEC, hidden_sizes=[16, 16], dueling=dueling)
    policy.seed(np.random.SeedSequence(0).spawn(50))
    policy.epsilon.fill_(0.0)
    actions, infos = policy.get_actions(obs(50))
    with torch.no_grad():
        q = policy.q_values(torch.from_numpy(obs(50)))
    assert actions.dtype == np.int64 and infos == {}
    assert np.array_equal(actions, q.argmax(1).numpy())
    policy.epsilon.fill_(1.0)
    policy.deterministic = True  # evaluation ignores epsilon
    assert np.array_equal(policy.get_actions(obs(50))[0], actions)


def test_dueling_head_is_value_plus_centred_advantage() -> None:
    torch.manual_seed(0)
    policy = QNetworkPolicy(SPEC, hidden_sizes=[8], dueling=True)
    x = torch.from_numpy(obs(5))
    with torch.no_grad():
        h = policy.trunk(x)
        adv = policy.advantage_head(h)
        expected = policy.value_head(h) + adv - adv.mean(1, keepdim=True)
        q = policy.q_values(x)
    torch.testing.assert_close(q, expected)
    np.testing.assert_allclose(policy._q_numpy(obs(5)), q.numpy(), rtol=1e-5, atol=1e-6)


def test_epsilon_travels_in_the_agent_update_and_sets_the_exploration_rate() -> None:
    learner = QNetworkPolicy(SPEC, hidden_sizes=[16])
    learner.epsilon.fill_(0.25)
    worker = QNetworkPolicy(SPEC, hidden_sizes=[16])
    worker.set_param_values(learner.get_param_values())
    assert float(worker.epsilon) == 0.25
    worker.seed(np.random.SeedSequence(1).spawn(4000))
    greedy = QNetworkPolicy(SPEC, hidden_sizes=[16])
    greedy.set_param_values(learner.get_param_values())
    greedy.epsilon.fill_(0.0)
    greedy.seed(np.random.SeedSequence(1).spawn(4000))
    x = np.repeat(obs(1), 4000, axis=0)
    explored, _ = worker.get_actions(x)
    best, _ = greedy.get_actions(x)
    changed = (explored != best).mean()
    assert 0.25 * 2 / 3 - 0.04 < changed < 0.25 * 2 / 3 + 0.04  # a random action differs 2/3 of the time
    assert set(explored.tolist()) == {0, 1, 2}


def test_noise_is_per_slot_so_batching_does_not_change_actions() -> None:
    policy = QNetworkPolicy(SPEC, hidden_sizes=[32, 32])
    policy.epsilon.fill_(0.5)
    seeds = np.random.SeedSequence(3).spawn(6)
    batched = copy.deepcopy(policy)
    batched.seed(seeds)
    singles = []
    for s in seeds:
        p = copy.deepcopy(policy)
        p.seed([s])
        singles.append(p)
    x = obs(6)
    for _ in range(5):
        together, _ = batched.get_actions(x)
        alone = np.concatenate([p.get_actions(x[i : i + 1])[0] for i, p in enumerate(singles)])
        assert np.array_equal(together, alone)


def test_box_actions_are_a_config_error() -> None:
    with pytest.raises(ConfigError, match="policy=qnet needs a Discrete .* use algo=sac policy=tanh_gaussian"):
        QNetworkPolicy(EnvSpec(SPEC.observation_space, gym.spaces.Box(-1, 1, (2,), np.float32)))
    with pytest.raises(ConfigError, match="dueling"):
        QNetworkPolicy(SPEC, hidden_sizes=[], dueling=True)
