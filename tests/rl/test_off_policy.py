"""OffPolicyAlgorithm's shared parts: Polyak averaging, gradient steps per environment step, config errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.plugins.algos.dqn import DQN
from corral.plugins.policies.qnet import QNetworkPolicy
from corral.rl.off_policy import polyak_update

SPEC = EnvSpec(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2), 50)


def test_polyak_update_moves_targets_by_tau_and_copies_at_one() -> None:
    src = [torch.tensor([1.0, 2.0]), torch.tensor(4.0)]
    tgt = [torch.tensor([0.0, 0.0]), torch.tensor(0.0)]
    polyak_update(src, tgt, 0.25)
    assert tgt[0].tolist() == [0.25, 0.5] and tgt[1].item() == 1.0
    polyak_update(src, tgt, 0.5)
    assert tgt[0].tolist() == [0.625, 1.25]
    polyak_update(src, tgt, 1.0)
    assert tgt[0].tolist() == [1.0, 2.0] and tgt[1].item() == 4.0
    with pytest.raises(ValueError):
        polyak_update(src, tgt[:1], 0.5)


def test_gradient_steps_follow_utd_ratio_with_fractions_carried() -> None:
    algo = DQN(SPEC, QNetworkPolicy(SPEC), min_buffer_size=0, utd_ratio=0.3)
    algo.replay_buffer._size = 1
    counts = [algo.n_gradient_steps(5) for _ in range(10)]
    assert counts == [1, 2, 1, 2, 1, 2, 1, 2, 1, 2] and sum(counts) == 15
    fixed = DQN(SPEC, QNetworkPolicy(SPEC), min_buffer_size=0, gradient_steps=7)
    fixed.replay_buffer._size = 1
    assert fixed.n_gradient_steps(1000) == 7


def test_no_gradient_steps_before_min_buffer_size() -> None:
    algo = DQN(SPEC, QNetworkPolicy(SPEC), min_buffer_size=10, utd_ratio=1.0)
    assert not algo.learning_started and algo.n_gradient_steps(100) == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "algo.batch_size"),
        ({"min_buffer_size": 500, "buffer_size": 100}, "algo.buffer_size"),
        ({"utd_ratio": 0.0}, "algo.utd_ratio"),
        ({"gradient_steps": -1}, "algo.gradient_steps"),
        ({"tau": 0.0}, "algo.tau"),
    ],
)
def test_bad_values_are_config_errors_naming_the_option(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DQN(SPEC, QNetworkPolicy(SPEC), **kwargs)
