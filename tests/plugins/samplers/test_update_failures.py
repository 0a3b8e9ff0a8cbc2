"""A failed agent or environment update raises the same WorkerError on every sampler, before any data
of that round is returned (issue 18 section 2); the bookkeeping behind it stays bounded."""

from __future__ import annotations

import importlib.util
import operator
import os

import numpy as np
import pytest

from corral import EnvFactory, EnvSpec, MLPPolicy
from corral.framework.errors import WorkerError

SAMPLERS = ["local", "multiprocessing", "ray", "action_server", "alternating"]
N_WORKERS = 2


@pytest.fixture(scope="module")
def policy() -> MLPPolicy:
    import torch

    torch.manual_seed(0)
    return MLPPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()))


@pytest.fixture(scope="module")
def ray_runtime():
    """One small Ray runtime for the module's Ray cases (the samplers must not shut it down)."""
    if importlib.util.find_spec("ray") is None:
        yield None
        return
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield ray
    if started:
        ray.shutdown()


def make_sampler(name: str, policy: MLPPolicy, ray_runtime):
    """The registered sampler ``name`` with two workers and bounded waits."""
    from corral.framework.plugins import get_registry

    options: dict = {"n_workers": N_WORKERS, "timeout": 60}
    if name == "local":
        options = {"n_workers": N_WORKERS}
    elif name == "ray":
        if ray_runtime is None:
            pytest.skip("sampler=ray needs Ray: pip install 'corral[ray]'")
        options["start_timeout"] = 120
    elif name in ("action_server", "alternating"):
        options["device"] = "cpu"
    cls = get_registry().get("sampler", name).factory
    return cls(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=50, seed=3, **options)


def wrongly_shaped(params: dict) -> dict:
    """The policy's parameters with the first weight matrix one column short."""
    bad = {k: np.array(v, copy=True) for k, v in params.items()}
    key = next(k for k, v in bad.items() if v.ndim == 2)
    bad[key] = bad[key][:, :-1]
    return bad


@pytest.mark.parametrize("name", SAMPLERS)
def test_wrongly_shaped_parameters_raise_the_same_worker_error(name: str, policy, ray_runtime) -> None:
    sampler = make_sampler(name, policy, ray_runtime)
    try:
        params = policy.get_param_values()
        assert len(sampler.obtain_samples(0, 100, params)) >= 100
        steps = sampler.total_env_steps
        with pytest.raises(WorkerError) as info:
            sampler.obtain_samples(1, 100, wrongly_shaped(params))
        error = info.value
        text = str(error).splitlines()[0]
        assert text.startswith(f"{name} sampler: "), text
        assert "could not apply the agent update: RuntimeError" in text and "size mismatch" in text, text
        assert "nothing was sampled with it" in text and "same names and shapes" in text, text
        # The worker that failed is named (the action server applies parameters to its own policy).
        if name in ("action_server", "alternating"):
            assert error.worker_number is None and "the server's policy" in text
        else:
            assert error.worker_number in range(N_WORKERS) and f"worker {error.worker_number}" in text
        assert "size mismatch" in (error.remote_traceback or ""), "the original traceback travels with the error"
        assert sampler.total_env_steps == steps, "no step of the failed round was counted"
    finally:
        sampler.shutdown_worker()


@pytest.mark.parametrize("name", SAMPLERS)
def test_failing_environment_update_raises_the_same_worker_error(name: str, policy, ray_runtime) -> None:
    sampler = make_sampler(name, policy, ray_runtime)
    try:
        params = policy.get_param_values()
        # A task setter the environment does not have (picklable, importable by every worker).
        bad_task = operator.methodcaller("set_task_that_does_not_exist", 3)
        with pytest.raises(WorkerError) as info:
            sampler.obtain_samples(0, 100, params, env_update=bad_task)
        text = str(info.value).splitlines()[0]
        assert text.startswith(f"{name} sampler: worker "), text
        assert "could not apply the environment update: AttributeError" in text, text
        assert "set_task_that_does_not_exist" in text and "nothing was sampled with it" in text, text
        # what raised: the callable applied to the environment (it said "an update must be a callable ...")
        assert text.endswith("(making the environment, or applying the update to it, raised it: check the "
                             "environment, env.kwargs and the update)"), text
        assert sampler.total_env_steps == 0
    finally:
        sampler.shutdown_worker()


@pytest.mark.parametrize("name", SAMPLERS)
def test_a_setting_the_worker_cannot_run_is_one_line_on_every_sampler(name: str, policy, ray_runtime) -> None:
    """A ConfigError inside a worker (here an environment given a keyword it does not take) already says
    what to change: every sampler reports it as one line, without the worker's traceback."""
    sampler = make_sampler(name, policy, ray_runtime)
    try:
        with pytest.raises(WorkerError) as info:
            sampler.obtain_samples(0, 100, policy.get_param_values(),
                                   env_update=EnvFactory("CartPole-v1", kwargs={"no_such_setting": 1}))
        error = info.value
        assert "\n" not in str(error) and error.remote_traceback is None, str(error)
        assert str(error).startswith(f"{name} sampler: worker {error.worker_number} could not apply the "
                                     "environment update: environment EnvFactory('CartPole-v1', "
                                     "kwargs={'no_such_setting': 1}) does not take the keyword argument "
                                     "'no_such_setting': CartPoleEnv takes "), str(error)
        assert str(error).endswith("; check env.kwargs"), str(error)
        assert sampler.total_env_steps == 0
    finally:
        sampler.shutdown_worker()


def test_ray_keeps_only_what_a_restart_needs(policy, ray_runtime) -> None:
    """Over 200 environment and agent updates the Ray sampler keeps at most two of each per worker
    (the latest environment and callable, the latest Policy and parameters), and a restarted actor
    given them samples exactly what a fresh worker given only those samples."""
    if ray_runtime is None:
        pytest.skip("needs Ray")
    import copy

    from corral import RaySampler
    from corral.testing.contracts import perturbed

    env = EnvFactory("CartPole-v1")
    params = policy.get_param_values()
    with RaySampler(agents=policy, envs=env, max_episode_length=30, n_workers=2, seed=5, timeout=60) as sampler:
        for itr in range(200):
            update = env if itr % 50 == 0 else operator.methodcaller("reset", seed=itr)
            sampler.obtain_exact_episodes(1, perturbed(params, seed=itr), env_update=update)
            assert all(len(s) <= 2 for s in sampler._env_state + sampler._agent_state), itr
        assert not hasattr(sampler, "_env_history")
        sampler._restart(1, WorkerError("a test restart", worker_number=1))
        got = sampler.obtain_exact_episodes(2, None).split()[2:]
        factory = sampler.worker_factory
    alone = factory(1, restart=1)
    try:
        alone.update_env(env)
        alone.update_env(operator.methodcaller("reset", seed=199))
        alone.update_agent(copy.deepcopy(policy))
        alone.update_agent(perturbed(params, seed=199))
        want = alone.rollout(n_episodes=2)
    finally:
        alone.shutdown()
    from corral.framework.batch import EpisodeBatch

    assert EpisodeBatch.concatenate(*got).differences(want) == []


@pytest.mark.parametrize("name", ["multiprocessing", "ray"])
def test_a_failed_update_is_not_restarted_away(name: str, policy, ray_runtime) -> None:
    """With on_worker_failure=restart a failed update still raises at once: a restarted worker would
    be given the same update and fail again."""
    from corral.framework.plugins import get_registry

    if name == "ray" and ray_runtime is None:
        pytest.skip("needs Ray")
    cls = get_registry().get("sampler", name).factory
    sampler = cls(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=50, seed=3, n_workers=N_WORKERS,
                  timeout=60, on_worker_failure="restart", max_restarts=3)
    try:
        with pytest.raises(WorkerError, match="could not apply the agent update"):
            sampler.obtain_samples(0, 100, wrongly_shaped(policy.get_param_values()))
        assert sampler.n_restarts == 0
    finally:
        sampler.shutdown_worker()
