"""Contract test suites: what every sampler, worker and algorithm must do, as reusable pytest classes.

A plugin author subclasses a suite in a ``test_*.py`` file, sets a few class attributes (or
overrides a factory method), and pytest runs every check against the component::

    from corral.testing import AlgorithmContract, SamplerContract, WorkerContract

    class TestMySampler(SamplerContract):
        sampler_class = MySampler
        sampler_options = {"timeout": 60}      # keyword arguments of from_worker_factory

    class TestMyWorker(WorkerContract):
        worker_class = MyWorker                  # or a registered name: "my_worker"
        worker_args = {"n_envs": 2}

    class TestMyAlgorithm(AlgorithmContract):
        algo_name = "my_algo"                    # built from the registry with algo_config
        algo_config = {"learning_rate": 1e-3}

Each suite lives in its own module (:mod:`.sampler`, :mod:`.worker`, :mod:`.algorithm`, :mod:`.env`,
:mod:`.logger`, :mod:`.config`; shared helpers in :mod:`.helpers`); import them from here or from
:mod:`corral.testing`::

    class TestMyEnv(EnvContract):
        env = "my_env"                           # a registered env option, or a factory

    class TestMyLogger(LoggerContract):
        logger = "my_logger"

    class TestMyConfig(ConfigContract):          # the defaults satisfy their declared ranges
        kind, name = "sampler", "my_sampler"

The suites are deliberately small: CartPole-v1, a 2-layer MLP policy, a few hundred steps. The
reference for "same episodes" is :class:`~corral.plugins.samplers.local.LocalSampler`, corral's
simplest sampler; anything that samples differently for the same seed, worker class and number of
workers breaks the contract that lets users switch samplers without changing results.

Every check bounds its waits: samplers get ``sampler_options`` (give them a ``timeout``), and the
leak checks poll for at most ``shutdown_timeout`` seconds.
"""

from __future__ import annotations

from corral.testing.contracts.algorithm import AlgorithmContract
from corral.testing.contracts.config import ConfigContract, config_problems
from corral.testing.contracts.env import EnvContract
from corral.testing.contracts.helpers import (
    DEFAULT_ENV_ID,
    RAISING_ENV_ID,
    acts_differently,
    env_spec_of,
    make_test_policy,
    perturbed,
    tracked,
    tracked_env,
)
from corral.testing.contracts.logger import LoggerContract, sample_stats
from corral.testing.contracts.sampler import SamplerContract
from corral.testing.contracts.worker import WorkerContract
from corral.testing.processes import child_processes, process_alive, shm_entries

__all__ = [
    "DEFAULT_ENV_ID",
    "RAISING_ENV_ID",
    "AlgorithmContract",
    "ConfigContract",
    "EnvContract",
    "LoggerContract",
    "SamplerContract",
    "WorkerContract",
    "acts_differently",
    "child_processes",
    "config_problems",
    "env_spec_of",
    "make_test_policy",
    "perturbed",
    "process_alive",
    "sample_stats",
    "shm_entries",
    "tracked",
    "tracked_env",
]
