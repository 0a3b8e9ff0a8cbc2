"""The algorithm contract: train_once returns finite float statistics, changes the policy, and a
state_dict round trip trains identically."""

from __future__ import annotations

import copy
import math
import numbers
from typing import Any, ClassVar, Mapping

import numpy as np

from corral.framework.algorithm import Algorithm
from corral.framework.batch import EpisodeBatch
from corral.framework.env import EnvFactory, EnvSpec
from corral.framework.policy import Policy
from corral.testing.contracts.helpers import (
    DEFAULT_ENV_ID,
    env_spec_of,
    make_test_policy,
)


class AlgorithmContract:
    """The algorithm contract. Subclass it as ``Test...`` and set ``algo_name`` (or override
    :meth:`make_algorithm`).

    Checks, on a real batch of CartPole episodes from the local sampler:

    - ``train_once(itr, episodes)`` returns a dict of finite float statistics;
    - it changes the policy's parameters;
    - ``state_dict()`` / ``load_state_dict()``: a second algorithm built with another seed and
      loaded with the first one's state trains identically on the same batch (same parameters,
      same statistics).

    - the registered option's config defaults satisfy the ranges its fields declare.

    Attributes: ``algo_name`` (registered name) with ``algo_config`` (fields of its config
    dataclass), ``worker`` (registered worker used to collect), ``batch_size``, ``seed``,
    ``max_episode_length``; the environment is ``env``, a registered env option (``"pendulum"``,
    your plugin's own, built with ``env_config``) or a factory (a callable returning a
    ``gymnasium.Env``, an :class:`~corral.framework.env.EnvFactory`), else the gymnasium id ``env_id``.
    """

    algo_name: ClassVar[str | None] = None
    algo_config: ClassVar[Mapping[str, Any]] = {}
    worker: ClassVar[str] = "default"
    batch_size: ClassVar[int] = 400
    seed: ClassVar[int] = 1
    max_episode_length: ClassVar[int] = 200
    env_id: ClassVar[str] = DEFAULT_ENV_ID
    env: ClassVar[Any] = None
    env_config: ClassVar[Mapping[str, Any]] = {}

    def make_algorithm(self, env_spec: EnvSpec, policy: Policy, seed: int) -> Algorithm:
        """Build the algorithm under test (default: the registered ``algo_name`` with ``algo_config``)."""
        if self.algo_name is None:
            raise TypeError(f"{type(self).__name__} must set algo_name (or override make_algorithm)")
        from corral.framework.config import config_of
        from corral.framework.plugins import get_registry

        reg = get_registry().get("algo", self.algo_name)
        return reg.factory(config_of(reg, dict(self.algo_config)), env_spec=env_spec, policy=policy,
                           sampler=None, seed=seed)

    def make_policy(self, env_spec: EnvSpec, seed: int = 0) -> Policy:
        """The policy the algorithm trains (an MLP by default)."""
        return make_test_policy(env_spec, seed=seed)

    # ------------------------------------------------------------------ helpers
    def make_env_source(self) -> Any:
        """The suite's environment source: ``env`` (a registered option or a factory), else ``env_id``."""
        from corral.testing.contracts.env import resolve_env

        source = resolve_env(type(self), "env", self.env_config)
        return source if source is not None else EnvFactory(self.env_id)

    def env_spec(self) -> EnvSpec:
        """The spec of the suite's environment."""
        return env_spec_of(self.make_env_source(), self.max_episode_length)

    def collect(self, policy: Policy, itr: int = 0, seed: int | None = None) -> EpisodeBatch:
        """A real batch: ``batch_size`` steps from the local sampler with ``policy``."""
        from corral.framework.plugins import get_registry
        from corral.plugins.samplers.local import LocalSampler

        worker_class = get_registry().get("worker", self.worker).factory
        with LocalSampler(agents=copy.deepcopy(policy), envs=self.make_env_source(), seed=self.seed if seed is None else seed,
                          max_episode_length=self.max_episode_length, worker_class=worker_class) as sampler:
            return sampler.obtain_samples(itr, self.batch_size, policy.get_param_values())

    @staticmethod
    def _params(policy: Policy) -> dict[str, np.ndarray]:
        return {k: np.array(v, copy=True) for k, v in policy.get_param_values().items()}

    # ------------------------------------------------------------------ the checks
    def test_train_once_returns_float_stats(self) -> None:
        """``train_once`` returns ``{name: finite float}``."""
        spec = self.env_spec()
        policy = self.make_policy(spec)
        algo = self.make_algorithm(spec, policy, self.seed)
        stats = algo.train_once(0, self.collect(algo.policy))
        assert isinstance(stats, dict) and stats, f"train_once returned {stats!r}; expected a non-empty dict"
        for key, value in stats.items():
            assert isinstance(key, str), f"statistic name {key!r} is not a string"
            assert isinstance(value, numbers.Real) and not isinstance(value, bool), (
                f"statistic {key!r} is {type(value).__name__}, not a float"
            )
            assert math.isfinite(float(value)), f"statistic {key!r} is {value}"

    def test_train_once_changes_the_policy(self) -> None:
        """``train_once`` on a real batch changes the policy parameters."""
        spec = self.env_spec()
        algo = self.make_algorithm(spec, self.make_policy(spec), self.seed)
        before = self._params(algo.policy)
        algo.train_once(0, self.collect(algo.policy))
        after = self._params(algo.policy)
        assert any(not np.array_equal(before[k], after[k]) for k in before), "train_once left every parameter unchanged"
        update = algo.get_agent_update()
        if isinstance(update, Mapping):
            assert all(np.array_equal(np.asarray(update[k]), after[k]) for k in after if k in update), (
                "get_agent_update() does not carry the trained parameters"
            )

    def test_state_dict_round_trip_trains_identically(self) -> None:
        """Two copies, one restored from the other's ``state_dict()``, train identically."""
        spec = self.env_spec()
        first = self.make_algorithm(spec, self.make_policy(spec, seed=0), self.seed)
        first.train_once(0, self.collect(first.policy, 0))  # optimiser state, RNG draws, counters
        state = copy.deepcopy(first.state_dict())
        second = self.make_algorithm(spec, self.make_policy(spec, seed=1), self.seed + 1)
        second.load_state_dict(state)
        batch = self.collect(first.policy, 1, seed=self.seed + 1)
        a = self._params(first.policy)
        b = self._params(second.policy)
        assert all(np.array_equal(a[k], b[k]) for k in a), "load_state_dict did not restore the policy parameters"
        stats_first = first.train_once(1, batch)
        stats_second = second.train_once(1, batch)
        a = self._params(first.policy)
        b = self._params(second.policy)
        differing = [k for k in a if not np.array_equal(a[k], b[k])]
        assert not differing, f"after training on the same batch the restored copy differs in {differing}"
        assert stats_first.keys() == stats_second.keys()
        for key in stats_first:
            x, y = float(stats_first[key]), float(stats_second[key])
            assert x == y or (math.isnan(x) and math.isnan(y)), f"statistic {key!r}: {x} vs {y}"

    def test_config_defaults_satisfy_their_ranges(self) -> None:
        """The registered option's config defaults satisfy the ranges its fields declare."""
        if self.algo_name is not None:
            from corral.testing.contracts.config import config_problems, registered_config

            problems = config_problems(registered_config("algo", self.algo_name), "algo")
            assert not problems, "; ".join(problems)
