"""corral's PPO update is Stable-Baselines3's, to float precision: same weights, same batch, same
minibatch order in, the same weights out.

This pins down what issue 22's side-by-side runs compare: where corral's and SB3's PPO learning curves
differ, the update is not the cause. What the test feeds both: a 64x64 tanh policy and value network
(corral's weights copied into SB3's ``MlpPolicy``), SB3's PPO defaults (Adam eps 1e-5, one optimiser,
gradient clipping over all parameters, advantages standardised per minibatch, 10 epochs of 64-step
minibatches), and a batch with TERMINAL ends, one TIMEOUT (SB3 bootstraps it in its rollout, as
``r + gamma * V(last observation)``; corral in GAE) and a last episode cut by the rollout (both
bootstrap it from the value of its last observation). 2,100 steps, so the last minibatch is short, as
it is for corral's whole-episode batches. Needs the ``bench`` extra (Stable-Baselines3).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import EnvSpec
from corral.plugins.algos.ppo import PPO
from corral.plugins.policies.mlp import MLPPolicy

sb3 = pytest.importorskip("stable_baselines3", reason="needs the bench extra (Stable-Baselines3)")

N, EPOCHS, MINIBATCH, GAMMA = 2100, 10, 64, 0.99

#: SB3 warns that 2,100 steps leave a short last minibatch: that is the case under test.
pytestmark = pytest.mark.filterwarnings("ignore:You have specified a mini-batch size")


class _Permutations:
    """Hands out the same minibatch orders to corral (its ``rng``) and to SB3 (``np.random``)."""

    def __init__(self, n: int) -> None:
        self.orders = [np.random.default_rng(100 + e).permutation(n) for e in range(EPOCHS)]
        self.given = 0

    def permutation(self, n: int) -> np.ndarray:
        order = self.orders[self.given % EPOCHS]
        self.given += 1
        assert len(order) == n
        return order


def _linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def _batch(obs_dim: int, act_dim: int) -> tuple[EpisodeBatch, np.ndarray]:
    """Episodes of 50-400 steps: TERMINAL ends, the second a TIMEOUT, the last cut (MID); and the step
    index of each episode's start."""
    rng = np.random.default_rng(3)
    lengths: list[int] = []
    while sum(lengths) < N:
        lengths.append(min(N - sum(lengths), int(rng.integers(50, 400))))
    starts = np.cumsum([0] + lengths[:-1])
    ends = starts + np.array(lengths) - 1
    step_types = np.full(N, StepType.MID, np.int8)
    step_types[starts] = StepType.FIRST
    step_types[ends[:-1]] = StepType.TERMINAL
    step_types[ends[1]] = StepType.TIMEOUT
    batch = EpisodeBatch(
        observations=rng.normal(size=(N, obs_dim)).astype(np.float32),
        actions=(1.3 * rng.normal(size=(N, act_dim))).astype(np.float32),
        rewards=rng.normal(size=N).astype(np.float32),
        step_types=step_types,
        lengths=np.array(lengths, np.int64),
        last_observations=rng.normal(size=(len(lengths), obs_dim)).astype(np.float32),
        allow_fragments=True,
    )
    return batch, starts


def _both_updated(vf_coef: float, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, PPO, MLPPolicy]:
    """SB3's and corral's PPO after one update on the same batch from the same weights."""
    from stable_baselines3.common.logger import Logger

    torch.manual_seed(0)
    env = gym.make("Pendulum-v1")
    spec = EnvSpec.from_env(env)
    policy = MLPPolicy(spec, (64, 64), "tanh", 0.0)
    algo = PPO(spec, policy, None, seed=1, learning_rate=3e-4, n_epochs=EPOCHS, minibatch_size=MINIBATCH,
               clip_range=0.2, vf_coef=vf_coef, ent_coef=0.0, max_grad_norm=0.5, gae_lambda=0.95, discount=GAMMA)
    # corral's vf_coef multiplies 0.5 * mse, SB3's multiplies mse: SB3's 0.5 is corral's 1.0.
    peer = sb3.PPO("MlpPolicy", env, n_steps=N, batch_size=MINIBATCH, n_epochs=EPOCHS, learning_rate=3e-4, gamma=GAMMA,
                   gae_lambda=0.95, clip_range=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5, device="cpu",
                   policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": nn.Tanh,
                                  "log_std_init": 0.0})
    peer.set_logger(Logger(folder=None, output_formats=[]))  # configure() would make a /tmp/SB3-<time> directory
    net = peer.policy
    with torch.no_grad():
        for theirs, ours in zip(_linears(net.mlp_extractor.policy_net) + [net.action_net]
                                + _linears(net.mlp_extractor.value_net) + [net.value_net],
                                _linears(policy.net) + _linears(algo.value_function)):
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)
        net.log_std.copy_(policy.log_std)

    obs_shape, act_shape = spec.observation_space.shape, spec.action_space.shape
    assert obs_shape is not None and act_shape is not None
    batch, starts = _batch(obs_shape[0], act_shape[0])
    obs, actions = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    with torch.no_grad():
        log_prob = policy.log_prob_entropy(obs, actions)[0].numpy()
        values = net.predict_values(obs).numpy().ravel()
        timeout_value = float(net.predict_values(torch.from_numpy(batch.last_observations[1:2])))
        last_value = net.predict_values(torch.from_numpy(batch.last_observations[-1:]))
    batch.agent_infos["log_prob"] = log_prob
    rewards = batch.rewards.copy()
    rewards[starts[1] + batch.lengths[1] - 1] += GAMMA * timeout_value  # as SB3's collect_rollouts does
    buffer = peer.rollout_buffer
    buffer.reset()
    first = np.zeros(N, bool)
    first[starts] = True
    for t in range(N):
        buffer.add(batch.observations[t:t + 1], batch.actions[t:t + 1], rewards[t:t + 1], first[t:t + 1],
                   torch.tensor([values[t]]), torch.tensor([log_prob[t]]))
    buffer.compute_returns_and_advantage(last_values=last_value, dones=np.array([False]))

    algo.rng = _Permutations(N)  # type: ignore[assignment]
    monkeypatch.setattr(np.random, "permutation", _Permutations(N).permutation)  # RolloutBuffer.get's shuffle
    algo.train_once(0, batch)
    peer.train()
    return peer, algo, policy


@torch.no_grad()
def _largest_difference(peer: Any, algo: PPO, policy: MLPPolicy) -> float:
    net = peer.policy
    theirs = (_linears(net.mlp_extractor.policy_net) + [net.action_net] + _linears(net.mlp_extractor.value_net)
              + [net.value_net])
    ours = _linears(policy.net) + _linears(algo.value_function)
    diffs = [float((a.weight - b.weight).abs().max()) for a, b in zip(theirs, ours)]
    diffs += [float((a.bias - b.bias).abs().max()) for a, b in zip(theirs, ours)]
    return max(diffs + [float((net.log_std - policy.log_std).abs().max())])


def test_one_update_gives_sb3_s_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)  # as _both_updated: the policy's starting weights
    start = [p.detach().clone() for p in MLPPolicy(EnvSpec.from_env(gym.make("Pendulum-v1")), (64, 64)).parameters()]
    peer, algo, policy = _both_updated(1.0, monkeypatch)
    moved = max(float((a.detach() - b).abs().max()) for a, b in zip(policy.parameters(), start))
    assert moved > 1e-3  # the update did move the weights (from the same torch seed)
    assert _largest_difference(peer, algo, policy) < 1e-6


def test_the_comparison_sees_a_different_value_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same comparison with corral's value-loss weight halved: the weights part (so the test above can fail)."""
    assert _largest_difference(*_both_updated(0.5, monkeypatch)) > 1e-4
