"""``worker=fragment``: like ``vec``, but every rollout is exactly ``n_envs * timesteps_per_call`` steps.

Environments keep running across rollouts; an episode cut at the end of a rollout is returned as
a fragment (last step MID) and continues, as a fragment starting with MID, in the next one. This
is what off-policy algorithms want: a fixed number of fresh transitions per call.

Every fragment carries ``episode_infos["prior_length"]`` and ``episode_infos["prior_return"]``:
the steps and the undiscounted return of its episode before the fragment (0 for a fragment that
starts the episode), so whole-episode statistics stay right when episodes span rollouts.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from corral import hookimpl
from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.checks import check
from corral.framework.worker import Worker
from corral.rl.episode_buffer import EpisodeBuffers, action_clipper, batch_from_episodes


@dataclass
class FragmentWorkerConfig:
    """Settings of the fragment worker."""

    n_envs: int = field(default=8, metadata=check(ge=1, help="environments stepped together by one worker"))
    timesteps_per_call: int = field(default=1, metadata=check(ge=1, help="steps per environment in one rollout"))


class FragmentWorker(Worker):
    """Returns exactly ``n_envs * timesteps_per_call`` steps per rollout, as episode fragments."""

    returns_fragments = True

    def __init__(self, *, seed: Any, max_episode_length: int | None, worker_number: int = 0, n_envs: int = 8,
                 timesteps_per_call: int = 1, **kwargs: Any) -> None:
        super().__init__(seed=seed, max_episode_length=max_episode_length, worker_number=worker_number,
                         n_envs=n_envs, **kwargs)
        if timesteps_per_call < 1:
            raise ValueError(f"worker.timesteps_per_call must be >= 1, got {timesteps_per_call}")
        self.timesteps_per_call = timesteps_per_call
        self._buf: EpisodeBuffers | None = None
        self._clip: Callable[[np.ndarray], np.ndarray] | None = None
        self._obs: np.ndarray | None = None
        self._t = np.zeros(n_envs, dtype=np.int64)
        self._ret = np.zeros(n_envs, dtype=np.float64)  # return of each running episode so far
        self._needs_reset = np.ones(n_envs, dtype=bool)

    def _on_new_envs(self) -> None:
        super()._on_new_envs()
        env = self.envs[0]
        assert self.episode_limit is not None
        self._buf = EpisodeBuffers(self.n_envs, self.episode_limit, env.observation_space, env.action_space)
        self._obs = np.zeros_like(self._buf.observations[:, 0])
        self._clip = action_clipper(env.action_space)
        self._needs_reset[:] = True

    def rollout(self, *, min_steps: int | None = None, n_episodes: int | None = None) -> EpisodeBatch:
        """``n_envs * timesteps_per_call`` steps (``min_steps``/``n_episodes`` are not used)."""
        buf, obs_all, agent, envs, t = self._buf, self._obs, self.agent, self.envs, self._t
        assert buf is not None and obs_all is not None
        assert agent is not None, "the worker has no agent; call update_agent(policy) first"
        k, limit, clip, shape = self.n_envs, self.episode_limit, self._clip, self.obs_shape
        assert limit is not None
        if self._needs_reset.any():
            for j in np.flatnonzero(self._needs_reset).tolist():
                obs_all[j] = self.reset_env(j)[0]
                t[j] = 0
                self._ret[j] = 0.0
            agent.reset(self._needs_reset.copy())
            self._needs_reset[:] = False
        seg_start = t.copy()
        seg_ret = self._ret.copy()
        pieces: list[list[dict[str, Any]]] = [[] for _ in range(k)]
        rewards = np.zeros(k, dtype=np.float32)
        next_obs = np.zeros_like(obs_all)
        all_idx = np.arange(k)
        for _ in range(self.timesteps_per_call):
            actions, infos = agent.get_actions(obs_all)
            buf.observations[all_idx, t] = obs_all
            buf.actions[all_idx, t] = actions
            buf.step_types[all_idx, t] = np.where(t == 0, StepType.FIRST, StepType.MID)
            buf.write_agent_infos(all_idx, t, infos, all_idx)
            env_actions = clip(actions) if clip is not None else actions
            if env_actions.dtype.kind in "iu":
                env_actions = env_actions.tolist()
            last_step = (t + 1 >= limit).tolist()
            ends = []
            for j in range(k):
                o, r, terminated, truncated, _ = envs[j].step(env_actions[j])
                if getattr(o, "shape", ()) != shape:  # one tuple comparison per step
                    self.check_observation(o, int(t[j]) + 1, j)
                try:
                    next_obs[j] = o
                except (ValueError, TypeError):  # not numbers (a try costs nothing until it raises)
                    self.check_observation(o, int(t[j]) + 1, j)
                    raise
                rewards[j] = r
                if terminated or truncated or last_step[j]:
                    ends.append((j, bool(terminated)))
            buf.rewards[all_idx, t] = rewards
            self._ret += rewards
            t += 1
            obs_all[:] = next_obs
            if ends:
                restart = np.zeros(k, dtype=bool)
                for j, terminated in ends:
                    length = int(t[j])
                    buf.step_types[j, length - 1] = StepType.TERMINAL if terminated else StepType.TIMEOUT
                    pieces[j].append(self._take(j, int(seg_start[j]), length, next_obs[j], seg_ret[j]))
                    obs_all[j] = self.reset_env(j)[0]
                    t[j] = 0
                    seg_start[j] = 0
                    seg_ret[j] = 0.0
                    self._ret[j] = 0.0
                    restart[j] = True
                agent.reset(restart)
        for j in range(k):
            if t[j] > seg_start[j]:
                pieces[j].append(self._take(j, int(seg_start[j]), int(t[j]), obs_all[j], seg_ret[j]))
        return batch_from_episodes([p for per_env in pieces for p in per_env], allow_fragments=True)

    def _take(self, j: int, start: int, stop: int, last_obs: np.ndarray, prior_return: float) -> dict[str, Any]:
        assert self._buf is not None
        piece = self._buf.take(j, start, stop, last_obs)
        piece["episode_infos"] = {"prior_length": np.int64(start), "prior_return": np.float64(prior_return)}
        return piece

    def update_agent(self, agent_update: Any) -> None:
        """A new agent object starts fresh episodes; new parameters let episodes continue."""
        from corral.framework.policy import Policy

        if isinstance(agent_update, Policy):
            self._needs_reset[:] = True
        super().update_agent(agent_update)

    def state_dict(self) -> dict[str, Any]:
        """Also the running episodes: environments (pickled), observations, step counters, buffers."""
        state = super().state_dict()
        state["fragment"] = pickle.dumps(
            {"envs": self.envs, "obs": self._obs, "t": self._t, "needs_reset": self._needs_reset, "buf": self._buf,
             "ret": self._ret}
        )
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the running episodes as well."""
        extra = pickle.loads(state["fragment"])
        for env in self.envs:
            env.close()
        self.envs = extra["envs"]
        self._obs, self._t, self._needs_reset, self._buf = extra["obs"], extra["t"], extra["needs_reset"], extra["buf"]
        self._ret = extra.get("ret", np.zeros(self.n_envs, dtype=np.float64))
        super().load_state_dict(state)


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``worker=fragment``."""
    register("worker", "fragment", FragmentWorker, config=FragmentWorkerConfig,
             help="fixed-length fragments of n_envs * timesteps_per_call steps (off-policy)")
