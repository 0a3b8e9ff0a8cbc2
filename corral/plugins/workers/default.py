"""``worker=default``: one environment, one step at a time (garage's DefaultWorker)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from corral import hookimpl
from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.worker import Worker
from corral.rl.episode_buffer import EpisodeBuffers, action_clipper, batch_from_episodes


@dataclass
class DefaultWorkerConfig:
    """The default worker has no settings."""


class DefaultWorker(Worker):
    """Runs one environment; ``rollout()`` returns one episode (or as many as asked for)."""

    def __init__(self, *, seed: Any, max_episode_length: int | None, worker_number: int = 0, **kwargs: Any) -> None:
        super().__init__(seed=seed, max_episode_length=max_episode_length, worker_number=worker_number, n_envs=1, **kwargs)
        self._buf: EpisodeBuffers | None = None
        self._clip: Callable[[np.ndarray], np.ndarray] | None = None
        self._obs: np.ndarray | None = None
        self._t = 0
        self._done = False
        self._last_obs: Any = None
        self._step_type = StepType.MID

    def _on_new_envs(self) -> None:
        super()._on_new_envs()
        env = self.envs[0]
        assert self.episode_limit is not None
        self._buf = EpisodeBuffers(1, self.episode_limit, env.observation_space, env.action_space)
        self._clip = action_clipper(env.action_space)

    # ------------------------------------------------------------------ step-by-step API
    def start_episode(self) -> None:
        """Reset the environment and the agent."""
        obs, _ = self.reset_env(0)
        self._obs = obs
        self._t = 0
        self._done = False
        assert self.agent is not None, "the worker has no agent; call update_agent(policy) first"
        self.agent.reset()

    def step_episode(self) -> bool:
        """Take one step; True when the episode has ended."""
        buf, t = self._buf, self._t
        assert buf is not None and self.agent is not None and self.episode_limit is not None
        try:
            buf.observations[0, t] = self._obs
        except (ValueError, TypeError):  # not numbers (a try costs nothing until it raises)
            self.check_observation(self._obs, t)
            raise
        actions, infos = self.agent.get_actions(np.asarray(self._obs)[None])
        action = actions[0]
        buf.actions[0, t] = action
        buf.write_agent_infos(0, t, infos, 0)
        env_action = self._clip(action) if self._clip is not None else action
        obs, reward, terminated, truncated, _ = self.envs[0].step(env_action)
        buf.rewards[0, t] = reward
        self._t = t = t + 1
        if getattr(obs, "shape", ()) != self.obs_shape:  # one tuple comparison per step
            self.check_observation(obs, t)
        if terminated or truncated or t >= self.episode_limit:
            buf.step_types[0, t - 1] = StepType.TERMINAL if terminated else StepType.TIMEOUT
            self._done = True
        else:
            buf.step_types[0, t - 1] = StepType.FIRST if t == 1 else StepType.MID
        self._obs = obs
        return self._done

    def collect_episode(self) -> EpisodeBatch:
        """The episode built since ``start_episode``."""
        return batch_from_episodes([self._take()])

    def _take(self) -> dict[str, Any]:
        assert self._buf is not None
        if not self._done:
            raise RuntimeError("the episode has not ended; call step_episode() until it returns True")
        return self._buf.take(0, 0, self._t, self._obs)  # type: ignore[arg-type]  # set by start_episode()

    # ------------------------------------------------------------------ rollouts
    def rollout(self, *, min_steps: int | None = None, n_episodes: int | None = None) -> EpisodeBatch:
        """One episode; or ``n_episodes``; or episodes until at least ``min_steps`` steps."""
        if n_episodes is None and min_steps is None:
            n_episodes = 1
        episodes: list[dict[str, Any]] = []
        steps = 0
        while (n_episodes is not None and len(episodes) < n_episodes) or (
            n_episodes is None and steps < (min_steps or 0)
        ):
            self.start_episode()
            while not self.step_episode():
                pass
            episodes.append(self._take())
            steps += self._t
        return batch_from_episodes(episodes)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``worker=default``."""
    register("worker", "default", DefaultWorker, config=DefaultWorkerConfig,
             help="one environment, one step at a time")
