"""Running observation normalisation and reward scaling, shared by every sampler.

What Stable-Baselines3's ``VecNormalize`` does inside one process, done here as a framework
capability (``normalize.obs=true normalize.reward=true normalize.clip=10``):

- **Observations** are normalised with a running mean and variance,
  ``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)``.
- **Rewards** are divided by the running standard deviation of the discounted return
  ``R_t = gamma * R_{t-1} + r_t`` (restarted at every episode start) and clipped.

Where it happens:

- The statistics are updated only in the training process, from the raw episodes every worker
  returned (:meth:`Normalizer.update`, once per epoch, in batch order), so they do not depend on
  which sampler collected the episodes nor on how the workers were scheduled.
- The observation statistics travel inside the agent update (``obs_norm.mean`` and
  ``obs_norm.var`` next to the policy's parameters). The agent every worker (or the action
  server) runs is a :class:`NormalizedPolicy`: it normalises the observations it is given, then
  calls the policy. Workers never update statistics, so sampling, evaluation and ``corral eval``
  always act with the frozen statistics of the last update.
- :class:`NormalizedAlgorithm` wraps the algorithm: it adds the statistics to the agent update,
  hands on-policy algorithms episodes whose observations are normalised with the statistics the
  workers acted with and whose rewards are scaled, and hands off-policy algorithms the raw episodes
  (their replay buffer stores raw transitions; every sampled minibatch is normalised with the
  current statistics, as SB3 does). The episodes the trainer logs stay raw: logged returns are
  the environment's.
- The statistics are part of the algorithm's snapshot (``state_dict()["normalization"]``), as
  float64 arrays, so a resumed run continues bit for bit.
- ``normalize.update=false`` freezes them: :meth:`Normalizer.update` merges nothing. It is for a
  resumed run (``trainer.resume=<run> normalize.update=false``), which keeps the statistics of the
  snapshot it continues; the snapshot holds the statistics only, so ``update`` is always the
  resuming command's. A new run has no statistics to freeze (they would stay at mean 0 and
  variance 1: nothing normalised), so ``normalize=running`` refuses it before anything starts.

A fragment that continues an episode from an earlier batch (``worker=fragment``) restarts its
discounted return at 0: the return statistics of a fragment worker are an approximation when its
fragments are shorter than its episodes.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

import numpy as np

from corral.framework.algorithm import Algorithm
from corral.framework.batch import EpisodeBatch
from corral.framework.checks import check, checked
from corral.framework.env import EnvSpec
from corral.framework.errors import ConfigError
from corral.framework.policy import Policy

#: Keys of the observation statistics inside an agent update (next to the policy's parameters).
OBS_MEAN_KEY = "obs_norm.mean"
OBS_VAR_KEY = "obs_norm.var"


@dataclass
@checked("normalize")
class NormalizeConfig:
    """Running normalisation (``normalize.*``), as SB3's ``VecNormalize``; off by default."""

    obs: bool = field(default=False, metadata={"help": "normalise observations by their running mean and std"})
    reward: bool = field(
        default=False, metadata={"help": "scale rewards by the running std of the discounted return"}
    )
    clip: float = field(default=10.0, metadata=check(gt=0, applies_if=("obs", "==", True),
                                                     help="clip normalised observations to [-clip, clip]"))
    clip_reward: float = field(default=10.0, metadata=check(gt=0, applies_if=("reward", "==", True),
                                                            help="clip scaled rewards to [-clip_reward, clip_reward]"))
    gamma: Optional[float] = field(
        default=None, metadata=check(ge=0, le=1, applies_if=("reward", "==", True),
                                     help="discount of the return that scales rewards (null: the algorithm's discount)")
    )
    epsilon: float = field(default=1e-8, metadata=check(gt=0, applies_if=(("obs", "==", True), ("reward", "==", True)),
                                                        help="added to the variances before the square root"))
    update: bool = field(default=True, metadata=check(
        applies_if=(("obs", "==", True), ("reward", "==", True)),
        help="update the statistics from training episodes (false: keep a resumed run's statistics frozen; "
             "only with trainer.resume)"))

    @property
    def enabled(self) -> bool:
        """True when observations or rewards are normalised."""
        return bool(self.obs or self.reward)


class RunningMeanStd:
    """Mean and variance of a stream of arrays, merged batch by batch (Chan et al.'s parallel
    algorithm), in float64. Starts at mean 0, variance 1 and a tiny count (as SB3's), so the first
    batch all but replaces the prior."""

    def __init__(self, shape: tuple[int, ...] = (), count: float = 1e-4) -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = float(count)

    def update(self, x: np.ndarray) -> None:
        """Merge the rows of ``x`` (shape ``[n, *shape]``)."""
        x = np.asarray(x, np.float64)
        if not len(x):
            return
        self.merge(x.mean(axis=0), x.var(axis=0), len(x))

    def merge(self, mean: np.ndarray, var: np.ndarray, count: float) -> None:
        """Merge the moments of ``count`` more samples."""
        delta = mean - self.mean
        total = self.count + count
        m2 = self.var * self.count + var * count + np.square(delta) * self.count * count / total
        self.mean = self.mean + delta * count / total
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict[str, Any]:
        """Copies of mean, variance and count."""
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.mean = np.array(state["mean"], np.float64)
        self.var = np.array(state["var"], np.float64)
        self.count = float(state["count"])


def normalize_observations(obs: np.ndarray, mean: np.ndarray, var: np.ndarray, clip: float,
                           epsilon: float) -> np.ndarray:
    """``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)`` as float32 rows.

    Observations are rounded to float32 first (policies compute in float32 anyway), so the result
    is the same whether a batch travelled as float64 or float32 (shared memory, episode logs), and
    the same for one row or a batch of rows: workers and the algorithm agree bit for bit.
    """
    return _normalize(obs, mean, np.sqrt(var + epsilon), clip)


def _normalize(obs: np.ndarray, mean: np.ndarray, std: np.ndarray, clip: float) -> np.ndarray:
    """:func:`normalize_observations` with ``std = sqrt(var + epsilon)`` given (same operations, in
    place: the same bits)."""
    x = np.asarray(obs, np.float32).astype(np.float64)
    x -= mean
    x /= std
    np.clip(x, -clip, clip, out=x)
    return x.astype(np.float32)


def discounted_returns(episodes: EpisodeBatch, gamma: float) -> np.ndarray:
    """``R_t = gamma * R_{t-1} + r_t`` per step, restarted at 0 at each episode's first step (one
    row per step of ``episodes``, float64)."""
    n = len(episodes)
    out = np.empty(n, np.float64)
    if not n:
        return out
    rewards = episodes.rewards.astype(np.float64)
    lengths = episodes.lengths
    starts = episodes.starts
    # Walk time steps, every episode at once (a padded [n_episodes, max_len] view).
    max_len = int(lengths.max())
    running = np.zeros(len(lengths), np.float64)
    for t in range(max_len):
        alive = lengths > t
        idx = starts[alive] + t
        running[alive] = gamma * running[alive] + rewards[idx]
        out[idx] = running[alive]
    return out


def reject_normalized_state(state: Mapping[str, Any]) -> None:
    """Refuse to load an algorithm snapshot that was trained under normalisation into an algorithm
    that runs without it (its networks expect normalised observations)."""
    if "normalization" in state:
        raise ConfigError(
            "this snapshot was trained with running normalisation (normalize.obs / normalize.reward); "
            "resume or evaluate it with the same normalize settings"
        )


class Normalizer:
    """The run's statistics: observation mean/variance and the discounted return's variance."""

    def __init__(self, config: NormalizeConfig, env_spec: EnvSpec) -> None:
        self.config = config
        shape = tuple(getattr(env_spec.observation_space, "shape", None) or ())
        if config.obs and not shape:
            raise ConfigError(
                f"normalize.obs=true needs a Box observation space, got {env_spec.observation_space}; "
                "set normalize.obs=false"
            )
        self.obs_rms = RunningMeanStd(shape)
        self.ret_rms = RunningMeanStd(())
        self.gamma: float = 0.99 if config.gamma is None else float(config.gamma)

    # ------------------------------------------------------------------ applying
    def normalize_obs(self, obs: np.ndarray) -> np.ndarray:
        """Observations normalised with the current statistics (unchanged when obs is off)."""
        if not self.config.obs:
            return obs
        c = self.config
        return normalize_observations(obs, self.obs_rms.mean, self.obs_rms.var, c.clip, c.epsilon)

    def scale_rewards(self, rewards: np.ndarray) -> np.ndarray:
        """Rewards divided by the discounted return's running std and clipped (unchanged when off)."""
        if not self.config.reward:
            return rewards
        c = self.config
        scaled = np.asarray(rewards, np.float64) / np.sqrt(self.ret_rms.var + c.epsilon)
        return np.clip(scaled, -c.clip_reward, c.clip_reward).astype(np.float32)

    def update(self, episodes: EpisodeBatch) -> None:
        """Merge a batch of raw episodes: every observation an agent acted on, and the discounted
        return at every step (nothing when ``normalize.update=false``)."""
        if not self.config.update or not len(episodes):
            return
        if self.config.obs:
            self.obs_rms.update(episodes.observations.reshape(len(episodes), *self.obs_rms.mean.shape))
        if self.config.reward:
            self.ret_rms.update(discounted_returns(episodes, self.gamma))

    def normalize_batch(self, episodes: EpisodeBatch, obs: bool = True, reward: bool = True) -> EpisodeBatch:
        """A copy of ``episodes`` with normalised observations (and last observations) and scaled
        rewards, as switched on in the config and by ``obs`` / ``reward``."""
        changes: dict[str, Any] = {}
        if obs and self.config.obs:
            changes["observations"] = self.normalize_obs(episodes.observations)
            changes["last_observations"] = self.normalize_obs(episodes.last_observations)
        if reward and self.config.reward:
            changes["rewards"] = self.scale_rewards(episodes.rewards)
        return dataclasses.replace(episodes, **changes) if changes else episodes

    def normalize_minibatch(self, batch: dict[str, Any]) -> dict[str, Any]:
        """A replay minibatch (torch tensors: ``observations``, ``next_observations``, ``rewards``)
        normalised with the current statistics."""
        import torch

        out = dict(batch)
        if self.config.obs:
            for key in ("observations", "next_observations"):
                if key in out:
                    out[key] = torch.from_numpy(self.normalize_obs(out[key].numpy()))
        if self.config.reward and "rewards" in out:
            out["rewards"] = torch.from_numpy(self.scale_rewards(out["rewards"].numpy()))
        return out

    # ------------------------------------------------------------------ shipping and snapshots
    def param_values(self) -> dict[str, np.ndarray]:
        """What the agent update carries: the observation statistics (empty when obs is off)."""
        if not self.config.obs:
            return {}
        return {OBS_MEAN_KEY: self.obs_rms.mean.copy(), OBS_VAR_KEY: self.obs_rms.var.copy()}

    def stats(self) -> dict[str, float]:
        """Statistics to log."""
        out: dict[str, float] = {}
        if self.config.obs:
            out["normalize/obs_std_mean"] = float(np.sqrt(self.obs_rms.var).mean())
        if self.config.reward:
            out["normalize/return_std"] = float(np.sqrt(self.ret_rms.var))
        return out

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs (float64 arrays: bit-for-bit)."""
        return {"obs": self.obs_rms.state_dict(), "ret": self.ret_rms.state_dict(), "gamma": self.gamma}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output: the statistics. The settings (``update`` among them)
        stay this run's config, so a resume may freeze or thaw them."""
        self.obs_rms.load_state_dict(state["obs"])
        self.ret_rms.load_state_dict(state["ret"])
        self.gamma = float(state["gamma"])


class NormalizedPolicy(Policy):
    """The agent a worker (or an action server) runs under observation normalisation: normalises
    the observations with the statistics it was last sent, then asks ``policy``.

    Its parameters are the policy's plus ``obs_norm.mean`` / ``obs_norm.var``; everything else
    (``reset``, ``seed``, ``deterministic``, sampling state, ``state_dict`` ...) is the policy's.
    """

    def __init__(self, policy: Policy, obs_rms: RunningMeanStd, clip: float, epsilon: float) -> None:
        self.inner = policy
        self.obs_rms = obs_rms
        self.clip = float(clip)
        self.epsilon = float(epsilon)

    # Everything not defined here is the wrapped policy's (not dunders: copying and pickling see
    # this object's own state).
    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("inner")
        if inner is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(inner, name)

    @property
    def deterministic(self) -> bool:  # type: ignore[override]
        """The wrapped policy's flag (evaluation sets it)."""
        return bool(self.inner.deterministic)

    @deterministic.setter
    def deterministic(self, value: bool) -> None:
        self.inner.deterministic = value

    @property
    def recurrent(self) -> bool:  # type: ignore[override]
        """Whether the wrapped policy is recurrent."""
        return bool(getattr(self.inner, "recurrent", False))

    def normalize(self, observations: np.ndarray) -> np.ndarray:
        """Observations as the policy sees them."""
        rms = self.obs_rms
        cached = self.__dict__.get("_std")
        if cached is None or cached[0] is not rms.var:  # statistics replaced (an update): recompute once
            cached = self._std = (rms.var, np.sqrt(rms.var + self.epsilon))
        return _normalize(observations, rms.mean, cached[1], self.clip)

    def get_actions(self, observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The policy's actions for the normalised observations."""
        return self.inner.get_actions(self.normalize(observations))

    def reset(self, dones: np.ndarray | None = None) -> None:
        """The policy's reset."""
        self.inner.reset(dones)

    def seed(self, seeds: Any) -> None:
        """The policy's noise streams."""
        self.inner.seed(seeds)

    def get_param_values(self) -> dict[str, np.ndarray]:
        """The policy's parameters plus the observation statistics."""
        params = dict(self.inner.get_param_values())
        params[OBS_MEAN_KEY] = self.obs_rms.mean.copy()
        params[OBS_VAR_KEY] = self.obs_rms.var.copy()
        return params

    def set_param_values(self, params: dict[str, np.ndarray]) -> None:
        """Take the observation statistics out of ``params``; the rest go to the policy."""
        params = dict(params)
        mean, var = params.pop(OBS_MEAN_KEY, None), params.pop(OBS_VAR_KEY, None)
        if mean is not None and var is not None:
            self.obs_rms.mean = np.array(mean, np.float64)
            self.obs_rms.var = np.array(var, np.float64)
        self.inner.set_param_values(params)

    def get_sampling_state(self) -> dict[str, Any]:
        """The policy's sampling state."""
        return self.inner.get_sampling_state()

    def set_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore the policy's sampling state."""
        self.inner.set_sampling_state(state)

    def to(self, *args: Any, **kwargs: Any) -> "NormalizedPolicy":
        """Move the wrapped policy (``nn.Module.to``); normalisation stays in numpy."""
        self.inner = self.inner.to(*args, **kwargs)  # type: ignore[attr-defined]  # a torch policy (nn.Module)
        return self

    def frozen(self) -> "NormalizedPolicy":
        """A copy with its own copy of the current statistics (evaluation, export)."""
        return copy.deepcopy(self)


class NormalizedAlgorithm(Algorithm):
    """An algorithm run under running normalisation (see the module docstring).

    ``algo`` must sample through :meth:`Algorithm.sample` (its own ``get_agent_update`` of
    parameter dicts); everything it does not override here is ``algo``'s.
    """

    def __init__(self, algo: Algorithm, normalizer: Normalizer, agent: Policy | None = None) -> None:
        if type(algo).sample is not Algorithm.sample:
            raise ConfigError(
                f"normalize.obs/normalize.reward cannot wrap {type(algo).__name__}: it samples through its own "
                "path (meta-RL); set normalize.obs=false normalize.reward=false"
            )
        self.inner = algo
        self.normalizer = normalizer
        if normalizer.config.gamma is None:
            discount = getattr(algo, "discount", None)
            if discount is None:
                discount = getattr(getattr(algo, "config", None), "discount", None)
            normalizer.gamma = 0.99 if discount is None else float(discount)
        c = normalizer.config
        self.policy = agent if agent is not None else (
            NormalizedPolicy(algo.policy, normalizer.obs_rms, c.clip, c.epsilon) if c.obs else algo.policy
        )
        self.sampler = algo.sampler
        # Off-policy algorithms keep raw transitions and normalise every sampled minibatch.
        self.off_policy = hasattr(algo, "minibatch_transform")
        if self.off_policy:
            algo.minibatch_transform = normalizer.normalize_minibatch  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        inner = self.__dict__.get("inner")
        if inner is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(inner, name)

    def get_agent_update(self) -> Any:
        """The algorithm's agent update plus the observation statistics."""
        update = self.inner.get_agent_update()
        extra = self.normalizer.param_values()
        if not extra:
            return update
        if isinstance(update, dict):
            return {**update, **extra}
        raise ConfigError(
            f"normalize.obs=true needs an algorithm whose agent update is a dict of parameters; "
            f"{type(self.inner).__name__} sends {type(update).__name__}; set normalize.obs=false"
        )

    def get_env_update(self, itr: int) -> Any:
        """The algorithm's environment update."""
        return self.inner.get_env_update(itr)

    def set_training_progress(self, done: float) -> None:
        """The algorithm's schedules see the run's progress."""
        self.training_progress = float(done)
        self.inner.set_training_progress(done)

    def train_once(self, itr: int, episodes: EpisodeBatch) -> dict[str, float]:
        """Normalise, update the statistics from the raw ``episodes``, train."""
        if self.off_policy:
            self.normalizer.update(episodes)
            batch = episodes
        else:
            # Observations with the statistics the workers acted with; then the update; rewards
            # scaled with the return statistics that include this batch (as VecNormalize).
            batch = self.normalizer.normalize_batch(episodes, reward=False)
            self.normalizer.update(episodes)
            batch = self.normalizer.normalize_batch(batch, obs=False)
        stats = dict(self.inner.train_once(itr, batch) or {})
        stats.update(self.normalizer.stats())
        return stats

    @property
    def eval_policy(self) -> Policy:
        """The algorithm's evaluation policy, normalising with the current statistics."""
        inner = self.inner.eval_policy
        c = self.normalizer.config
        if not c.obs:
            return inner
        if inner is self.inner.policy:
            return self.policy
        return NormalizedPolicy(inner, self.normalizer.obs_rms, c.clip, c.epsilon)

    def state_dict(self) -> dict[str, Any]:
        """The algorithm's snapshot plus ``normalization``: the statistics."""
        state = dict(self.inner.state_dict())
        state["normalization"] = self.normalizer.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        state = dict(state)
        norm = state.pop("normalization", None)
        if norm is None:
            raise ConfigError("this snapshot has no normalisation statistics; resume it with normalize.obs=false "
                              "normalize.reward=false")
        self.normalizer.load_state_dict(norm)
        self.inner.load_state_dict(state)


class Normalization:
    """What ``normalize=running`` builds: wraps the agent the sampler starts with and the algorithm."""

    def __init__(self, config: NormalizeConfig, env_spec: EnvSpec) -> None:
        self.config = config
        self.normalizer = Normalizer(config, env_spec)
        self._agent: NormalizedPolicy | None = None

    def wrap_policy(self, policy: Policy) -> Policy:
        """The agent workers start with (a :class:`NormalizedPolicy` when observations are normalised)."""
        if not self.config.obs:
            return policy
        c = self.config
        self._agent = NormalizedPolicy(policy, self.normalizer.obs_rms, c.clip, c.epsilon)
        return self._agent

    def wrap_algorithm(self, algo: Algorithm) -> Algorithm:
        """The algorithm the trainer runs."""
        agent = self._agent if self._agent is not None and self._agent.inner is algo.policy else None
        return NormalizedAlgorithm(algo, self.normalizer, agent)


def build_normalization(config: NormalizeConfig, *, env_spec: EnvSpec) -> Normalization | None:
    """``normalize=running``: a :class:`Normalization`, or None when nothing is normalised."""
    return Normalization(config, env_spec) if config.enabled else None


__all__ = [
    "NormalizeConfig", "Normalization", "NormalizedAlgorithm", "NormalizedPolicy", "Normalizer", "RunningMeanStd",
    "build_normalization", "discounted_returns", "normalize_observations", "reject_normalized_state",
]
