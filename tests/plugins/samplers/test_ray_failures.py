"""RaySampler fails as the multiprocessing sampler does: the same words and the same semantics.

- ``max_restarts`` counts restarts per worker over the sampler's life (not per call);
- ``timeout`` is seconds without progress (a slow worker that steps is never timed out);
- a dead actor is named with what it was doing;
- an environment that cannot be built is its own clean traceback, not Ray's.
"""

from __future__ import annotations

import logging
import re
import time

import pytest

ray = pytest.importorskip("ray")

from corral import EnvFactory, EnvSpec, MLPPolicy, RaySampler  # noqa: E402
from corral.framework.errors import WorkerError  # noqa: E402
from corral.testing.processes import wait_gone  # noqa: E402

FAULTY = "corral.testing.faulty_envs:corral/{}CartPole-v1"


@pytest.fixture(scope="module")
def policy():
    import torch

    torch.manual_seed(0)
    return MLPPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()))


def test_max_restarts_counts_per_worker_over_the_run(ray_runtime, policy, caplog) -> None:
    """Worker 1 dies once in every call after its first (step 250 of each life, 150-step shares): under
    multiprocessing the third death ends the run with max_restarts=2; ray used to restart it forever."""
    env = EnvFactory(FAULTY.format("Suicide"), {"fail_at": 250, "only_worker": 1, "first_life_only": False})
    caplog.set_level(logging.WARNING, logger="corral.plugins.samplers.ray")
    with RaySampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1, timeout=30,
                    on_worker_failure="restart", max_restarts=2) as sampler:
        params = policy.get_param_values()
        with pytest.raises(WorkerError) as info:
            for itr in range(8):
                sampler.obtain_samples(itr, 300, params)
        assert sampler.n_restarts == 2 and itr <= 4, (sampler.n_restarts, itr)
    text = str(info.value)
    assert "\n" not in text and info.value.worker_number == 1, text
    assert re.fullmatch(r"ray sampler: worker 1 \(pid \d+\) died while sampling \(obtain_samples\) \(Ray gives no exit code or signal.*"
                        r"; it was already restarted 2 times \(sampler\.max_restarts=2\)", text), text
    warnings = [r.getMessage() for r in caplog.records if "restarting" in r.getMessage()]
    assert len(warnings) == 2, warnings
    for n, line in enumerate(warnings, 1):
        assert line.count("ray sampler:") == 1 and "\n" not in line, line
        assert line.startswith("ray sampler: worker 1 (pid "), line
        assert line.endswith(f"; restarting it (restart {n} of at most 2) and resampling its share"), line


def test_restart_help_and_timeout_help_match_multiprocessing() -> None:
    from dataclasses import fields

    from corral.plugins.samplers.multiprocessing import MultiprocessingSamplerConfig
    from corral.plugins.samplers.ray import RaySamplerConfig

    helps = {f.name: f.metadata.get("help") for f in fields(RaySamplerConfig)}
    reference = {f.name: f.metadata.get("help") for f in fields(MultiprocessingSamplerConfig)}
    for name in ("max_restarts", "on_worker_failure", "timeout"):
        assert helps[name] == reference[name], name


def test_a_slow_worker_that_steps_is_not_timed_out(ray_runtime, policy) -> None:
    """0.02 s per step, 150-step shares (3 s) and timeout=1.5: the workers keep stepping, so the call
    completes, as under multiprocessing (ray used to bound the whole call by the timeout)."""
    env = EnvFactory(FAULTY.format("Swallowing"), {"fail_at": 1, "hang_s": 0.02})
    with RaySampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1, timeout=1.5) as sampler:
        t0 = time.monotonic()
        batch = sampler.obtain_samples(0, 300, policy.get_param_values())
        assert len(batch) >= 300 and time.monotonic() - t0 > 3.0


def test_a_hung_worker_is_named_with_its_pid_and_terminated(ray_runtime, policy) -> None:
    env = EnvFactory(FAULTY.format("Hanging"), {"fail_at": 20, "only_worker": 1, "hang_s": 60})
    with RaySampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1, timeout=3) as sampler:
        pid = sampler.locations[1][0]
        t0 = time.monotonic()
        with pytest.raises(WorkerError) as info:
            sampler.obtain_samples(0, 500, policy.get_param_values())
        assert time.monotonic() - t0 < 20
        assert not wait_gone([pid], timeout=10), "the hung actor was not terminated"
    assert info.value.worker_number == 1
    assert str(info.value) == (f"ray sampler: worker 1 (pid {pid}) made no progress for 3 s while sampling "
                               "(obtain_samples) and was terminated; raise sampler.timeout if its rollouts "
                               "are this slow"), str(info.value)


def test_a_dead_worker_says_what_it_was_doing(ray_runtime, policy) -> None:
    env = EnvFactory(FAULTY.format("Suicide"), {"fail_at": 30, "only_worker": 1})
    with RaySampler(agents=policy, envs=env, max_episode_length=200, n_workers=2, seed=1, timeout=30) as sampler:
        pid = sampler.locations[1][0]
        with pytest.raises(WorkerError) as info:
            sampler.obtain_exact_episodes(3, policy.get_param_values())
    text = str(info.value)
    assert "\n" not in text and info.value.worker_number == 1, text
    assert text.startswith(f"ray sampler: worker 1 (pid {pid}) died while sampling (obtain_exact_episodes)"), text
    assert "before finishing this task" not in text, "Ray's words, not corral's"


def test_an_environment_that_cannot_be_built_has_a_clean_traceback(ray_runtime, policy) -> None:
    """The traceback ends where the environment raised, as under multiprocessing: no Ray header, colour
    codes or caret lines, and not the UpdateFailure that carried it."""
    env = EnvFactory(FAULTY.format("Raising"), {"fail_at": "not a number"})  # int() raises in __init__
    with pytest.raises(WorkerError) as info:
        RaySampler(agents=policy, envs=env, max_episode_length=200, n_workers=1, seed=1, timeout=30)
    error = info.value
    assert str(error).splitlines()[0].startswith("ray sampler: worker 0 could not apply the environment update: ")
    tb = error.remote_traceback or ""
    assert tb.startswith("Traceback (most recent call last):\n"), tb
    assert "\x1b[" not in tb and "ray::" not in tb and "UpdateFailure" not in tb, tb
    assert "The above exception was the direct cause" not in tb, tb
    assert "faulty_envs.py" in tb and tb.splitlines()[-1].startswith("ValueError: "), tb
    assert not any(line.strip() and not line.strip().strip("^~") for line in tb.splitlines()[1:2]), tb
