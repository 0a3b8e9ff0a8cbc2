"""What VPG, PPO and TRPO share: a value function, GAE, and snapshot state."""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from corral.framework.algorithm import Algorithm
from corral.framework.batch import EpisodeBatch
from corral.framework.env import EnvSpec, child_seed
from corral.framework.policy import Policy
from corral.framework.sampler import Sampler
from corral.rl.networks import flat_dim, mlp
from corral.rl.normalization import reject_normalized_state
from corral.rl.returns import gae

logger = logging.getLogger(__name__)

#: Spawn-key branch of the algorithm's own RNG (minibatch shuffling).
ALGO_BRANCH = 2**31 - 2


def _steps(n_trials: int, per_trial: float) -> int:
    """The steps of ``n_trials`` trials of ``per_trial`` steps on average, rounded to a step."""
    return int(round(n_trials * per_trial))


class OnPolicyAlgorithm(Algorithm):
    """Base of the on-policy algorithms: holds the policy, a value network and an RNG.

    They learn from whole episodes and from fragments alike (``worker=fragment``, ``worker=vector`` with
    ``worker.timesteps_per_call``), as SB3's and CleanRL's PPO learn from ``n_steps`` per environment: GAE
    bootstraps a fragment cut by the end of a rollout (last step MID) from the value of its last
    observation, as it does a TIMEOUT, and only a TERMINAL end has no future value.
    """

    accepts_fragments = True

    def __init__(
        self,
        env_spec: EnvSpec,
        policy: Policy,
        sampler: Sampler | None,
        *,
        seed: int,
        discount: float,
        gae_lambda: float,
        vf_hidden_sizes: Sequence[int],
    ) -> None:
        self.env_spec = env_spec
        self.policy = policy
        self.sampler = sampler
        self.discount = discount
        self.gae_lambda = gae_lambda
        obs_dim = flat_dim(env_spec.observation_space.shape)
        self.value_function: nn.Module = mlp(obs_dim, vf_hidden_sizes, 1, "tanh", out_gain=1.0)
        self.rng = np.random.Generator(np.random.PCG64(child_seed(np.random.SeedSequence(seed), ALGO_BRANCH)))
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        self._warned_minibatch: set[str] = set()

    def minibatch_starts(self, setting: str, size: int, n: int, *, trials: int | None = None) -> range:
        """Where the minibatches of ``size`` steps (``algo.<setting>``) start in a batch of ``n`` steps.

        With ``trials`` (RL2, whose minibatches are whole trials), the batch's ``n`` steps are that many
        trials and the range is over trials: each minibatch is ``size`` steps rounded to whole trials of
        the batch's mean trial length (at least one trial); its ``step`` is the trials per minibatch.

        A ``size`` above ``n`` makes every gradient step use the whole batch; so does a ``size`` that
        rounds up to all the batch's trials, and one below half a trial rounds up to one trial. Each
        time the run says so once, in one line, since the value asked for is not what the update does."""
        if trials is None:
            if size > n:
                self._warn_minibatch_once(setting, f"algo.{setting}={size} is larger than the batch of {n} steps "
                                          "this update learns from, so each gradient step uses the whole batch; "
                                          f"lower algo.{setting} or raise trainer.batch_size")
            return range(0, n, size)
        per_trial = n / trials
        per_batch = max(1, round(size / per_trial))
        if size > n:
            self._warn_minibatch_once(setting, f"algo.{setting}={size} is larger than the batch of {n} steps "
                                      f"({trials} trials) this update learns from, so each gradient step uses the "
                                      f"whole batch; lower algo.{setting} or raise trainer.batch_size")
        elif per_batch >= trials and size < n:
            self._warn_minibatch_once(setting, f"algo.{setting}={size} rounds to whole trials of the batch's "
                                      f"{per_trial:g} steps: all {trials} trials ({n} steps), so each gradient step "
                                      f"uses the whole batch; give algo.{setting} at most "
                                      f"{_steps(trials - 1, per_trial)} for minibatches of fewer trials")
        elif round(size / per_trial) < 1:  # half a trial or less: one trial
            self._warn_minibatch_once(setting, f"algo.{setting}={size} is half a trial or less of the batch's "
                                      f"{per_trial:g} steps, so each minibatch is one whole trial "
                                      f"({_steps(1, per_trial)} steps); give algo.{setting} at least "
                                      f"{_steps(1, per_trial)}")
        return range(0, trials, per_batch)

    def _warn_minibatch_once(self, setting: str, line: str) -> None:
        """Log ``line`` (the minibatch that runs is not the ``algo.<setting>`` given), once per setting."""
        if setting not in self._warned_minibatch:
            self._warned_minibatch.add(setting)
            logger.warning("corral: %s", line)

    def values(self, observations: torch.Tensor) -> torch.Tensor:
        """V(s) for a batch of observations."""
        return self.value_function(observations.reshape(observations.shape[0], -1).float()).squeeze(-1)

    def process(self, episodes: EpisodeBatch) -> dict[str, torch.Tensor]:
        """Tensors for an update: observations, actions, old log-probs, advantages, returns, values."""
        t = episodes.to_torch()
        obs = t["observations"].float()
        with torch.no_grad():
            values = self.values(obs).numpy()
            last_values = self.values(t["last_observations"].float()).numpy()
        advantages, returns = gae(episodes, values, last_values, self.discount, self.gae_lambda)
        actions = t["actions"]
        if "log_prob" in t["agent_infos"]:
            old_log_prob = t["agent_infos"]["log_prob"].float()
        else:
            with torch.no_grad():
                old_log_prob = self.policy.log_prob_entropy(obs, actions)[0]  # type: ignore[attr-defined]
        return {
            "observations": obs,
            "actions": actions,
            "old_log_prob": old_log_prob,
            "advantages": torch.as_tensor(advantages, dtype=torch.float32),
            "returns": torch.as_tensor(returns, dtype=torch.float32),
            "values": torch.as_tensor(values, dtype=torch.float32),
        }

    @staticmethod
    def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
        """1 - Var(returns - values) / Var(returns)."""
        var = returns.var()
        return float("nan") if var == 0 else float(1 - (returns - values).var() / var)

    def state_dict(self) -> dict[str, Any]:
        """Parameters, optimiser states and the RNG state."""
        return {
            "policy": {k: v.clone() for k, v in self.policy.state_dict().items()},  # type: ignore[attr-defined]
            "value_function": {k: v.clone() for k, v in self.value_function.state_dict().items()},
            "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        reject_normalized_state(state)
        self.policy.load_state_dict(state["policy"])  # type: ignore[attr-defined]
        self.value_function.load_state_dict(state["value_function"])
        for k, o in self.optimizers.items():
            o.load_state_dict(state["optimizers"][k])
        self.rng.bit_generator.state = state["rng"]

    def parameters(self) -> list[nn.Parameter]:
        """Policy and value-function parameters."""
        return list(self.policy.parameters()) + list(self.value_function.parameters())  # type: ignore[attr-defined]
