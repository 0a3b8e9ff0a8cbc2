"""FragmentWorker: exactly n_envs * timesteps_per_call steps per rollout; episodes continue across calls."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import EnvFactory, EnvSpec
from corral.plugins.policies.mlp import MLPPolicy
from corral.plugins.workers.default import DefaultWorker
from corral.plugins.workers.fragment import FragmentWorker

F, M, T, O = StepType.FIRST, StepType.MID, StepType.TERMINAL, StepType.TIMEOUT


def make_policy(env_id: str = "CartPole-v1") -> MLPPolicy:
    torch.manual_seed(0)
    return MLPPolicy(EnvSpec.from_env(gym.make(env_id)), hidden_sizes=(16, 16))


def make_worker(k: int, steps: int, env_id: str = "CartPole-v1", limit: int = 200,
                seeds: list | None = None, policy: MLPPolicy | None = None) -> FragmentWorker:
    worker = FragmentWorker(seed=4, max_episode_length=limit, n_envs=k, timesteps_per_call=steps, env_seeds=seeds)
    worker.update_env(EnvFactory(env_id))
    worker.update_agent(copy.deepcopy(policy) if policy is not None else make_policy(env_id))
    return worker


def per_env(batch: EpisodeBatch, k: int, steps: int) -> list[list[EpisodeBatch]]:
    """The pieces of each environment: env j's pieces hold exactly ``steps`` steps, env by env."""
    out: list[list[EpisodeBatch]] = [[] for _ in range(k)]
    done = 0
    for piece in batch.split():
        j = done // steps
        out[j].append(piece)
        done += len(piece)
        assert done <= (j + 1) * steps, "a piece straddles two environments"
    assert done == k * steps
    return out


@pytest.mark.parametrize("k, steps", [(1, 1), (3, 7), (4, 50)])
def test_rollout_has_exactly_n_envs_times_timesteps_per_call_steps(k: int, steps: int) -> None:
    worker = make_worker(k, steps)
    for _ in range(4):
        b = worker.rollout()
        assert len(b) == k * steps
        assert b.allow_fragments
        per_env(b, k, steps)
    # min_steps / n_episodes do not change the size.
    assert len(worker.rollout(min_steps=1000)) == k * steps
    assert len(worker.rollout(n_episodes=1)) == k * steps


def test_fragments_continue_across_calls() -> None:
    k, steps = 3, 9
    worker = make_worker(k, steps)
    previous: list[EpisodeBatch | None] = [None] * k
    n_continued = 0
    for _ in range(12):
        pieces = per_env(worker.rollout(), k, steps)
        for j in range(k):
            first = pieces[j][0]
            for p in pieces[j][1:]:
                assert p.step_types[0] in (F, T)  # a new episode (T: one-step episode)
            for p in pieces[j][:-1]:
                assert p.complete.all()
            prev = previous[j]
            if prev is not None and not prev.complete[0]:
                # A fragment that ended MID is continued by one starting MID at its last observation.
                assert prev.step_types[-1] == M
                assert first.step_types[0] != F
                assert len(first) == 1 or first.step_types[0] == M
                np.testing.assert_array_equal(first.observations[0], prev.last_observations[0])
                n_continued += 1
            elif prev is not None:
                assert first.step_types[0] == F or (len(first) == 1 and first.step_types[0] in (T, O))
            previous[j] = pieces[j][-1]
    assert n_continued > 0


def test_completed_episodes_end_terminal_or_timeout() -> None:
    k, steps, limit = 4, 25, 20
    worker = make_worker(k, steps, limit=limit)
    stitched: list[list[EpisodeBatch]] = [[] for _ in range(k)]
    whole = []
    for _ in range(6):
        for j, pieces in enumerate(per_env(worker.rollout(), k, steps)):
            for p in pieces:
                stitched[j].append(p)
                if p.complete[0]:
                    whole.append(_join(stitched[j]))  # validates FIRST, MID..., end
                    stitched[j] = []
    ends = np.array([w.step_types[-1] for w in whole])
    lengths = np.array([len(w) for w in whole])
    last = np.concatenate([w.last_observations for w in whole])
    fell = (np.abs(last[:, 0]) > 2.4) | (np.abs(last[:, 2]) > 12 * 2 * np.pi / 360)
    assert set(ends.tolist()) == {T, O}
    np.testing.assert_array_equal(ends == T, fell)  # TERMINAL exactly where the pole fell
    assert (lengths[ends == O] == limit).all() and (lengths <= limit).all()


def _join(pieces: list[EpisodeBatch]) -> EpisodeBatch:
    """One episode from its consecutive fragments."""
    return EpisodeBatch(
        observations=np.concatenate([p.observations for p in pieces]),
        actions=np.concatenate([p.actions for p in pieces]),
        rewards=np.concatenate([p.rewards for p in pieces]),
        step_types=np.concatenate([p.step_types for p in pieces]),
        lengths=[sum(len(p) for p in pieces)],
        last_observations=pieces[-1].last_observations,
        agent_infos={k: np.concatenate([p.agent_infos[k] for p in pieces]) for k in pieces[0].agent_infos},
    )


@pytest.mark.parametrize("env_id, limit", [("CartPole-v1", 200), ("Pendulum-v1", 30)])
def test_stitched_fragments_are_the_default_workers_episodes(env_id: str, limit: int) -> None:
    """Env j of a fragment worker runs the same episodes as a default worker seeded like slot j."""
    k, steps = 3, 13
    seeds = np.random.SeedSequence(42).spawn(k)
    policy = make_policy(env_id)
    worker = make_worker(k, steps, env_id, limit, seeds=seeds, policy=policy)
    stitched: list[list[EpisodeBatch]] = [[] for _ in range(k)]
    episodes: list[list[EpisodeBatch]] = [[] for _ in range(k)]
    for _ in range(10):
        for j, pieces in enumerate(per_env(worker.rollout(), k, steps)):
            for p in pieces:
                stitched[j].append(p)
                if p.complete[0]:
                    episodes[j].append(_join(stitched[j]))
                    stitched[j] = []
    for j in range(k):
        assert episodes[j]
        d = DefaultWorker(seed=0, max_episode_length=limit, env_seeds=[seeds[j]])
        d.update_env(EnvFactory(env_id))
        d.update_agent(copy.deepcopy(policy))
        for ep in episodes[j]:
            expected = d.rollout()
            assert ep.equals(expected, infos_rtol=1e-5), ep.differences(expected)


def test_new_agent_restarts_episodes_new_params_continue_them() -> None:
    k, steps = 3, 5
    worker = make_worker(k, steps)
    worker.rollout()
    params = worker.agent.get_param_values()
    worker.update_agent(params)  # parameters only: the running episodes go on
    b = worker.rollout()
    assert any(p[0].step_types[0] == M for p in per_env(b, k, steps))
    worker.update_agent(make_policy())  # a new agent: fresh episodes everywhere
    b = worker.rollout()
    assert all(p[0].step_types[0] == F for p in per_env(b, k, steps))


def test_state_dict_restores_running_fragments() -> None:
    a = make_worker(3, 11, "Pendulum-v1", 30)
    a.rollout()
    state = copy.deepcopy(a.state_dict())
    expected = EpisodeBatch.concatenate(a.rollout(), a.rollout())
    b = make_worker(3, 11, "Pendulum-v1", 30)
    b.load_state_dict(state)
    got = EpisodeBatch.concatenate(b.rollout(), b.rollout())
    assert got.equals(expected), got.differences(expected)
    assert got.step_types[0] == M  # it really continued a running episode


def test_fragments_carry_the_length_and_return_of_their_episode_so_far() -> None:
    """``prior_length``/``prior_return``: 0 for a fragment that starts its episode, else what came before."""
    worker = make_worker(2, 37, env_id="Pendulum-v1", limit=100)
    running = [(0, 0.0), (0, 0.0)]  # per env: steps and return of its running episode
    for _ in range(6):
        batch = worker.rollout()
        for j, pieces in enumerate(per_env(batch, 2, 37)):
            for piece in pieces:
                prior_length = int(piece.episode_infos["prior_length"][0])
                prior_return = float(piece.episode_infos["prior_return"][0])
                if piece.step_types[0] == F:
                    assert (prior_length, prior_return) == (0, 0.0)
                    running[j] = (0, 0.0)
                assert prior_length == running[j][0]
                assert prior_return == pytest.approx(running[j][1], rel=1e-6)
                total = (running[j][0] + len(piece), running[j][1] + float(piece.rewards.astype(np.float64).sum()))
                running[j] = (0, 0.0) if piece.complete[0] else total
                if piece.complete[0]:
                    assert total[0] == 100  # Pendulum: every episode runs to the limit
    worker.shutdown()
