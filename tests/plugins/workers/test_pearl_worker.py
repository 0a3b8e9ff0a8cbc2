"""``worker=pearl``: trials on tasks, prior then posterior z, the context reward, really deterministic
evaluation, snapshots, the same episodes under every sampler, and the composition checks."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from trial_worker_helpers import (
    assert_restored_worker_keeps_the_task,
    assert_same_trials_as_local,
    compose,
    local_ray,
    point_nav_arena,
    with_choices,
)

from corral.framework.batch import StepType
from corral.framework.compose import validate
from corral.framework.env import EnvFactory, EnvSpec
from corral.framework.errors import ConfigError
from corral.framework.worker import WorkerFactory
from corral.meta.meta_eval import pearl_episode_returns
from corral.meta.task_envs import make_task_env
from corral.meta.tasks import TaskSampler, TaskSchedule, TaskSplit
from corral.plugins.policies.pearl import PEARLPolicy
from corral.plugins.samplers.multiprocessing import MultiprocessingSampler
from corral.plugins.workers.pearl import PEARLWorker
from corral.testing import WorkerContract

#: Sparse point robot with a wide success radius, so a random walk sometimes scores.
POINT = EnvFactory(make_task_env, {"entry_point": "corral.plugins.envs.point_nav:PointNavEnv",
                                   "max_episode_steps": 6, "goal_radius": 0.9, "goal_distance": 0.5})
SPLIT = TaskSplit(n_train=20, n_test=5, seed=0)


def make_policy(seed: int = 0) -> PEARLPolicy:
    torch.manual_seed(seed)
    return PEARLPolicy(EnvSpec.from_env(POINT()), hidden_sizes=[16], encoder_hidden_sizes=[16], latent_size=2)


def make_worker(seed: int = 1, policy: PEARLPolicy | None = None, **args: object) -> PEARLWorker:
    args.setdefault("n_episodes_per_trial", 3)
    worker = WorkerFactory(seed=seed, n_workers=1, worker_class=PEARLWorker, worker_args=args)(0)
    worker.update_env(POINT)
    worker.update_agent(copy.deepcopy(policy) if policy is not None else make_policy())
    return worker


@pytest.mark.parametrize("n_envs", [1, 2])
def test_trials_are_episodes_on_one_task_prior_first(n_envs: int) -> None:
    worker = make_worker(n_envs=n_envs, n_episodes_per_trial=3, n_prior_episodes=1, context_reward="sparse_reward")
    worker.update_env(TaskSchedule(SPLIT, (3, 1, 4), "train"))
    batch = worker.rollout(n_episodes=9)
    assert batch.n_episodes == 9 and (batch.lengths == 6).all()
    assert (batch.step_types[batch.lengths.cumsum() - 1] == StepType.TIMEOUT).all()
    assert batch.episode_infos["pearl_episode"].tolist() == [0, 1, 2] * 3
    assert batch.episode_infos["pearl_posterior"].tolist() == [0, 1, 1] * 3
    assert batch.episode_infos["task_id"].tolist() == [3, 3, 3, 1, 1, 1, 4, 4, 4]
    # the context reward is the sparse one from the step info: 1 - distance within the radius, else 0
    sparse = batch.env_infos["context_reward"]
    assert ((sparse == 0) | (sparse > 0.1)).all() and (batch.rewards < 0).all()
    assert pearl_episode_returns(batch).shape == (3, 3)
    # the agent's context holds the last trial of its slot, every episode of it
    assert worker.agent.context_size(0) == 18
    worker.shutdown()


def test_rollout_sizes() -> None:
    worker = make_worker(n_envs=2, n_episodes_per_trial=2)
    assert worker.rollout().n_episodes == 4  # one trial per slot
    assert worker.rollout(n_episodes=3).n_episodes == 3
    batch = worker.rollout(min_steps=40)
    assert len(batch) >= 40 and batch.n_episodes % 2 == 0
    worker.shutdown()


def test_posterior_episodes_act_on_the_trials_context() -> None:
    """z of a posterior episode is the posterior over the trial's earlier episodes: with the same
    deterministic agent, episode 1 of a trial differs from episode 0 once the context says something."""
    policy = make_policy()
    with torch.no_grad():  # a strong encoder response to the reward
        policy.encoder.net[-1].weight.mul_(20.0)
    worker = make_worker(policy=policy, n_episodes_per_trial=2)
    worker.agent.deterministic = True
    worker.update_env(TaskSchedule(SPLIT, (0,), "test"))
    batch = worker.rollout(n_episodes=2)
    first, second = batch.split()
    assert not np.allclose(first.actions, second.actions)
    prior_only = copy.deepcopy(worker.agent)
    prior_only.clear_context()
    prior_only.add_context(0, first.observations, first.actions, first.rewards)
    assert np.allclose(worker.agent.z[0], prior_only.posterior(0)[0])  # z of episode 2 = posterior mean
    worker.shutdown()


def test_a_trial_starts_with_the_schedules_known_context() -> None:
    """With a known context in the schedule, a posterior episode's z is the posterior over that
    context plus the trial's earlier episodes; prior episodes are unaffected."""
    policy = make_policy()
    with torch.no_grad():
        policy.encoder.net[-1].weight.mul_(20.0)
    rng = np.random.default_rng(0)
    known = {"observations": rng.normal(size=(5, 2)), "actions": rng.uniform(-0.1, 0.1, size=(5, 2)),
             "rewards": rng.uniform(-1.0, 0.0, size=5)}
    runs = {}
    for name, contexts in (("empty", None), ("known", (known,))):
        worker = make_worker(policy=policy, n_episodes_per_trial=2)
        worker.agent.deterministic = True
        worker.update_env(TaskSchedule(SPLIT, (0,), "test", contexts=contexts))
        runs[name] = (worker.rollout(n_episodes=2).split(), worker.agent.z[0].copy())
        worker.shutdown()
    (prior_a, posterior_a), _ = runs["empty"]
    (prior_b, posterior_b), z_b = runs["known"]
    assert prior_a.differences(prior_b) == []  # the prior episode acts on the prior either way
    assert not np.allclose(posterior_a.actions, posterior_b.actions)
    expected = copy.deepcopy(policy)
    expected.seed(np.random.SeedSequence(0).spawn(1))
    expected.add_context(0, known["observations"], known["actions"], known["rewards"])
    expected.add_context(0, prior_b.observations, prior_b.actions, prior_b.rewards)
    np.testing.assert_allclose(z_b, expected.posterior(0)[0])


def test_deterministic_mode_returns_identical_episodes_twice() -> None:
    """garage's PEARL ignored its deterministic flag. Here, deterministic trials are a function of the
    parameters, the task and the environment seed only: workers with other noise streams (other seeds)
    give identical episodes, while stochastic trials differ."""
    policy = make_policy()
    runs = {}
    for deterministic in (True, False):
        for seed in (1, 2):
            worker = make_worker(seed=seed, policy=policy, n_episodes_per_trial=3, context_reward="sparse_reward")
            worker.agent.deterministic = deterministic
            worker.update_env(TaskSchedule(SPLIT, (2, 0), "test"))
            runs[deterministic, seed] = worker.rollout(n_episodes=6)
            again = worker.rollout(n_episodes=6) if deterministic else None
            worker.shutdown()
            if again is not None:  # the same worker, next trials on the same tasks: the same again
                assert again.differences(runs[deterministic, seed]) == []
    assert runs[True, 1].differences(runs[True, 2]) == []
    assert runs[False, 1].differences(runs[False, 2]) != []


def test_a_restored_worker_keeps_the_environments_own_task() -> None:
    """No schedule: each env draws its goal at its first reset; the snapshot carries it over."""
    assert_restored_worker_keeps_the_task(lambda: make_worker(n_envs=2), "goal", 4, 6)


def test_state_dict_round_trip() -> None:
    worker = make_worker(n_envs=2)
    worker.update_env(TaskSchedule(SPLIT, tuple(range(10)), "train"))
    worker.rollout(n_episodes=4)
    state = copy.deepcopy(worker.state_dict())
    following = worker.rollout(n_episodes=6)
    worker.load_state_dict(copy.deepcopy(state))
    assert worker.rollout(n_episodes=6).differences(following) == []
    fresh = make_worker(n_envs=2)
    fresh.update_env(TaskSchedule(SPLIT, tuple(range(10)), "train"))
    fresh.load_state_dict(copy.deepcopy(state))
    assert fresh.rollout(n_episodes=6).differences(following) == []
    worker.shutdown()
    fresh.shutdown()


def test_wrong_agent_and_missing_info_key_are_config_errors() -> None:
    from corral.plugins.policies.mlp import MLPPolicy

    worker = WorkerFactory(seed=1, n_workers=1, worker_class=PEARLWorker)(0)
    worker.update_env(POINT)
    with pytest.raises(ConfigError, match="choose policy=pearl"):
        worker.update_agent(MLPPolicy(EnvSpec.from_env(POINT())))
    worker = make_worker(context_reward="no_such_key")
    with pytest.raises(ConfigError, match="no_such_key"):
        worker.rollout()
    with pytest.raises(ConfigError, match="n_prior_episodes"):
        make_worker(n_episodes_per_trial=2, n_prior_episodes=3)


def _sample_both(other_class: type, **options: object) -> None:
    kw = {"seed": 5, "n_workers": 2, "worker_class": PEARLWorker,
          "worker_args": {"n_episodes_per_trial": 3, "n_envs": 2, "context_reward": "sparse_reward"}}
    assert_same_trials_as_local(other_class, make_policy(), POINT, kw, TaskSampler(SPLIT, seed=5),
                                batch_size=100, tasks_per_worker=6, exact=3, **options)


def test_same_seed_same_episodes_local_and_multiprocessing() -> None:
    _sample_both(MultiprocessingSampler, timeout=60.0)


def test_same_seed_same_episodes_local_and_ray() -> None:
    pytest.importorskip("ray")
    from corral.plugins.samplers.ray import RaySampler

    with local_ray():
        _sample_both(RaySampler)


# ---------------------------------------------------------------------- composition checks
PEARL = ["algo=pearl", "policy=pearl", "worker=pearl", "env=point_nav"]


@pytest.mark.parametrize("overrides, message", [
    (with_choices(PEARL, "worker=vec"), "choose worker=pearl"),
    (with_choices(PEARL, "worker=fragment"), "worker=fragment returns fragments; choose worker=pearl$"),
    (with_choices(PEARL, "policy=tanh_gaussian"), "choose policy=pearl"),
    (["algo=sac", "policy=tanh_gaussian", "worker=pearl", "env=point_nav"], "choose policy=pearl"),
    (with_choices(PEARL, "env=pendulum"), "choose env=point_nav"),
    (with_choices(PEARL, "env.rl2_inputs=true"), "set env.rl2_inputs=false"),
    (with_choices(PEARL, "sampler=action_server"), "use sampler=multiprocessing"),
    (with_choices(PEARL, "sampler=alternating"), "use sampler=multiprocessing"),
])
def test_incompatible_choices_are_rejected_with_what_to_choose(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(compose(*overrides))


def test_presets_compose_and_validate() -> None:
    for name in ("pearl_pointnav", "pearl_cheetah_vel"):
        cfg = compose(f"experiment={name}")
        validate(cfg)
        assert (cfg.algo.name, cfg.policy.name, cfg.worker.name) == ("pearl", "pearl", "pearl")


# ---------------------------------------------------------------------- the worker contract
class TestPearlWorkerContract(WorkerContract):
    """corral's worker contract for ``worker=pearl``: two slots of two-episode trials (the first
    with ``z`` from the prior, the second from the posterior) on the point robot, tasks scheduled as
    ``algo=pearl`` schedules them, with the PEARL policy. Each episode is its own episode of the batch.
    The point robot never ends an episode itself, so the TERMINAL check runs the trials on the point
    robot whose arena ends its episodes."""

    worker_class = "pearl"
    worker_args = {"n_episodes_per_trial": 2, "n_prior_episodes": 1, "n_envs": 2}

    def make_env(self, max_episode_steps: int | None = None) -> EnvFactory:
        """The dense-reward point robot, ten steps per episode (or ``max_episode_steps``)."""
        return EnvFactory(make_task_env, {"entry_point": "corral.plugins.envs.point_nav:PointNavEnv",
                                          "max_episode_steps": max_episode_steps or 10})

    def make_terminating_env(self) -> EnvFactory:
        """The point robot whose small arena ends an episode when the robot leaves it."""
        return EnvFactory(point_nav_arena)

    def make_env_update(self) -> TaskSchedule:
        """A task per trial from a fixed schedule (the tasks and their order go into ``state_dict()``)."""
        return TaskSchedule(SPLIT, tuple(range(10)), "train")

    def make_policy(self, env_spec: EnvSpec, seed: int = 0) -> PEARLPolicy:
        """The PEARL policy (small networks), its weights depending only on ``seed``."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return PEARLPolicy(env_spec, hidden_sizes=[16], encoder_hidden_sizes=[16], latent_size=2)
