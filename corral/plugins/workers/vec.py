"""``worker=vec``: ``n_envs`` environments stepped together with one batched policy call per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from corral import hookimpl
from corral.framework.batch import EpisodeBatch
from corral.framework.checks import check
from corral.framework.worker import Worker
from corral.rl.episode_buffer import StepLog, action_clipper


@dataclass
class VecWorkerConfig:
    """Settings of the vectorised worker."""

    n_envs: int = field(default=8, metadata=check(ge=1, help="environments stepped together by one worker"))


class VecWorker(Worker):
    """Steps ``n_envs`` environments in lock-step; one ``get_actions`` call per step for all of them.

    Steps go to a preallocated, time-major :class:`~corral.rl.episode_buffer.StepLog` (one row of
    whole-array copies per step; episodes are gathered from it at the end). A slot
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
        self._log: StepLog | None = None
        self._clip: Callable[[np.ndarray], np.ndarray] | None = None
        self._obs: np.ndarray | None = None

    def _on_new_envs(self) -> None:
        super()._on_new_envs()
        env = self.envs[0]
        assert self.episode_limit is not None
        self._log = StepLog(self.n_envs, env.observation_space, env.action_space, capacity=self.episode_limit + 1)
        self._obs = np.zeros_like(self._log.observations[0])
        self._clip = action_clipper(env.action_space)

    def rollout(self, *, min_steps: int | None = None, n_episodes: int | None = None) -> EpisodeBatch:
        """Collect whole episodes (see the class docstring)."""
        if min_steps is None and n_episodes is None:
            n_episodes = self.n_envs
        log, obs_all, agent, envs = self._log, self._obs, self.agent, self.envs
        assert log is not None and obs_all is not None
        assert agent is not None, "the worker has no agent; call update_agent(policy) first"
        k, limit, clip, shape = self.n_envs, self.episode_limit, self._clip, self.obs_shape
        assert limit is not None
        target = min_steps or 0
        # Rows of the time-major log: for min_steps, the target at full width plus one longest
        # episode is always enough; otherwise the log doubles when it fills up.
        log.reserve(limit + 1 + (-(-target // k) if n_episodes is None else 0))

        # The per-slot state of the loop lives in python lists: cheaper than numpy scalars.
        steps = [env.step for env in envs]
        t = [0] * k  # steps taken in the slot's current episode
        first_row = [0] * k  # log row of that episode's first step
        rewards: list[Any] = [0.0] * k  # each env's reward as it returns it (SupportsFloat)
        n_first = k if n_episodes is None else min(k, n_episodes)
        active = list(range(n_first))
        for j in active:
            obs_all[j] = self.reset_env(j)[0]
        started = n_first
        mask = np.zeros(k, dtype=bool)
        mask[:n_first] = True
        agent.reset(mask)

        # Finished episodes: (slot, first row, length, terminated) and the observation after the last step.
        ep_slots: list[int] = []
        ep_rows: list[int] = []
        ep_lengths: list[int] = []
        ep_terminated: list[bool] = []
        ep_last: list[np.ndarray] = []
        steps_taken = 0
        row = 0
        while active:
            if row >= log.capacity:
                log.reserve(row + 1, keep=row)
            actions, infos = agent.get_actions(obs_all)
            log.write(row, obs_all, actions, infos)
            # Row by row as numpy values (np.int64 for Discrete), as the default worker passes them.
            env_actions = list(clip(actions) if clip is not None else actions)
            ends: list[tuple[int, bool]] = []
            for j in active:
                o, r, terminated, truncated, _ = steps[j](env_actions[j])
                t[j] += 1
                if getattr(o, "shape", ()) != shape:  # one tuple comparison per step
                    self.check_observation(o, t[j], j)
                try:
                    obs_all[j] = o
                except (ValueError, TypeError):  # not numbers (a try costs nothing until it raises)
                    self.check_observation(o, t[j], j)
                    raise
                rewards[j] = r
                if terminated or truncated or t[j] >= limit:
                    ends.append((j, bool(terminated)))
            log.rewards[row] = rewards  # slots that are not active leave values no episode reads
            steps_taken += len(active)
            if ends:
                restart = None
                stopped = False
                for j, terminated in ends:
                    ep_slots.append(j)
                    ep_rows.append(first_row[j])
                    ep_lengths.append(t[j])
                    ep_terminated.append(terminated)
                    ep_last.append(obs_all[j].copy())
                    more = started < n_episodes if n_episodes is not None else steps_taken < target
                    if more:
                        obs_all[j] = self.reset_env(j)[0]
                        t[j] = 0
                        first_row[j] = row + 1
                        started += 1
                        if restart is None:
                            restart = np.zeros(k, dtype=bool)
                        restart[j] = True
                    else:
                        t[j] = -1
                        stopped = True
                if stopped:
                    active = [j for j in active if t[j] >= 0]
                if restart is not None:
                    agent.reset(restart)
            row += 1
        # Episodes in the order they started: by first row, then by slot (restarts happen in slot order).
        order = np.lexsort((np.asarray(ep_slots), np.asarray(ep_rows)))
        return log.gather(
            np.asarray(ep_slots)[order],
            np.asarray(ep_rows)[order],
            np.asarray(ep_lengths)[order],
            np.asarray(ep_terminated, dtype=bool)[order],
            [ep_last[i] for i in order.tolist()],
        )


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``worker=vec``."""
    register("worker", "vec", VecWorker, config=VecWorkerConfig,
             help="n_envs environments per worker, one batched policy call per step")
