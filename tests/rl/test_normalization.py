"""corral.rl.normalization: running moments, discounted returns, the normalising agent."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from corral.framework.batch import EpisodeBatch, StepType
from corral.rl.normalization import (
    OBS_MEAN_KEY,
    OBS_VAR_KEY,
    NormalizedPolicy,
    RunningMeanStd,
    discounted_returns,
    normalize_observations,
)


def test_running_moments_equal_the_moments_of_all_batches() -> None:
    rng = np.random.default_rng(0)
    parts = [rng.normal(3.0, 2.0, size=(n, 4)) for n in (1, 7, 250, 33)]
    rms = RunningMeanStd((4,), count=0.0 + 1e-12)
    for p in parts:
        rms.update(p)
    data = np.concatenate(parts)
    np.testing.assert_allclose(rms.mean, data.mean(axis=0), rtol=1e-10)
    np.testing.assert_allclose(rms.var, data.var(axis=0), rtol=1e-9)
    assert rms.count == pytest.approx(len(data))
    restored = RunningMeanStd((4,))
    restored.load_state_dict(pickle.loads(pickle.dumps(rms.state_dict())))
    assert restored.mean.tobytes() == rms.mean.tobytes() and restored.var.tobytes() == rms.var.tobytes()


def _batch(rewards_per_episode: list[list[float]], last: list[StepType]) -> EpisodeBatch:
    rewards = np.concatenate([np.asarray(r, np.float32) for r in rewards_per_episode])
    steps = []
    for r, end in zip(rewards_per_episode, last):
        types = [StepType.MID] * len(r)
        types[0] = StepType.FIRST
        types[-1] = end
        steps += types
    n = len(rewards)
    return EpisodeBatch(observations=np.arange(n, dtype=np.float32)[:, None], actions=np.zeros((n, 1), np.float32),
                        rewards=rewards, step_types=np.asarray(steps, np.uint8),
                        lengths=[len(r) for r in rewards_per_episode],
                        last_observations=np.zeros((len(last), 1), np.float32))


def test_discounted_returns_restart_at_each_episode() -> None:
    episodes = _batch([[1.0, 2.0, 3.0], [5.0], [1.0, 1.0]], [StepType.TERMINAL, StepType.TIMEOUT, StepType.TERMINAL])
    got = discounted_returns(episodes, 0.5)
    expected = [1.0, 0.5 * 1 + 2, 0.5 * 2.5 + 3, 5.0, 1.0, 1.5]
    np.testing.assert_allclose(got, expected)


def test_observation_normalisation_is_batch_and_dtype_invariant() -> None:
    rng = np.random.default_rng(1)
    obs = rng.normal(5.0, 30.0, size=(64, 3))
    mean, var = rng.normal(size=3), rng.uniform(0.5, 100.0, size=3)
    whole = normalize_observations(obs, mean, var, 10.0, 1e-8)
    rows = np.concatenate([normalize_observations(obs[i : i + 1], mean, var, 10.0, 1e-8) for i in range(64)])
    as32 = normalize_observations(obs.astype(np.float32), mean, var, 10.0, 1e-8)
    assert whole.dtype == np.float32 and whole.tobytes() == rows.tobytes() == as32.tobytes()
    assert np.abs(whole).max() <= 10.0
    np.testing.assert_allclose(whole, np.clip((obs - mean) / np.sqrt(var + 1e-8), -10, 10), rtol=1e-5, atol=1e-5)


class _Echo:
    """A policy that returns its observations as actions (what it saw)."""

    deterministic = False

    def __init__(self) -> None:
        self.params: dict[str, np.ndarray] = {"w": np.zeros(1)}

    def get_actions(self, observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        return np.asarray(observations), {}

    def get_param_values(self) -> dict[str, np.ndarray]:
        return dict(self.params)

    def set_param_values(self, params: dict[str, np.ndarray]) -> None:
        assert set(params) == {"w"}, params
        self.params = dict(params)

    def reset(self, dones: np.ndarray | None = None) -> None:
        pass

    def seed(self, seeds: object) -> None:
        pass


def test_normalised_agent_ships_its_statistics_in_the_parameters() -> None:
    trainer_side = NormalizedPolicy(_Echo(), RunningMeanStd((2,)), clip=5.0, epsilon=1e-8)  # type: ignore[arg-type]
    trainer_side.obs_rms.update(np.array([[0.0, 10.0], [2.0, 30.0]]))
    worker_side = pickle.loads(pickle.dumps(NormalizedPolicy(_Echo(), RunningMeanStd((2,)), 5.0, 1e-8)))  # type: ignore[arg-type]
    params = trainer_side.get_param_values()
    assert set(params) == {"w", OBS_MEAN_KEY, OBS_VAR_KEY}
    worker_side.set_param_values(params)
    seen, _ = worker_side.get_actions(np.array([[1.0, 20.0], [100.0, -100.0]]))
    np.testing.assert_allclose(seen, [[0.0, 0.0], [5.0, -5.0]], atol=1e-3)  # (x - mean) / std, clipped at 5
    worker_side.deterministic = True
    assert worker_side.inner.deterministic is True
    frozen = trainer_side.frozen()
    trainer_side.obs_rms.update(np.full((100, 2), 50.0))
    assert frozen.obs_rms.mean.tolist() != trainer_side.obs_rms.mean.tolist()
    assert copy.deepcopy(worker_side).inner is not worker_side.inner
