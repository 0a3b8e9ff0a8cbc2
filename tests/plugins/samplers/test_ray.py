"""RaySampler: same episodes as the local sampler, faults become WorkerErrors or restarts, clean shutdown."""

from __future__ import annotations

import os
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from corral import EnvFactory, EnvSpec, LocalSampler, MLPPolicy, RaySampler, VecWorker  # noqa: E402
from corral.framework.errors import WorkerError  # noqa: E402
from corral.plugins.workers.default import DefaultWorker  # noqa: E402
from corral.testing.processes import wait_gone  # noqa: E402

FAULTY = "corral.testing.faulty_envs:corral/{}CartPole-v1"


@pytest.fixture(scope="module")
def policy():
    import torch

    torch.manual_seed(0)
    return MLPPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()))


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("worker", ["default", "vec"])
def test_same_episodes_as_local(ray_runtime, policy, seed: int, worker: str) -> None:
    kw = dict(max_episode_length=200, n_workers=2, seed=seed)
    if worker == "vec":
        kw.update(worker_class=VecWorker, worker_args=dict(n_envs=3))
    else:
        kw.update(worker_class=DefaultWorker)
    env = EnvFactory("CartPole-v1")
    params = policy.get_param_values()
    with LocalSampler(agents=policy, envs=env, **kw) as local, RaySampler(agents=policy, envs=env, **kw) as remote:
        for itr in range(2):
            a, b = local.obtain_samples(itr, 600, params), remote.obtain_samples(itr, 600, params)
            assert a.differences(b) == []
        a, b = local.obtain_exact_episodes(3, params), remote.obtain_exact_episodes(3, params)
        assert a.differences(b) == [] and a.n_episodes == 6
        pids = [pid for pid, _ in remote.locations]
    assert ray.is_initialized(), "the sampler must not shut down a Ray runtime it did not start"
    assert not wait_gone(pids), "actor processes outlived shutdown_worker()"


def test_sigkill_mid_sample_raises_worker_error_naming_the_worker(ray_runtime, policy) -> None:
    env = EnvFactory("corral.plugins.envs.cpu_heavy:corral/CPUHeavyCartPole-v1")
    sampler = RaySampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1, timeout=30)
    try:
        victim_pid = sampler.locations[1][0]
        threading.Timer(1.0, os.kill, (victim_pid, 9)).start()
        t0 = time.monotonic()
        with pytest.raises(WorkerError) as info:
            sampler.obtain_samples(0, 20_000, policy.get_param_values())
        assert time.monotonic() - t0 < 10 + 1.0
        assert info.value.worker_number == 1
        assert "worker 1" in str(info.value) and "died" in str(info.value)
    finally:
        pids = [pid for pid, _ in sampler.locations]
        sampler.shutdown_worker()
    assert not wait_gone(pids)


def test_sigkill_with_restart_completes_the_call(ray_runtime, policy) -> None:
    env = EnvFactory(FAULTY.format("Suicide"), {"fail_at": 150, "only_worker": 0})
    with RaySampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1,
                    on_worker_failure="restart") as sampler:
        batch = sampler.obtain_samples(0, 800, policy.get_param_values())
        assert len(batch) >= 800
        assert sampler.n_restarts == 1
        assert batch.complete.all()


def test_environment_raising_carries_its_traceback(ray_runtime, policy) -> None:
    env = EnvFactory(FAULTY.format("Raising"), {"fail_at": 30, "only_worker": 1})
    with RaySampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1) as sampler:
        with pytest.raises(WorkerError) as info:
            sampler.obtain_samples(0, 500, policy.get_param_values())
    err = info.value
    assert err.worker_number == 1
    assert "EnvironmentFailure" in str(err)
    assert "faulty_envs.py" in (err.remote_traceback or "")


def test_hanging_worker_is_reported_not_waited_on_forever(ray_runtime, policy) -> None:
    env = EnvFactory(FAULTY.format("Hanging"), {"fail_at": 20, "only_worker": 0, "hang_s": 60})
    with RaySampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1, timeout=3) as sampler:
        t0 = time.monotonic()
        with pytest.raises(WorkerError) as info:
            sampler.obtain_samples(0, 500, policy.get_param_values())
        assert time.monotonic() - t0 < 30
    assert "made no progress for 3 s" in str(info.value) and info.value.worker_number == 0


def test_all_workers_dead_is_an_error_not_a_spin(ray_runtime, policy) -> None:
    env = EnvFactory(FAULTY.format("Suicide"), {"fail_at": 5, "first_life_only": False})
    with RaySampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1,
                    on_worker_failure="restart", max_restarts=3) as sampler:
        with pytest.raises(WorkerError):
            sampler.obtain_samples(0, 500, policy.get_param_values())


def test_state_dict_round_trip(ray_runtime, policy) -> None:
    env = EnvFactory("CartPole-v1")
    params = policy.get_param_values()
    kw = dict(max_episode_length=200, n_workers=2, seed=4, worker_class=VecWorker, worker_args=dict(n_envs=2),
              num_cpus=0.5)
    with RaySampler(agents=policy, envs=env, **kw) as first, RaySampler(agents=policy, envs=env, **kw) as second:
        first.obtain_samples(0, 300, params)
        second.load_state_dict(first.state_dict())
        assert first.obtain_samples(1, 300, params).differences(second.obtain_samples(1, 300, params)) == []


def test_an_actor_dead_when_its_state_is_saved_or_restored_is_a_worker_error(ray_runtime, policy) -> None:
    """The trainer saves the sampler's state after every update: an actor that died since it sampled is
    the one-line WorkerError sampling gives (it was Ray's ActorDiedError with its traceback)."""
    env = EnvFactory("CartPole-v1")
    with RaySampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1, timeout=30) as sampler:
        sampler.obtain_samples(0, 300, policy.get_param_values())
        state = sampler.state_dict()
        with pytest.raises(Exception, match="the sampler state holds 1 workers, this sampler has 2"):
            sampler.load_state_dict({**state, "workers": state["workers"][:1]})
        victim = sampler.locations[1][0]
        os.kill(victim, 9)
        assert not wait_gone([victim])
        for call in (sampler.state_dict, lambda: sampler.load_state_dict(state)):
            with pytest.raises(WorkerError) as info:
                call()
            assert info.value.worker_number == 1 and "worker 1" in str(info.value) and "died" in str(info.value)


def test_unplaceable_actors_are_a_clear_error(ray_runtime, policy) -> None:
    with pytest.raises(WorkerError, match="were not placed within 2 s"):
        RaySampler(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=100, n_workers=1, seed=1,
                   num_cpus=64, start_timeout=2)
