"""The RL2 environment wrapper (Duan et al. 2016): observation plus previous action, reward and done.

A recurrent policy meta-learns from what it sees, so each observation is extended with the
previous action (one-hot for Discrete actions, the flattened action for Box), the previous
reward and a done flag. A trial is several episodes on one task: the first reset of a trial
shows zeros; a reset with ``options={"rl2_continue_trial": True}`` starts the next episode of
the trial and shows the last action and reward of the episode before, with done = 1.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from corral.framework.errors import ConfigError

#: The reset option that continues a trial (keep the previous action, reward and done flag).
CONTINUE_TRIAL = "rl2_continue_trial"


class RL2Env(gym.Wrapper):
    """Observations ``[obs, previous action, previous reward, done]`` (float32, flat)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        obs_space, act_space = env.observation_space, env.action_space
        if not isinstance(obs_space, gym.spaces.Box):
            raise ConfigError(f"the RL2 wrapper needs a Box observation space, got {obs_space}")
        if isinstance(act_space, gym.spaces.Discrete):
            self._n_actions = int(act_space.n)
            act_low, act_high = np.zeros(self._n_actions), np.ones(self._n_actions)
        elif isinstance(act_space, gym.spaces.Box):
            self._n_actions = 0
            act_low, act_high = act_space.low.reshape(-1), act_space.high.reshape(-1)
        else:
            raise ConfigError(f"the RL2 wrapper supports Discrete and Box actions, got {act_space}")
        self.obs_dim = int(np.prod(obs_space.shape))
        self.action_dim = len(act_low)
        low = np.concatenate([obs_space.low.reshape(-1), act_low, [-np.inf], [0.0]]).astype(np.float32)
        high = np.concatenate([obs_space.high.reshape(-1), act_high, [np.inf], [1.0]]).astype(np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self._extra = np.zeros(self.action_dim + 2, dtype=np.float32)  # previous action, reward, done

    def _augment(self, obs: Any) -> np.ndarray:
        out = np.empty(self.obs_dim + len(self._extra), dtype=np.float32)
        out[: self.obs_dim] = np.asarray(obs, dtype=np.float32).reshape(-1)
        out[self.obs_dim :] = self._extra
        return out

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode: a new trial (zeros), or with ``rl2_continue_trial`` the next episode
        of the current trial (previous action and reward kept, done = 1)."""
        options = dict(options or {})
        carry = bool(options.pop(CONTINUE_TRIAL, False))
        obs, info = self.env.reset(seed=seed, options=options or None)
        if carry:
            self._extra[-1] = 1.0
        else:
            self._extra[:] = 0.0
        return self._augment(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict]:
        """Step and remember the action, reward and whether the episode ended."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        extra = self._extra
        extra[: self.action_dim] = 0.0
        if self._n_actions:
            extra[int(action)] = 1.0
        else:
            extra[: self.action_dim] = np.asarray(action, dtype=np.float32).reshape(-1)
        extra[-2] = float(reward)
        extra[-1] = 1.0 if (terminated or truncated) else 0.0
        return self._augment(obs), reward, terminated, truncated, info


def is_rl2_env(env: gym.Env) -> bool:
    """True when the RL2 wrapper is somewhere in ``env``'s wrapper chain."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, RL2Env):
            return True
        env = env.env
    return False


__all__ = ["CONTINUE_TRIAL", "RL2Env", "is_rl2_env"]
