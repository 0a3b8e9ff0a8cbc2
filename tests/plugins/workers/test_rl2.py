"""``worker=rl2``: trials, hidden state carried within a trial, tasks per trial, same episodes under
every sampler, snapshots, and the composition checks."""

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

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.compose import validate
from corral.framework.env import EnvFactory, EnvSpec
from corral.framework.errors import ConfigError
from corral.framework.worker import WorkerFactory
from corral.meta.meta_eval import trial_episode_returns
from corral.meta.task_envs import make_task_env
from corral.meta.tasks import TaskSampler, TaskSchedule, TaskSplit
from corral.plugins.policies.gru import GRUPolicy
from corral.plugins.samplers.multiprocessing import MultiprocessingSampler
from corral.plugins.workers.rl2 import RL2Worker
from corral.testing import WorkerContract


def _bandits(max_episode_steps: int = 10) -> EnvFactory:
    """RL2-wrapped three-armed bandits with ``max_episode_steps`` pulls per episode."""
    return EnvFactory(make_task_env, {"entry_point": "corral.plugins.envs.bandits:BernoulliBanditEnv",
                                      "max_episode_steps": max_episode_steps, "rl2_inputs": True, "n_arms": 3})


BANDITS = _bandits(2)
POINT = EnvFactory(make_task_env, {"entry_point": "corral.plugins.envs.point_nav:PointNavEnv",
                                   "max_episode_steps": 5, "rl2_inputs": True})
SPLIT = TaskSplit(n_train=20, n_test=5, seed=0)


def make_policy(env: EnvFactory, seed: int = 0) -> GRUPolicy:
    torch.manual_seed(seed)
    p = GRUPolicy(EnvSpec.from_env(env()), hidden_size=16)
    with torch.no_grad():
        p.head.weight.normal_(0, 0.5)
    return p


def make_worker(env: EnvFactory = BANDITS, seed: int = 1, **args: int) -> RL2Worker:
    args.setdefault("n_episodes_per_trial", 3)
    worker = WorkerFactory(seed=seed, n_workers=1, worker_class=RL2Worker, worker_args=args)(0)
    worker.update_env(env)
    worker.update_agent(make_policy(env))
    return worker


@pytest.mark.parametrize("n_envs", [1, 3])
def test_a_trial_is_one_episode_of_concatenated_episodes(n_envs: int) -> None:
    worker = make_worker(n_envs=n_envs)
    worker.update_env(TaskSchedule(SPLIT, (3, 1, 4, 1, 5), "train"))
    batch = worker.rollout(n_episodes=5)
    assert batch.n_episodes == 5 and (batch.lengths == 6).all()  # 3 episodes of 2 pulls
    assert batch.complete.all() and (batch.step_types[batch.lengths.cumsum() - 1] == StepType.TERMINAL).all()
    assert batch.env_infos["rl2_episode"].tolist() == [0, 0, 1, 1, 2, 2] * 5
    assert batch.env_infos["rl2_step_type"].tolist() == [StepType.FIRST, StepType.TIMEOUT] * 15
    assert sorted(batch.episode_infos["task_id"].tolist()) == [1, 1, 3, 4, 5]
    if n_envs == 1:
        assert batch.episode_infos["task_id"].tolist() == [3, 1, 4, 1, 5]
    # the done flag (last observation entry) is 1 exactly at the first step of episodes 2 and 3
    done = batch.observations[:, -1].reshape(5, 6)
    assert (done == np.array([0, 0, 1, 0, 1, 0])).all()
    assert trial_episode_returns(batch).shape == (5, 3)
    worker.shutdown()


def test_hidden_state_is_carried_within_a_trial_and_reset_at_its_start() -> None:
    worker = make_worker(POINT, n_envs=2, n_episodes_per_trial=2)
    batch = worker.rollout(n_episodes=4)
    policy = worker.agent
    obs = torch.from_numpy(batch.pad(batch.observations))
    actions = torch.from_numpy(batch.pad(batch.actions))
    with torch.no_grad():
        whole = policy.log_prob_entropy_sequences(obs, actions)[0].numpy()  # from zero state per trial
        # the same trials with the memory wiped between episodes (what a reset per episode would give)
        wiped = torch.cat([policy.log_prob_entropy_sequences(obs[:, i * 5:(i + 1) * 5], actions[:, i * 5:(i + 1) * 5])[0]
                           for i in range(2)], dim=1).numpy()
    recorded = batch.pad(batch.agent_infos["log_prob"])
    assert np.allclose(recorded, whole, atol=1e-4), "sampling did not carry the hidden state exactly like a trial"
    assert not np.allclose(recorded[:, 5:], wiped[:, 5:], atol=1e-3), "episode 2 must see episode 1's memory"
    worker.shutdown()


def test_min_steps_and_default_rollout() -> None:
    worker = make_worker(n_envs=2)
    assert worker.rollout().n_episodes == 2
    batch = worker.rollout(min_steps=40)
    assert len(batch) >= 40 and (batch.lengths == 6).all()
    worker.shutdown()


def test_state_dict_round_trip() -> None:
    worker = make_worker(n_envs=2)
    worker.update_env(TaskSchedule(SPLIT, tuple(range(10)), "train"))
    worker.rollout(n_episodes=3)
    state = copy.deepcopy(worker.state_dict())
    following = worker.rollout(n_episodes=4)
    worker.load_state_dict(copy.deepcopy(state))
    assert worker.rollout(n_episodes=4).differences(following) == []
    fresh = make_worker(n_envs=2)
    fresh.load_state_dict(copy.deepcopy(state))
    assert fresh.rollout(n_episodes=4).differences(following) == []
    worker.shutdown()
    fresh.shutdown()


def test_a_restored_worker_keeps_the_environments_own_task() -> None:
    """No schedule: each env draws its bandit at its first reset; the snapshot carries it over."""
    assert_restored_worker_keeps_the_task(lambda: make_worker(n_envs=2), "probs", 3, 4)


def test_environment_without_rl2_inputs_is_rejected() -> None:
    plain = EnvFactory(make_task_env, {"entry_point": "corral.plugins.envs.bandits:BernoulliBanditEnv",
                                       "max_episode_steps": 2})
    worker = WorkerFactory(seed=1, n_workers=1, worker_class=RL2Worker)(0)
    with pytest.raises(ConfigError, match="env.rl2_inputs=true"):
        worker.update_env(plain)


def _sample_both(other_class: type, **options: object) -> None:
    kw = {"seed": 5, "n_workers": 2, "worker_class": RL2Worker, "worker_args": {"n_episodes_per_trial": 3, "n_envs": 2}}
    assert_same_trials_as_local(other_class, make_policy(BANDITS), BANDITS, kw, TaskSampler(SPLIT, seed=5),
                                batch_size=60, tasks_per_worker=8, exact=2, **options)


def test_same_seed_same_trials_local_and_multiprocessing() -> None:
    _sample_both(MultiprocessingSampler, timeout=60.0)


def test_same_seed_same_trials_local_and_ray() -> None:
    pytest.importorskip("ray")
    from corral.plugins.samplers.ray import RaySampler

    with local_ray():
        _sample_both(RaySampler)


# ---------------------------------------------------------------------- composition checks
RL2 = ["algo=rl2_ppo", "policy=gru", "worker=rl2", "env=bandits", "env.rl2_inputs=true"]


@pytest.mark.parametrize("overrides, message", [
    (with_choices(RL2, "worker=vec"), "choose worker=rl2"),
    (with_choices(RL2, "worker=fragment"), "worker=fragment returns fragments; choose worker=rl2$"),
    (with_choices(RL2, "policy=mlp"), "choose policy=gru"),
    (with_choices(RL2, "algo=ppo"), "choose algo=rl2_ppo"),
    (with_choices(RL2, "env.rl2_inputs=false"), "set env.rl2_inputs=true"),
    (["algo=rl2_ppo", "policy=gru", "worker=rl2", "env=cartpole"], "choose env=bandits"),
])
def test_incompatible_choices_are_rejected_with_what_to_choose(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        validate(compose(*overrides))


def test_presets_compose_and_validate() -> None:
    for name in ("rl2_bandits", "rl2_pointnav", "rl2_cheetah_vel"):
        cfg = compose(f"experiment={name}")
        validate(cfg)
        assert cfg.worker.name == "rl2" and cfg.policy.name == "gru" and cfg.algo.name == "rl2_ppo"
    cfg = compose("experiment=rl2_bandits")
    assert (cfg.env.n_arms, cfg.worker.n_episodes_per_trial, cfg.env.n_pulls) == (5, 10, 1)


def test_same_seed_same_trials_local_and_action_server() -> None:
    """The GRU's hidden state lives on the server per slot; trials equal the local sampler's."""
    from corral.plugins.samplers.action_server import ActionServerSampler

    _sample_both(ActionServerSampler, timeout=60.0, device="cpu")


# ---------------------------------------------------------------------- the worker contract
class TestRL2WorkerContract(WorkerContract):
    """corral's worker contract for ``worker=rl2``: two slots of three-episode trials on RL2-wrapped
    bandits, tasks scheduled as ``algo=rl2_ppo`` schedules them, with the GRU policy. A trial is one
    episode of the batch; the step-type and episode-length checks look at the environment episodes
    inside it (``env_infos["rl2_step_type"]``). Bandits never end an episode themselves, so the
    TERMINAL check runs the trials on the RL2-wrapped point robot whose arena ends its episodes."""

    worker_class = "rl2"
    worker_args = {"n_episodes_per_trial": 3, "n_envs": 2}

    def make_env(self, max_episode_steps: int | None = None) -> EnvFactory:
        """Bandits of ten pulls per episode (or ``max_episode_steps``)."""
        return _bandits(max_episode_steps or 10)

    def make_terminating_env(self) -> EnvFactory:
        """The RL2-wrapped point robot; leaving its small arena ends an episode."""
        return EnvFactory(point_nav_arena, {"rl2_inputs": True})

    def make_env_update(self) -> TaskSchedule:
        """A task per trial from a fixed schedule (the tasks and their order go into ``state_dict()``)."""
        return TaskSchedule(SPLIT, tuple(range(10)), "train")

    def make_policy(self, env_spec: EnvSpec, seed: int = 0) -> GRUPolicy:
        """The GRU policy RL2 trains (small), its weights depending only on ``seed``."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return GRUPolicy(env_spec, hidden_size=16)

    def episode_ends(self, batch: EpisodeBatch) -> tuple[np.ndarray, np.ndarray]:
        """The environment episodes inside the batch's trials: their own last step types and lengths."""
        inner = np.asarray(batch.env_infos["rl2_step_type"])
        ends = np.flatnonzero((inner == StepType.TERMINAL) | (inner == StepType.TIMEOUT))
        assert len(ends) and ends[-1] == len(batch) - 1, "the batch's trials do not end with whole episodes"
        return inner[ends], np.diff(ends, prepend=-1)
