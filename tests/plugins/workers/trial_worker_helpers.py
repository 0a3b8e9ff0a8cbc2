"""What the tests of the task-running workers (``rl2``, ``pearl``) share: composing ``train.py``
configs for the composition checks, comparing a sampler's trials with the local sampler's, the
snapshot check of a worker without a task schedule, and a point robot whose episodes the
environment ends (for the worker contract's TERMINAL check)."""

from __future__ import annotations

import contextlib
import copy
import os
from typing import Any, Callable, Iterator

import gymnasium as gym
import hydra
import numpy as np
from omegaconf import DictConfig

from corral.framework.entry import prepare
from corral.framework.env import EnvFactory
from corral.framework.policy import Policy
from corral.meta.rl2_env import RL2Env
from corral.meta.task_envs import make_task_env
from corral.meta.tasks import TaskSampler
from corral.plugins.samplers.local import LocalSampler


def compose(*overrides: str) -> DictConfig:
    """What ``python train.py <overrides>`` composes."""
    args = prepare(list(overrides))
    with hydra.initialize_config_module(config_module="corral.conf", version_base="1.3"):
        return hydra.compose(config_name="config", overrides=args)


def with_choices(base: list[str], *overrides: str) -> list[str]:
    """``base`` overrides with those of the same keys replaced by ``overrides`` (and the rest added)."""
    keys = {o.split("=")[0] for o in overrides}
    return [o for o in base if o.split("=")[0] not in keys] + list(overrides)


def assert_same_trials_as_local(other_class: type, policy: Policy, env: EnvFactory, sampler_args: dict[str, Any],
                                tasks: TaskSampler, *, batch_size: int, tasks_per_worker: int, exact: int,
                                **options: Any) -> None:
    """Two epochs of ``obtain_samples`` on scheduled tasks, then ``obtain_exact_episodes(exact)``:
    ``other_class`` returns exactly the local sampler's episodes, on several tasks."""
    params = policy.get_param_values()
    n_workers = sampler_args["n_workers"]
    with LocalSampler(agents=policy, envs=env, **sampler_args) as local, \
            other_class(agents=policy, envs=env, **sampler_args, **options) as other:
        for itr in range(2):
            updates = tasks.env_updates(itr, n_workers=n_workers, tasks_per_worker=tasks_per_worker)
            a = local.obtain_samples(itr, batch_size, params, updates)
            b = other.obtain_samples(itr, batch_size, params, updates)
            assert a.differences(b) == []
            assert len(set(a.episode_infos["task_id"].tolist())) > 2  # tasks differ per trial and worker
        a, b = local.obtain_exact_episodes(exact, params), other.obtain_exact_episodes(exact, params)
        assert a.differences(b) == [] and a.n_episodes == exact * n_workers


def assert_restored_worker_keeps_the_task(make_worker: Callable[[], Any], task_attr: str, before: int,
                                          after: int) -> None:
    """No schedule: each env draws its task at its first reset. A fresh worker restored from a
    snapshot taken after ``before`` episodes returns the same ``after`` episodes, on the same tasks
    (the env attribute ``task_attr``)."""
    worker, fresh = make_worker(), make_worker()
    try:
        worker.rollout(n_episodes=before)
        state = copy.deepcopy(worker.state_dict())
        following = worker.rollout(n_episodes=after)
        fresh.load_state_dict(copy.deepcopy(state))
        assert fresh.rollout(n_episodes=after).differences(following) == []
        for ours, theirs in zip(worker.envs, fresh.envs):
            np.testing.assert_array_equal(getattr(ours.unwrapped, task_attr), getattr(theirs.unwrapped, task_attr))
    finally:
        worker.shutdown()
        fresh.shutdown()


@contextlib.contextmanager
def local_ray() -> Iterator[Any]:
    """A local Ray runtime for the block (one already running is reused and left running)."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


class _LeavesArena(gym.Wrapper):
    """Ends an episode (``terminated``) once the point robot is more than ``radius`` from its start,
    the origin: any walk, drifting or not, leaves a small arena within a few dozen steps."""

    def __init__(self, env: gym.Env, radius: float) -> None:
        super().__init__(env)
        self.radius = float(radius)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Step; terminated also when the robot has left the arena."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        outside = float(np.linalg.norm(np.asarray(obs, dtype=np.float64))) > self.radius
        return obs, reward, bool(terminated or outside), truncated, info


def point_nav_arena(radius: float = 0.3, max_episode_steps: int = 200, rl2_inputs: bool = False) -> gym.Env:
    """``env=point_nav`` (its tasks and rewards, ``max_episode_steps`` steps at most) whose episodes
    end TERMINAL when the robot leaves the arena of ``radius``; in the RL2 wrapper when ``rl2_inputs``."""
    env: gym.Env = _LeavesArena(make_task_env("corral.plugins.envs.point_nav:PointNavEnv", max_episode_steps), radius)
    return RL2Env(env) if rl2_inputs else env
