"""``worker=vector worker.carry_episodes=true``: whole episodes from fragment rollouts, with no step thrown away."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
import test_vector as vector_tests  # tests/ is not a package; a module attribute is not collected again
from test_vector import make_worker, replay_cartpole

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.errors import ConfigError
from corral.testing import WorkerContract


class TestNativeCarryContract(vector_tests.TestNativeContract):
    """The worker contract, with the episodes carried across rollouts (native CartPole)."""

    worker_args = {"n_envs": 4, "backend": "native", "carry_episodes": True}


class TestSyncCarryContract(WorkerContract):
    """The same over SyncVectorEnv, whose running episodes (and the steps kept of them) go into snapshots."""

    worker_class = "vector"
    worker_args = {"n_envs": 3, "backend": "sync", "carry_episodes": True}


def _episode_key(batch: EpisodeBatch, i: int, starts: np.ndarray) -> bytes:
    """One episode's steps and last observation, as bytes."""
    sl = slice(int(starts[i]), int(starts[i] + batch.lengths[i]))
    return b"".join(np.ascontiguousarray(a).tobytes() for a in (
        batch.observations[sl], batch.actions[sl], batch.rewards[sl], batch.step_types[sl],
        batch.last_observations[i], *(batch.agent_infos[k][sl] for k in sorted(batch.agent_infos))))


def _episodes(batch: EpisodeBatch) -> Counter[bytes]:
    starts = np.cumsum(batch.lengths) - batch.lengths
    return Counter(_episode_key(batch, i, starts) for i in range(batch.n_episodes))


def _joined_by_hand(worker: Any, calls: list[int]) -> tuple[list[EpisodeBatch], int]:
    """Fragment rollouts of ``calls[i]`` steps per environment, joined per slot in plain Python: the
    complete episodes, and the steps of the episodes still running."""
    running: dict[int, list[EpisodeBatch]] = {}
    whole: list[EpisodeBatch] = []
    for per_env in calls:
        batch, slots = worker._rollout_fragments(per_env)
        for slot, piece in zip(slots.tolist(), batch.split()):
            chain = running.pop(slot, []) if piece.episode_infos["prior_length"][0] > 0 else []
            assert bool(chain) == bool(piece.episode_infos["prior_length"][0] > 0)
            chain.append(piece)
            if piece.complete.all():
                whole.append(EpisodeBatch(
                    observations=np.concatenate([c.observations for c in chain]),
                    actions=np.concatenate([c.actions for c in chain]),
                    rewards=np.concatenate([c.rewards for c in chain]),
                    step_types=np.concatenate([c.step_types for c in chain]),
                    lengths=np.array([sum(len(c) for c in chain)]),
                    last_observations=chain[-1].last_observations,
                    agent_infos={k: np.concatenate([c.agent_infos[k] for c in chain]) for k in chain[0].agent_infos}))
            else:
                running[slot] = chain
    return whole, sum(len(c) for chain in running.values() for c in chain)


@pytest.mark.parametrize("n_envs, max_episode_length, min_steps", [(8, 60, 100), (3, None, 250), (5, 20, 7)])
def test_carried_episodes_are_the_fragments_joined(n_envs: int, max_episode_length: int | None,
                                                   min_steps: int) -> None:
    """Over many rollouts the carried episodes are exactly the episodes a fragment worker with the same seed
    completes in the same fragment rollouts (joined by hand), each rollout at least ``min_steps`` steps of whole
    episodes that replay in CartPole, and every recorded transition is either returned or still kept."""
    carry = make_worker(n_envs=n_envs, max_episode_length=max_episode_length, carry_episodes=True)
    calls: list[int] = []  # the fragment rollouts the carrying worker made (steps per environment)
    fragments = carry._rollout_fragments

    def recorded(per_env: int) -> Any:
        calls.append(per_env)
        return fragments(per_env)

    carry._rollout_fragments = recorded  # type: ignore[method-assign]
    got: list[EpisodeBatch] = []
    for _ in range(12):
        batch = carry.rollout(min_steps=min_steps)
        assert len(batch) >= min_steps and batch.complete.all() and not batch.allow_fragments
        assert not batch.episode_infos
        got.append(batch)
    returned = EpisodeBatch.concatenate(*got)
    replay_cartpole(returned, max_episode_length=max_episode_length)
    # Episodes that span rollouts were sampled: the check below covers joins, not only one-rollout episodes.
    assert carry._carry is not None

    reference = make_worker(n_envs=n_envs, max_episode_length=max_episode_length, timesteps_per_call=1)
    whole, still_running = _joined_by_hand(reference, calls)
    assert reference.env_steps_taken == carry.env_steps_taken
    assert _episodes(returned) == _episodes(EpisodeBatch.concatenate(*whole))
    assert still_running == carry._carry.n_steps
    # No transition is thrown away: the VectorEnv's steps are the returned ones, the kept ones and the
    # NEXT_STEP reset steps (one per ended episode, except those whose reset step is the next one).
    assert carry._frag is not None
    resets = returned.n_episodes - int(carry._frag["prev_done"].sum())
    assert carry.env_steps_taken == len(returned) + carry._carry.n_steps + resets


def test_carried_episodes_have_first_and_end_step_types() -> None:
    """Each returned episode starts FIRST, ends TERMINAL or TIMEOUT, and is MID in between, however many
    rollouts it spanned."""
    worker = make_worker(n_envs=2, max_episode_length=200, carry_episodes=True)
    for _ in range(6):
        batch = worker.rollout(min_steps=10)  # episodes far longer than a rollout's share
        ends = np.cumsum(batch.lengths) - 1
        starts = ends - batch.lengths + 1
        assert (batch.step_types[starts] == StepType.FIRST).all()
        assert np.isin(batch.step_types[ends], [StepType.TERMINAL, StepType.TIMEOUT]).all()
        inner = np.ones(len(batch), dtype=bool)
        inner[starts] = inner[ends] = False
        assert (batch.step_types[inner] == StepType.MID).all()


def test_evaluation_episodes_restart_and_drop_the_carried_steps() -> None:
    """``rollout(n_episodes=n)`` (what evaluation asks for) restarts every environment, as without
    ``carry_episodes``; the next training rollout starts afresh too."""
    worker = make_worker(n_envs=3, carry_episodes=True)
    worker.rollout(min_steps=50)
    batch = worker.rollout(n_episodes=4)
    assert batch.n_episodes == 4 and batch.complete.all()
    assert worker._carry is None and worker._frag is None
    assert worker.rollout(min_steps=50).complete.all()


def test_carry_episodes_and_fragments_are_refused_together() -> None:
    """Whole episodes and fragments are two answers: asking for both is one ConfigError."""
    with pytest.raises(ConfigError, match="carry_episodes=true returns whole episodes but worker.timesteps_per_call"):
        make_worker(n_envs=2, carry_episodes=True, timesteps_per_call=4)


def test_a_new_agent_object_restarts_the_carried_episodes() -> None:
    """A new agent object (not new parameters) starts fresh episodes, as in fragment mode."""
    worker = make_worker(n_envs=3, carry_episodes=True)
    worker.rollout(min_steps=40)
    assert worker._carry is not None
    assert worker.agent is not None
    worker.update_agent(worker.agent)
    assert worker._carry is None


def test_whole_episodes_far_beyond_min_steps_say_why_once(caplog: pytest.LogCaptureFixture) -> None:
    """Restarting every environment each rollout, 64 CartPoles return at least 64 episodes however few steps
    are asked for: one warning line says so and names the setting that keeps rollouts near the size asked;
    carried episodes do not warn."""
    import logging

    worker = make_worker(n_envs=64, carry_episodes=False)
    with caplog.at_level(logging.WARNING, logger="corral.plugins.workers.vector"):
        for _ in range(3):
            assert len(worker.rollout(min_steps=100)) > 4 * 100
    lines = [r.getMessage() for r in caplog.records if "were asked for" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "every one of its 64 environments" in lines[0] and "worker.carry_episodes=true" in lines[0]
    caplog.clear()
    carried = make_worker(n_envs=64, carry_episodes=True)
    with caplog.at_level(logging.WARNING, logger="corral.plugins.workers.vector"):
        for _ in range(3):
            assert len(carried.rollout(min_steps=100)) >= 100
    assert not [r for r in caplog.records if "were asked for" in r.getMessage()]
