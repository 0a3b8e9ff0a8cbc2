"""``worker=vec``: ``n_envs`` environments stepped together with one batched policy call per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corral import hookimpl
from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.worker import Worker
from corral.lib.episode_buffer import EpisodeBuffers, action_clipper, batch_from_episodes


@dataclass
class VecWorkerConfig:
    """Settings of the vectorised worker."""

    n_envs: int = field(default=8, metadata={"help": "environments stepped together by one worker"})


class VecWorker(Worker):
    """Steps ``n_envs`` environments in lock-step; one ``get_actions`` call per step for all of them.

    Buffers are preallocated (``[n_envs, max_episode_length, ...]``) and written by index. A slot
    whose episode ends is reset at once while more steps are wanted (so every environment stays
    busy), and the agent is told which slots restarted (``agent.reset(mask)``).

    ``rollout()`` returns one episode per environment; ``rollout(min_steps=m)`` returns whole
    episodes totalling at least ``m`` steps; ``rollout(n_episodes=n)`` exactly ``n`` episodes.
    Episodes are ordered by the time they started (ties by slot), which is deterministic.
    """

    def __init__(self, *, seed: Any, max_episode_length: int | None, worker_number: int = 0, n_envs: int = 8,
                 **kwargs: Any) -> None:
        super().__init__(seed=seed, max_episode_length=max_episode_length, worker_number=worker_number,
                         n_envs=n_envs, **kwargs)
        self._buf: EpisodeBuffers | None = None
        self._clip = None
        self._obs: np.ndarray | None = None

    def _on_new_envs(self) -> None:
        super()._on_new_envs()
        env = self.envs[0]
        self._buf = EpisodeBuffers(self.n_envs, self.episode_limit, env.observation_space, env.action_space)
        self._obs = np.zeros_like(self._buf.observations[:, 0])
        self._clip = action_clipper(env.action_space)

    def rollout(self, *, min_steps: int | None = None, n_episodes: int | None = None) -> EpisodeBatch:
        """Collect whole episodes (see the class docstring)."""
        if min_steps is None and n_episodes is None:
            n_episodes = self.n_envs
        buf, obs_all, agent, envs = self._buf, self._obs, self.agent, self.envs
        assert buf is not None and obs_all is not None
        assert agent is not None, "the worker has no agent; call update_agent(policy) first"
        k, limit, clip = self.n_envs, self.episode_limit, self._clip
        assert limit is not None
        target = min_steps or 0

        t = np.zeros(k, dtype=np.int64)
        active = np.zeros(k, dtype=bool)
        order = np.zeros(k, dtype=np.int64)
        rewards = np.zeros(k, dtype=np.float32)
        next_obs = np.zeros_like(obs_all)
        started = 0
        for j in range(k if n_episodes is None else min(k, n_episodes)):
            obs_all[j] = self.reset_env(j)[0]
            active[j] = True
            order[j] = started
            started += 1
        agent.reset(active.copy())

        finished: list[tuple[int, dict[str, Any]]] = []
        steps_taken = 0
        while True:
            idx = np.flatnonzero(active)
            if not len(idx):
                break
            actions, infos = agent.get_actions(obs_all)
            tt = t[idx]
            buf.observations[idx, tt] = obs_all[idx]
            buf.actions[idx, tt] = actions[idx]
            buf.step_types[idx, tt] = np.where(tt == 0, StepType.FIRST, StepType.MID)
            buf.write_agent_infos(idx, tt, infos, idx)
            env_actions = clip(actions) if clip is not None else actions
            if env_actions.dtype.kind in "iu":
                env_actions = env_actions.tolist()
            ends: list[tuple[int, bool]] = []
            idx_list = idx.tolist()
            last_step = (tt + 1 >= limit).tolist()
            for n, j in enumerate(idx_list):
                o, r, terminated, truncated, _ = envs[j].step(env_actions[j])
                next_obs[j] = o
                rewards[j] = r
                if terminated or truncated or last_step[n]:
                    ends.append((j, bool(terminated)))
            buf.rewards[idx, tt] = rewards[idx]
            t[idx] = tt + 1
            steps_taken += len(idx_list)
            obs_all[idx] = next_obs[idx]
            if ends:
                restart = np.zeros(k, dtype=bool)
                for j, terminated in ends:
                    length = int(t[j])
                    buf.step_types[j, length - 1] = StepType.TERMINAL if terminated else StepType.TIMEOUT
                    finished.append((int(order[j]), buf.take(j, 0, length, next_obs[j])))
                    more = started < n_episodes if n_episodes is not None else steps_taken < target
                    if more:
                        obs_all[j] = self.reset_env(j)[0]
                        t[j] = 0
                        order[j] = started
                        started += 1
                        restart[j] = True
                    else:
                        active[j] = False
                if restart.any():
                    agent.reset(restart)
        finished.sort(key=lambda item: item[0])
        return batch_from_episodes([ep for _, ep in finished])


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``worker=vec``."""
    register("worker", "vec", VecWorker, config=VecWorkerConfig,
             help="n_envs environments per worker, one batched policy call per step")
