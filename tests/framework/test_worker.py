"""Worker base class and WorkerFactory: seeding, updates, pickling, snapshots."""

from __future__ import annotations

import copy
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from corral.framework.batch import EpisodeBatch
from corral.framework.env import EnvFactory, EnvSpec, child_seed
from corral.framework.errors import ConfigError
from corral.framework.worker import WorkerFactory
from corral.plugins.policies.mlp import MLPPolicy
from corral.plugins.workers.default import DefaultWorker
from corral.plugins.workers.fragment import FragmentWorker
from corral.plugins.workers.vec import VecWorker


def make_policy(env_id: str = "CartPole-v1", seed: int = 0) -> MLPPolicy:
    torch.manual_seed(seed)
    return MLPPolicy(EnvSpec.from_env(gym.make(env_id)), hidden_sizes=(16, 16))


def same_seed(a: np.random.SeedSequence, b: np.random.SeedSequence) -> bool:
    return bool(np.array_equal(a.generate_state(4), b.generate_state(4)))


# ---------------------------------------------------------------------- WorkerFactory
def test_worker_seeds_are_spawned_children_never_seed_plus_i() -> None:
    factory = WorkerFactory(seed=7, max_episode_length=50, n_workers=4, worker_class=VecWorker,
                            worker_args=dict(n_envs=3))
    spawned = np.random.SeedSequence(7).spawn(4)
    for i in range(4):
        worker = factory(i)
        assert worker.worker_number == i and worker.n_envs == 3
        assert same_seed(worker.seed, spawned[i])
        assert same_seed(factory.worker_seed(i), spawned[i])
        assert not same_seed(worker.seed, np.random.SeedSequence(7 + i))
        env_children = spawned[i].spawn(3)
        for j in range(3):
            assert same_seed(worker.env_seeds[j], env_children[j])
            assert same_seed(worker.action_seeds[j], env_children[j].spawn(2)[1])
    # A restarted worker moves on to a new stream.
    assert not same_seed(factory.worker_seed(1, restart=1), factory.worker_seed(1))
    assert same_seed(factory.worker_seed(1, restart=1), np.random.SeedSequence(7).spawn(2)[1].spawn(2)[1])


def test_worker_factory_defaults_and_errors() -> None:
    factory = WorkerFactory(max_episode_length=10)
    assert isinstance(factory.seed, int)  # fresh entropy, recorded so it can be reported
    assert factory.worker_class is DefaultWorker
    assert pickle.loads(pickle.dumps(factory)).seed == factory.seed
    with pytest.raises(ConfigError):
        WorkerFactory(seed=0, n_workers=0)
    with pytest.raises(ValueError, match="out of range"):
        factory(1)


def test_worker_factory_pickles_and_builds_the_same_worker() -> None:
    factory = WorkerFactory(seed=3, max_episode_length=40, n_workers=2, worker_class=VecWorker,
                            worker_args=dict(n_envs=2))
    clone = pickle.loads(pickle.dumps(factory))
    assert clone == factory
    batches = []
    for f in (factory, clone):
        worker = f(1)
        worker.update_env(EnvFactory("CartPole-v1"))
        worker.update_agent(make_policy())
        batches.append(worker.rollout())
        worker.shutdown()
    assert batches[0].equals(batches[1])


def test_prepare_worker_messages() -> None:
    factory = WorkerFactory(seed=0, max_episode_length=10, n_workers=3)
    params = {"w": np.zeros(2)}
    msgs = factory.prepare_worker_messages(params)
    assert len(msgs) == 3 and all(m is not params for m in msgs)  # deep-copied per worker
    items = [1, 2, 3]
    assert factory.prepare_worker_messages(items) == [1, 2, 3]
    with pytest.raises(ConfigError, match="exactly one item per worker"):
        factory.prepare_worker_messages([1, 2])


# ---------------------------------------------------------------------- Worker
def test_worker_argument_checks() -> None:
    with pytest.raises(ConfigError, match="n_envs"):
        VecWorker(seed=0, max_episode_length=10, n_envs=0)
    with pytest.raises(ConfigError, match="env_seeds"):
        VecWorker(seed=0, max_episode_length=10, n_envs=2, env_seeds=[np.random.SeedSequence(1)])
    worker = DefaultWorker(seed=0, max_episode_length=10)
    with pytest.raises(ConfigError, match="before it had an agent"):
        worker.update_agent(make_policy().get_param_values())

    class DuckAgent:  # has get_actions, but is not a corral.Policy
        def get_actions(self, observations):
            return np.zeros(len(observations), dtype=np.int64), {}

    with pytest.raises(ConfigError, match=r"agent of type .*DuckAgent, which is not a corral.Policy; subclass"):
        worker.update_agent(DuckAgent())
    worker.update_env(EnvFactory("CartPole-v1"))
    with pytest.raises(ConfigError, match="env_update"):
        worker.update_env(42)


def test_env_seeds_override() -> None:
    seeds = np.random.SeedSequence(11).spawn(2)
    worker = VecWorker(seed=0, max_episode_length=10, n_envs=2, env_seeds=seeds)
    assert worker.env_seeds == seeds
    assert same_seed(worker.action_seeds[1], child_seed(seeds[1], 1))


def test_env_is_seeded_on_first_reset_from_its_stream() -> None:
    seeds = np.random.SeedSequence(5).spawn(1)
    worker = DefaultWorker(seed=0, max_episode_length=30, env_seeds=seeds)
    worker.update_env(EnvFactory("CartPole-v1"))
    worker.update_agent(make_policy())
    first = worker.rollout()
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=int(child_seed(seeds[0], 0).generate_state(1, np.uint32)[0]))
    np.testing.assert_array_equal(first.observations[0], obs)
    # Later resets continue the environment's RNG instead of reseeding.
    second = worker.rollout()
    np.testing.assert_array_equal(second.observations[0], env.reset()[0])


def test_update_agent_with_params_changes_actions() -> None:
    worker = DefaultWorker(seed=0, max_episode_length=200)
    worker.update_env(EnvFactory("CartPole-v1"))
    worker.update_agent(make_policy(seed=0))
    params = worker.agent.get_param_values()
    last = max(k for k in params if k.endswith(".bias"))
    params[last] = np.array([20.0, -20.0], np.float32)  # always push left
    worker.update_agent(params)
    b = worker.rollout(n_episodes=2)
    assert (b.actions == 0).all()
    worker.update_agent(None)  # no change
    assert (worker.rollout().actions == 0).all()


def test_update_env_callable_is_applied_to_each_env() -> None:
    worker = VecWorker(seed=0, max_episode_length=30, n_envs=3)
    worker.update_env(EnvFactory("CartPole-v1"))
    seen = []
    worker.update_env(lambda env: seen.append(env))
    assert seen == worker.envs and len(seen) == 3
    replacement = [gym.make("CartPole-v1") for _ in range(3)]
    worker.update_env(lambda env: replacement[worker.envs.index(env)])
    assert worker.envs == replacement


# ---------------------------------------------------------------------- snapshots
def build(worker_class: type, **args: object):  # noqa: ANN201
    worker = worker_class(seed=21, max_episode_length=30, **args)
    worker.update_env(EnvFactory("Pendulum-v1"))
    worker.update_agent(make_policy("Pendulum-v1"))
    return worker


@pytest.mark.parametrize(
    "worker_class, args",
    [(DefaultWorker, {}), (VecWorker, {"n_envs": 3}), (FragmentWorker, {"n_envs": 3, "timesteps_per_call": 17})],
)
def test_worker_state_dict_restores_sampling_exactly(worker_class: type, args: dict) -> None:
    a = build(worker_class, **args)
    a.rollout()
    state = copy.deepcopy(a.state_dict())
    expect = EpisodeBatch.concatenate(a.rollout(), a.rollout())
    b = build(worker_class, **args)
    b.load_state_dict(state)
    got = EpisodeBatch.concatenate(b.rollout(), b.rollout())
    assert got.equals(expect), got.differences(expect)
    # And a fresh worker without the state does not reproduce it (the state carried something).
    c = build(worker_class, **args)
    assert not EpisodeBatch.concatenate(c.rollout(), c.rollout()).equals(expect)


def test_state_dict_is_a_snapshot_not_a_view() -> None:
    a = build(VecWorker, n_envs=2)
    a.rollout()
    state = a.state_dict()
    frozen = copy.deepcopy(state)
    a.rollout()
    b1, b2 = build(VecWorker, n_envs=2), build(VecWorker, n_envs=2)
    b1.load_state_dict(state)
    b2.load_state_dict(frozen)
    assert b1.rollout().equals(b2.rollout())


def test_a_worker_traceback_is_shown_from_where_corral_called_out() -> None:
    """``WorkerError.traceback_from_caller`` leaves out the leading frames in corral's package (the
    sampler and the worker, the same in every run) and keeps the rest; a traceback of corral's
    frames only (corral itself raised) is kept whole; ``error_report`` puts it before the line."""
    import os

    import corral
    from corral.framework.errors import WorkerError, error_report

    here = os.path.dirname(corral.__file__)
    tb = ("Traceback (most recent call last):\n"
          f'  File "{here}/plugins/samplers/local.py", line 1, in _in_worker\n    return call()\n'
          f'  File "{here}/plugins/workers/default.py", line 2, in rollout\n    self.step_episode()\n'
          '  File "/somewhere/else/my_env.py", line 3, in step\n    raise ValueError("boom")\n'
          "ValueError: boom")
    error = WorkerError("worker 0 raised ValueError: boom while sampling (obtain_samples)", remote_traceback=tb)
    shown = error.traceback_from_caller()
    assert shown == ("Traceback (most recent call last):\n  ... 2 frame(s) in corral's sampler and worker ...\n"
                     '  File "/somewhere/else/my_env.py", line 3, in step\n    raise ValueError("boom")\nValueError: boom')
    assert error_report(error) == (f"{shown}\ncorral: error: worker 0 raised ValueError: boom while sampling "
                                   "(obtain_samples); the traceback above shows where it raised")
    assert error_report(error, lead="[job 3] ").splitlines() == [f"[job 3] {line}" for line in
                                                                 error_report(error).splitlines()]
    only_corral = tb.replace("/somewhere/else", f"{here}/plugins/workers")
    assert WorkerError("x", remote_traceback=only_corral).traceback_from_caller() == only_corral
    assert WorkerError("x").traceback_from_caller() is None and error_report(WorkerError("x")) == "corral: error: x"


def test_ray_actor_tracebacks_read_as_python_tracebacks() -> None:
    """Ray's text of an actor's exception: colour codes, an actor header and stray caret lines."""
    from corral.plugins.samplers.ray import ray_traceback

    text = ("\x1b[36mray::_RayWorker.sample()\x1b[39m (pid=1, ip=1.2.3.4, actor_id=ab, repr=<w>)\n"
            "           ^^^^^^^^^^^^\n           ^^^^^^^^^\n"
            '  File "/x/ray.py", line 90, in sample\n    return f()\n    ^^^\nValueError: boom')
    assert ray_traceback(text) == ('Traceback (most recent call last):\n  File "/x/ray.py", line 90, in sample\n'
                                   "    return f()\n    ^^^\nValueError: boom")
    assert ray_traceback("ValueError: boom") == "ValueError: boom"
