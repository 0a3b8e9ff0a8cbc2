"""Exact values for pieces the learning tests cover only loosely (issue 18, section 5): PPO's clipped
objective and its gradient, SAC's soft target with its entropy term, the replay ring's slots and
what it can sample, and the discount / GAE-lambda wiring of ``OnPolicyAlgorithm.process``."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import EnvSpec
from corral.plugins.algos.ppo import PPO
from corral.plugins.algos.sac import SAC
from corral.plugins.policies.mlp import MLPPolicy
from corral.plugins.policies.tanh_gaussian import TanhGaussianPolicy
from corral.rl.replay_buffer import ReplayBuffer

F, M, T, O = StepType.FIRST, StepType.MID, StepType.TERMINAL, StepType.TIMEOUT
DISCRETE = EnvSpec(gym.spaces.Box(-10, 10, (1,), np.float32), gym.spaces.Discrete(2), 100)


def ppo(**kwargs: object) -> PPO:
    torch.manual_seed(0)
    return PPO(DISCRETE, MLPPolicy(DISCRETE, hidden_sizes=[4]), None, seed=0, vf_hidden_sizes=[4], **kwargs)


# ---------------------------------------------------------------------------------------- PPO
def test_ppo_clipped_objective_value_and_gradient() -> None:
    """``mean(max(-A r, -A clip(r, 1-eps, 1+eps)))``: the pessimistic bound, with no gradient through
    a ratio clipped on the side the advantage pushes it (above 1+eps for A > 0, below 1-eps for A < 0)."""
    algo = ppo(clip_range=0.2, normalize_advantages=False, ent_coef=0.0)
    ratio = torch.tensor([1.5, 0.5, 1.1, 0.5, 1.5], dtype=torch.float64)
    adv = torch.tensor([2.0, -1.0, 1.0, 1.0, -1.0], dtype=torch.float64)
    log_prob = ratio.log().clone().requires_grad_(True)
    values = torch.zeros(5, requires_grad=True)
    stats: dict[str, list[float]] = {}
    algo.clipped_step(adv, log_prob, torch.zeros(5, dtype=torch.float64), values, torch.zeros(5),
                      torch.zeros(5), stats)
    # per step: clipped 1.2*2 -> -2.4; clipped -(-1)*0.8 -> 0.8; inside -> -1.1;
    # below the range with A > 0 the unclipped -0.5 is the max; above it with A < 0 the unclipped 1.5
    assert stats["loss/policy"][0] == pytest.approx((-2.4 + 0.8 - 1.1 - 0.5 + 1.5) / 5, abs=1e-12)
    assert stats["ppo/clip_fraction"][0] == pytest.approx(0.8)
    # d loss / d log_prob_i = -A_i r_i / N where the unclipped term is the max, else 0
    expected_grad = torch.tensor([0.0, 0.0, -1.1, -0.5, 1.5], dtype=torch.float64) / 5
    assert log_prob.grad is not None
    assert torch.allclose(log_prob.grad, expected_grad, atol=1e-12, rtol=0)
    assert log_prob.grad[0] == 0 and log_prob.grad[1] == 0  # outside the clip range, on both sides


def test_ppo_at_ratio_one_is_the_plain_policy_gradient() -> None:
    algo = ppo(clip_range=0.1, normalize_advantages=False)
    adv = torch.tensor([3.0, -2.0], dtype=torch.float64)
    log_prob = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    stats: dict[str, list[float]] = {}
    algo.clipped_step(adv, log_prob, torch.zeros(2, dtype=torch.float64), torch.zeros(2, requires_grad=True),
                      torch.zeros(2), torch.zeros(2), stats)
    assert stats["loss/policy"][0] == pytest.approx(-0.5)
    assert torch.equal(log_prob.grad, torch.tensor([-1.5, 1.0], dtype=torch.float64))


# ---------------------------------------------------------------------------------------- SAC
BOX = EnvSpec(gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32), 200)


def test_sac_soft_target_exact_value_with_the_entropy_term(monkeypatch: pytest.MonkeyPatch) -> None:
    """``y = r + gamma (1 - d) (min(Q1', Q2')(s', a') - alpha log pi(a'|s'))`` with ``a' ~ pi(s')``."""
    torch.manual_seed(0)
    policy = TanhGaussianPolicy(BOX, hidden_sizes=[8])
    algo = SAC(BOX, policy, discount=0.9, auto_entropy=False, initial_alpha=0.3, qf_hidden_sizes=[8],
               min_buffer_size=1, batch_size=3, buffer_size=10)
    with torch.no_grad():  # Q1'(s', a') = 10, Q2'(s', a') = 7 everywhere: the min is Q2'
        for net, value in ((algo.target_qf1, 10.0), (algo.target_qf2, 7.0)):
            for p in net.parameters():
                p.zero_()
            net[-1].bias.fill_(value)
    g = torch.Generator()
    g.manual_seed(5)
    batch = {"observations": torch.rand(3, 3, generator=g), "next_observations": torch.rand(3, 3, generator=g),
             "actions": torch.zeros(3, 1), "rewards": torch.tensor([1.0, -2.0, 0.5]),
             "terminals": torch.tensor([0.0, 1.0, 0.0])}
    # The step draws a ~ pi(s) and then a' ~ pi(s') from the algorithm's generator: replay those draws.
    replay = torch.Generator()
    replay.set_state(algo.torch_rng.get_state())
    with torch.no_grad():
        policy.rsample(batch["observations"], replay)
        _, next_log_prob = policy.rsample(batch["next_observations"], replay)
    assert next_log_prob.abs().min() > 0.1  # the entropy term is not negligible here
    captured: list[torch.Tensor] = []
    original = torch.nn.functional.mse_loss

    def spy(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        captured.append(target.detach().clone())
        return original(q, target)

    monkeypatch.setattr(torch.nn.functional, "mse_loss", spy)
    algo.gradient_step(batch)
    expected = batch["rewards"] + 0.9 * (1 - batch["terminals"]) * (7.0 - 0.3 * next_log_prob)
    assert expected[1] == -2.0  # a TERMINAL step: the reward alone
    assert torch.allclose(captured[0], expected, atol=1e-5, rtol=0), (captured[0], expected)
    assert torch.equal(captured[0], captured[1])  # both critics regress onto the same target


# ---------------------------------------------------------------------------------------- replay ring
def pair(first: float) -> EpisodeBatch:
    """One two-step episode whose observations are ``first`` and ``first + 1``."""
    return EpisodeBatch(observations=np.array([[first], [first + 1]], np.float32), actions=np.zeros(2, np.int64),
                        rewards=np.array([first, first + 1], np.float32), step_types=np.array([F, O], np.uint8),
                        lengths=[2], last_observations=np.array([[first + 100]], np.float32))


def slots(buf: ReplayBuffer) -> list[float]:
    return buf.get(np.arange(buf.capacity))["observations"][:, 0].tolist()


def sampled(buf: ReplayBuffer, n: int = 4000) -> set[float]:
    return set(buf.sample(n)["observations"][:, 0].tolist())


def test_replay_ring_slots_after_small_adds_and_what_sampling_can_return() -> None:
    buf = ReplayBuffer(5, seed=0)
    buf.add(pair(0))
    assert slots(buf) == [0, 1, 0, 0, 0] and len(buf) == 2
    assert sampled(buf) == {0, 1}  # never the unfilled (zero) slots
    buf.add(pair(2))
    assert slots(buf) == [0, 1, 2, 3, 0] and len(buf) == 4
    assert sampled(buf) == {0, 1, 2, 3}
    assert buf.get(np.array([3]))["next_observations"][0, 0] == 102  # last step: the episode's last observation
    buf.add(pair(4))  # slot 4, then wraps to slot 0
    assert slots(buf) == [5, 1, 2, 3, 4] and len(buf) == 5 and buf.total_added == 6
    assert sampled(buf) == {1, 2, 3, 4, 5}  # full: every slot, the oldest transition (0) gone
    buf.add(pair(6))
    assert slots(buf) == [5, 6, 7, 3, 4]
    assert sampled(buf) == {3, 4, 5, 6, 7}
    assert buf.sample_indices(10_000).max() == 4


# ---------------------------------------------------------------------------------------- GAE wiring
def test_process_uses_the_discount_and_gae_lambda_it_was_given() -> None:
    """Known advantages for discount 0.9 and lambda 0.5 (swapping them changes every delta)."""
    algo = ppo(discount=0.9, gae_lambda=0.5)
    linear = torch.nn.Linear(1, 1, bias=False)  # V(s) = s, so the values are the observations
    with torch.no_grad():
        linear.weight.fill_(1.0)
    algo.value_function = linear
    episodes = EpisodeBatch(
        observations=np.array([[1.0], [2.0], [3.0], [0.5], [-1.0]], np.float32),
        actions=np.zeros(5, np.int64), rewards=np.array([1.0, 0.0, 2.0, 1.0, 1.0], np.float32),
        step_types=np.array([F, M, T, F, O], np.uint8), lengths=[3, 2],
        last_observations=np.array([[50.0], [4.0]], np.float32),
        agent_infos={"log_prob": np.zeros(5, np.float32)},
    )
    data = algo.process(episodes)
    # episode 1 (TERMINAL, the 50 after it never counts): deltas 1.8, 0.7, -1
    a = [1.8 + 0.45 * (0.7 + 0.45 * -1.0), 0.7 + 0.45 * -1.0, -1.0]
    # episode 2 (TIMEOUT, bootstraps from V(4) = 4): deltas -0.4, 5.6
    b = [-0.4 + 0.45 * 5.6, 5.6]
    expected = np.array(a + b)
    assert np.allclose(data["advantages"].numpy(), expected, atol=1e-6, rtol=0)
    assert np.allclose(data["returns"].numpy(), expected + np.array([1, 2, 3, 0.5, -1]), atol=1e-6, rtol=0)
    assert math.isclose(float(data["values"][3]), 0.5)
