"""The environment contract: what a registered environment option (or an environment factory)
must do so that every worker and sampler can run it and the same seed gives the same episodes."""

from __future__ import annotations

import inspect
import math
import numbers
import pickle
from typing import Any, ClassVar, Mapping

import gymnasium as gym
import numpy as np

from corral.framework.env import EnvFactory, EnvSpec, make_env, supports_tasks, task_env
from corral.testing.contracts.config import config_problems


def resolve_env(owner: type, attribute: str, config: Mapping[str, Any]) -> Any:
    """The environment source a contract class names in ``attribute``: a registered env option
    (a string, built with ``config``) or a factory: an :class:`~corral.framework.env.EnvFactory`, or a
    module-level function or env class returning a ``gymnasium.Env`` (taken as written, not bound as a
    method, and wrapped in an ``EnvFactory``)."""
    value = inspect.getattr_static(owner, attribute, None)
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, str):
        from corral.framework.config import config_of
        from corral.framework.plugins import get_registry

        reg = get_registry().get("env", value)
        return reg.factory(config_of(reg, dict(config)))
    if callable(value) and not isinstance(value, (EnvFactory, gym.Env)):
        return EnvFactory(value)  # a function or env class: the picklable recipe workers receive
    return value


class EnvContract:
    """The environment contract. Subclass it as ``Test...`` and set ``env``: a registered env option
    name (with ``env_config``, fields of its config dataclass) or a factory.

    Checks: it builds a ``gymnasium.Env`` whose spec corral can read; ``reset``/``step`` follow the
    gymnasium API (observations inside the observation space, real finite rewards, boolean
    ``terminated``/``truncated``, dict infos); the same seed and actions give the same episode; the
    source pickles (workers in other processes and on other nodes build their own copies); corral's
    local sampler collects whole episodes from it; a task environment's ``sample_tasks`` and
    ``set_task`` work; a registered option's config defaults satisfy their declared ranges.

    Attributes: ``env``, ``env_config``, ``seed``, ``n_steps`` (steps per API check),
    ``max_episode_length`` (cut used when sampling), ``batch_size`` (steps sampled).
    """

    env: ClassVar[Any] = None
    env_config: ClassVar[Mapping[str, Any]] = {}
    seed: ClassVar[int] = 1
    n_steps: ClassVar[int] = 50
    max_episode_length: ClassVar[int] = 100
    batch_size: ClassVar[int] = 200

    def make_source(self) -> Any:
        """The environment source under test (what ``compose.build`` hands to the sampler)."""
        source = resolve_env(type(self), "env", self.env_config)
        if source is None:
            raise TypeError(f"{type(self).__name__} must set env (a registered env option or a factory)")
        return source

    def make(self) -> gym.Env:
        """One environment built from the source, as a worker builds it."""
        return make_env(self.make_source())

    # ------------------------------------------------------------------ the checks
    def test_builds_a_gymnasium_env_with_a_spec(self) -> None:
        """The source builds a ``gymnasium.Env`` with spaces; ``EnvSpec.from_env`` reads it."""
        env = self.make()
        try:
            assert isinstance(env, gym.Env), f"the source built {type(env).__name__}, not a gymnasium.Env"
            assert isinstance(env.observation_space, gym.spaces.Space), "observation_space is not a gymnasium space"
            assert isinstance(env.action_space, gym.spaces.Space), "action_space is not a gymnasium space"
            spec = EnvSpec.from_env(env, self.max_episode_length)
            assert spec.max_episode_length is not None and spec.max_episode_length >= 1
        finally:
            env.close()

    def test_reset_and_step_follow_the_gymnasium_api(self) -> None:
        """``reset(seed=...)`` and ``step`` return what gymnasium specifies, inside the spaces."""
        env = self.make()
        try:
            env.action_space.seed(self.seed)
            obs, info = env.reset(seed=self.seed)
            assert env.observation_space.contains(obs), f"reset returned {obs!r}, outside {env.observation_space}"
            assert isinstance(info, dict), f"reset's info is {type(info).__name__}, not a dict"
            for t in range(self.n_steps):
                result = env.step(env.action_space.sample())
                assert len(result) == 5, "step must return (obs, reward, terminated, truncated, info)"
                obs, reward, terminated, truncated, info = result
                assert env.observation_space.contains(obs), f"step {t} returned an observation outside the space"
                assert isinstance(reward, numbers.Real) and math.isfinite(float(reward)), f"step {t}: reward {reward!r}"
                assert isinstance(terminated, (bool, np.bool_)) and isinstance(truncated, (bool, np.bool_)), (
                    f"step {t}: terminated/truncated must be bools, got {terminated!r}, {truncated!r}")
                assert isinstance(info, dict), f"step {t}: info is {type(info).__name__}, not a dict"
                if terminated or truncated:
                    obs, info = env.reset()
        finally:
            env.close()

    def test_same_seed_same_episode(self) -> None:
        """Two environments reset with the same seed and given the same actions agree step by step."""
        runs = []
        for _ in range(2):
            env = self.make()
            try:
                env.action_space.seed(self.seed)
                obs, _ = env.reset(seed=self.seed)
                trace = [np.asarray(obs, dtype=np.float64).ravel()]
                for _ in range(self.n_steps):
                    obs, reward, terminated, truncated, _ = env.step(env.action_space.sample())
                    trace.append(np.append(np.asarray(obs, dtype=np.float64).ravel(), float(reward)))
                    if terminated or truncated:
                        break
                runs.append(trace)
            finally:
                env.close()
        a, b = runs
        assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b)), (
            "the same seed and actions gave different episodes; seed every random draw from reset(seed=...)")

    def test_source_pickles(self) -> None:
        """The source survives pickling (samplers send it to worker processes and Ray actors)."""
        source = self.make_source()
        copy = pickle.loads(pickle.dumps(source))
        env = make_env(copy)
        env.close()

    def test_local_sampler_collects_whole_episodes(self) -> None:
        """corral's local sampler with the default worker collects episodes that end TERMINAL or TIMEOUT."""
        from corral.framework.batch import StepType
        from corral.plugins.samplers.local import LocalSampler
        from corral.plugins.workers.default import DefaultWorker
        from corral.testing.contracts.helpers import env_spec_of, make_test_policy

        source = self.make_source()
        policy = make_test_policy(env_spec_of(source, self.max_episode_length))
        with LocalSampler(agents=policy, envs=source, seed=self.seed, max_episode_length=self.max_episode_length,
                          worker_class=DefaultWorker) as sampler:
            batch = sampler.obtain_samples(0, self.batch_size, policy.get_param_values())
        assert int(np.sum(batch.lengths)) >= self.batch_size
        ends = np.cumsum(batch.lengths) - 1
        assert all(batch.step_types[i] in (StepType.TERMINAL, StepType.TIMEOUT) for i in ends)

    def test_tasks_when_it_has_them(self) -> None:
        """A task environment's ``sample_tasks(n)`` gives ``n`` tasks that ``set_task`` accepts."""
        env = self.make()
        try:
            if not supports_tasks(env):
                return
            tasks = task_env(env).sample_tasks(3, np.random.default_rng(self.seed))
            assert len(tasks) == 3, f"sample_tasks(3) returned {len(tasks)} tasks"
            for task in tasks:
                pickle.dumps(task)
                task_env(env).set_task(task)
                env.reset(seed=self.seed)
        finally:
            env.close()

    def test_config_defaults_satisfy_their_ranges(self) -> None:
        """A registered option's config defaults satisfy the ranges its fields declare."""
        name = inspect.getattr_static(type(self), "env", None)
        if isinstance(name, str):
            from corral.testing.contracts.config import registered_config

            problems = config_problems(registered_config("env", name), "env")
            assert not problems, "; ".join(problems)


__all__ = ["EnvContract", "resolve_env"]
