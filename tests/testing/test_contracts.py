"""Every built-in sampler, worker and algorithm passes corral's own contract suites.

These are the suites plugin authors run (``corral.testing.contracts``); running them on the
built-ins keeps the suites honest and the built-ins conforming.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from corral.framework.errors import WorkerError
from corral.testing import AlgorithmContract, SamplerContract, WorkerContract
from corral.testing.faulty_envs import EnvironmentFailure


# ============================================================================================= samplers
class TestLocalSamplerContract(SamplerContract):
    """``sampler=local``: the reference itself (its workers run in this process, so an environment's
    exception reaches the caller as it is)."""

    from corral.plugins.samplers.local import LocalSampler as sampler_class

    env_failure_errors = (WorkerError, EnvironmentFailure)


class TestMultiprocessingSamplerContract(SamplerContract):
    """``sampler=multiprocessing``: worker processes, shared memory."""

    from corral.plugins.samplers.multiprocessing import MultiprocessingSampler as sampler_class

    sampler_options = {"timeout": 60.0}


@pytest.fixture(scope="module")
def ray_runtime() -> Iterator[None]:
    """One Ray runtime for this module, started here so the samplers join it (and must not stop it)."""
    ray = pytest.importorskip("ray")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
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
