"""Every built-in sampler, worker and algorithm passes corral's own contract suites.

These are the suites plugin authors run (``corral.testing.contracts``); running them on the
built-ins keeps the suites honest and the built-ins conforming.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from corral.framework.env import EnvSpec
from corral.framework.errors import WorkerError
from corral.framework.policy import Policy
from corral.testing import AlgorithmContract, SamplerContract, WorkerContract

pytest_plugins = ["pytester"]


# ============================================================================================= samplers
class TestLocalSamplerContract(SamplerContract):
    """``sampler=local``: the reference itself. Its workers run in this process, and an environment's
    exception becomes the WorkerError a worker process's does (the original is its ``__cause__``)."""

    from corral.plugins.samplers.local import LocalSampler as sampler_class

    env_failure_errors = (WorkerError,)


class TestMultiprocessingSamplerContract(SamplerContract):
    """``sampler=multiprocessing``: worker processes, shared memory."""

    from corral.plugins.samplers.multiprocessing import MultiprocessingSampler as sampler_class

    sampler_options = {"timeout": 60.0}


class TestActionServerSamplerContract(SamplerContract):
    """``sampler=action_server``: worker processes with proxy agents, one batched policy here
    (its semaphores are checked for leaks too)."""

    from corral.plugins.samplers.action_server import ActionServerSampler as sampler_class

    sampler_options = {"timeout": 60.0, "device": "cpu"}
    worker_cases = (("default", {}), ("vec", {"n_envs": 2}), ("fragment", {"n_envs": 2, "timesteps_per_call": 30}))


class TestAlternatingSamplerContract(SamplerContract):
    """``sampler=alternating``: the action server with two groups of workers."""

    from corral.plugins.samplers.alternating import AlternatingSampler as sampler_class

    sampler_options = {"timeout": 60.0, "device": "cpu"}


@pytest.fixture(scope="module")
def ray_runtime() -> Iterator[None]:
    """One Ray runtime for this module, started here so the samplers join it (and must not stop it)."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.mark.usefixtures("ray_runtime")
class TestRaySamplerContract(SamplerContract):
    """``sampler=ray``: one actor per worker on the module's Ray runtime (half a CPU each, so two
    samplers fit on the 2-CPU runtime at once)."""

    from corral.plugins.samplers.ray import RaySampler as sampler_class

    sampler_options = {"num_cpus": 0.5, "timeout": 60.0, "start_timeout": 60.0}

    def worker_pids(self, sampler):  # type: ignore[no-untyped-def]
        """The actors' process ids (children of the raylet, not of this process)."""
        return [pid for pid, _ in getattr(sampler, "locations", [])]

    def test_the_ray_runtime_is_not_shut_down(self) -> None:
        """A Ray runtime the sampler did not start survives the sampler."""
        import ray

        self.test_shutdown_is_idempotent_and_a_closed_sampler_refuses_work()
        assert ray.is_initialized()


# ============================================================================================== workers
# The trial workers run the suite next to their own tests, with the task environments and agents
# they need: TestRL2WorkerContract in tests/plugins/workers/test_rl2.py, TestPearlWorkerContract in
# tests/plugins/workers/test_pearl_worker.py.
class TestDefaultWorkerContract(WorkerContract):
    """``worker=default``."""

    worker_class = "default"


class TestVecWorkerContract(WorkerContract):
    """``worker=vec`` with three environments."""

    worker_class = "vec"
    worker_args = {"n_envs": 3}


class TestFragmentWorkerContract(WorkerContract):
    """``worker=fragment``: fixed-size fragments."""

    worker_class = "fragment"
    worker_args = {"n_envs": 2, "timesteps_per_call": 16}


# =========================================================================================== algorithms
class TestPPOContract(AlgorithmContract):
    """``algo=ppo`` (two passes over each batch, to stay quick)."""

    algo_name = "ppo"
    algo_config = {"n_epochs": 2}


class TestVPGContract(AlgorithmContract):
    """``algo=vpg``."""

    algo_name = "vpg"
    algo_config = {"vf_iters": 5}


class TestTRPOContract(AlgorithmContract):
    """``algo=trpo`` (two value-function passes, to stay quick)."""

    algo_name = "trpo"
    algo_config = {"vf_epochs": 2}


def registered_policy(name: str, env_spec: EnvSpec, seed: int, **config: object) -> Policy:
    """A registered policy option built with ``config``, its weights depending only on ``seed``."""
    import torch

    from corral.framework.config import config_of
    from corral.framework.plugins import get_registry

    reg = get_registry().get("policy", name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return reg.factory(config_of(reg, dict(config)), env_spec=env_spec)


class TestSACContract(AlgorithmContract):
    """``algo=sac`` on Pendulum with ``policy=tanh_gaussian``, fed fragments (few, small gradient steps)."""

    algo_name = "sac"
    algo_config = {"min_buffer_size": 50, "gradient_steps": 5, "batch_size": 32, "qf_hidden_sizes": [32, 32]}
    env_id = "Pendulum-v1"
    worker = "fragment"

    def make_policy(self, env_spec: EnvSpec, seed: int = 0) -> Policy:
        """A small tanh-Gaussian policy."""
        return registered_policy("tanh_gaussian", env_spec, seed, hidden_sizes=[32, 32])


class TestDQNContract(AlgorithmContract):
    """``algo=dqn`` on CartPole with ``policy=qnet`` (dueling head; few gradient steps)."""

    algo_name = "dqn"
    algo_config = {"min_buffer_size": 50, "gradient_steps": 5, "batch_size": 32}

    def make_policy(self, env_spec: EnvSpec, seed: int = 0) -> Policy:
        """A small dueling Q-network."""
        return registered_policy("qnet", env_spec, seed, hidden_sizes=[32, 32], dueling=True)


# ================================================================== the suites catch broken components
BROKEN = '''
import subprocess, sys, os
import numpy as np
from corral import LocalSampler, DefaultWorker, VPG
from corral.framework.batch import EpisodeBatch
from corral.framework.errors import WorkerError
from corral.testing import AlgorithmContract, SamplerContract, WorkerContract
from corral.testing.faulty_envs import EnvironmentFailure


class ReversedSampler(LocalSampler):
    """Returns the workers' episodes in reverse worker order."""

    def obtain_exact_episodes(self, n, agent_update, env_update=None):
        self._update(agent_update, env_update)
        return EpisodeBatch.concatenate(*[w.rollout(n_episodes=n) for w in reversed(self._workers)])


class StaleSampler(LocalSampler):
    """Ignores agent updates: keeps sampling with the agent it was built with."""

    def _update(self, agent_update, env_update):
        super()._update(None if hasattr(self, "_had_agent") else agent_update, env_update)
        self._had_agent = True


class SwallowingSampler(LocalSampler):
    """Ignores a failed update and samples with the agent it had (the fire-and-forget bug)."""

    def _update(self, agent_update, env_update):
        try:
            super()._update(agent_update, env_update)
        except WorkerError:
            pass


class LeakySampler(LocalSampler):
    """Starts a helper process and never stops it."""

    def __init__(self, agents, envs, **kwargs):
        super().__init__(agents, envs, **kwargs)
        self.helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        with open(os.environ["LEAK_PID_FILE"], "a") as f:
            f.write(f"{self.helper.pid}\\n")


class GlobalNoiseWorker(DefaultWorker):
    """Adds observation noise from numpy's global RNG (the classic reproducibility bug)."""

    def rollout(self, *, min_steps=None, n_episodes=None):
        batch = super().rollout(min_steps=min_steps, n_episodes=n_episodes)
        noisy = batch.observations + np.random.normal(0, 0.1, batch.observations.shape).astype(np.float32)
        return EpisodeBatch(noisy, batch.actions, batch.rewards, batch.step_types, batch.lengths,
                            batch.last_observations, agent_infos=batch.agent_infos)


class ForgetfulVPG(VPG):
    """Snapshots the networks but not the optimiser state."""

    def state_dict(self):
        return {"policy": {k: v.clone() for k, v in self.policy.state_dict().items()},
                "value_function": {k: v.clone() for k, v in self.value_function.state_dict().items()}}

    def load_state_dict(self, state):
        self.policy.load_state_dict(state["policy"])
        self.value_function.load_state_dict(state["value_function"])


class TestReversed(SamplerContract):
    sampler_class = ReversedSampler
    env_failure_errors = (WorkerError, EnvironmentFailure)


class TestStale(SamplerContract):
    sampler_class = StaleSampler
    env_failure_errors = (WorkerError, EnvironmentFailure)


class TestSwallowing(SamplerContract):
    sampler_class = SwallowingSampler


class TestLeaky(SamplerContract):
    sampler_class = LeakySampler
    shutdown_timeout = 0.5


class TestGlobalNoise(WorkerContract):
    worker_class = GlobalNoiseWorker


class TestForgetful(AlgorithmContract):
    def make_algorithm(self, env_spec, policy, seed):
        return ForgetfulVPG(env_spec, policy, seed=seed, vf_iters=2)
'''


def test_the_suites_fail_broken_components(pytester: pytest.Pytester, tmp_path) -> None:
    """Each deliberately broken component fails exactly the checks that describe its bug."""
    import signal

    pid_file = tmp_path / "leaked.pids"
    pytester.makepyfile(test_broken=BROKEN)
    os.environ["LEAK_PID_FILE"] = str(pid_file)
    try:
        result = pytester.runpytest_inprocess(
            "-p", "no:cacheprovider", "-q", "-k",
            "(Reversed and exact) or (Stale and agent_updates) or (Leaky and nothing_left) or GlobalNoise "
            "or Forgetful or (Swallowing and (failed_agent_update or obtain_samples_matches))",
        )
    finally:
        os.environ.pop("LEAK_PID_FILE", None)
        for pid in pid_file.read_text().split() if pid_file.exists() else []:
            try:
                os.kill(int(pid), signal.SIGKILL)
                os.waitpid(int(pid), 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    failed = {r.nodeid.split("::", 1)[1] for r in result.reprec.getreports("pytest_runtest_logreport")
              if r.failed}
    assert {
        "TestReversed::test_obtain_exact_episodes_in_worker_order[default]",
        "TestReversed::test_obtain_exact_episodes_in_worker_order[vec]",
        "TestStale::test_agent_updates_apply_to_every_worker_before_sampling",
        "TestLeaky::test_nothing_left_running_after_shutdown",
        "TestGlobalNoise::test_same_seed_same_episodes_other_seed_different",
        "TestGlobalNoise::test_state_dict_round_trip",
        "TestForgetful::test_state_dict_round_trip_trains_identically",
        "TestSwallowing::test_a_failed_agent_update_is_a_worker_error",
    } <= failed, result.stdout.str()[-5000:]
    text = result.stdout.str()
    assert "are not worker 1's: results must come in worker order" in text or "are not worker 0's" in text
    assert "some worker sampled (part of) it with the old agent" in text
    assert "still running" in text
    assert "two workers with the same seed returned different episodes" in text
    # The well-behaved checks of the same components still pass.
    assert "TestGlobalNoise::test_shutdown_closes_environments" not in failed
    assert "TestForgetful::test_train_once_changes_the_policy" not in failed
    assert "instead of raising a WorkerError: the update failed and was ignored" in text
    assert "TestSwallowing::test_obtain_samples_matches_local_sampler[default]" not in failed
