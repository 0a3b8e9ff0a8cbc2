"""corral: a reinforcement-learning experiment framework where every part is a plugin.

The public API is re-exported here; heavy modules load on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from corral.framework.hookspecs import hookimpl

__version__ = "0.1.0"

_EXPORTS = {
    # framework
    "StepType": "corral.framework.batch",
    "EpisodeBatch": "corral.framework.batch",
    "EnvSpec": "corral.framework.env",
    "EnvFactory": "corral.framework.env",
    "Policy": "corral.framework.policy",
    "Worker": "corral.framework.worker",
    "WorkerFactory": "corral.framework.worker",
    "Sampler": "corral.framework.sampler",
    "Algorithm": "corral.framework.algorithm",
    "Trainer": "corral.framework.trainer",
    "TrainerConfig": "corral.framework.trainer",
    "Logger": "corral.framework.logger",
    "build": "corral.framework.compose",
    "check": "corral.framework.checks",
    "checked": "corral.framework.checks",
    "Check": "corral.framework.checks",
    "OptionsWith": "corral.framework.checks",
    "CorralError": "corral.framework.errors",
    "PluginError": "corral.framework.errors",
    "ConfigError": "corral.framework.errors",
    "BatchError": "corral.framework.errors",
    "WorkerError": "corral.framework.errors",
    "SnapshotError": "corral.framework.errors",
    "OutputError": "corral.framework.errors",
    "EnvironmentValueError": "corral.framework.errors",
    "TrainingDivergedError": "corral.framework.errors",
    # built-in components, for library use
    "LocalSampler": "corral.plugins.samplers.local",
    "MultiprocessingSampler": "corral.plugins.samplers.multiprocessing",
    "RaySampler": "corral.plugins.samplers.ray",
    "ActionServerSampler": "corral.plugins.samplers.action_server",
    "AlternatingSampler": "corral.plugins.samplers.alternating",
    "DefaultWorker": "corral.plugins.workers.default",
    "VecWorker": "corral.plugins.workers.vec",
    "VectorWorker": "corral.plugins.workers.vector",
    "FragmentWorker": "corral.plugins.workers.fragment",
    "MLPPolicy": "corral.plugins.policies.mlp",
    "GRUPolicy": "corral.plugins.policies.gru",
    "RL2Worker": "corral.plugins.workers.rl2",
    "RL2PPO": "corral.plugins.algos.rl2",
    "RL2PPOConfig": "corral.plugins.algos.rl2",
    "PEARLWorker": "corral.plugins.workers.pearl",
    "PEARLPolicy": "corral.plugins.policies.pearl",
    "PEARL": "corral.plugins.algos.pearl",
    "PEARLConfig": "corral.plugins.algos.pearl",
    "PPO": "corral.plugins.algos.ppo",
    "PPOConfig": "corral.plugins.algos.ppo",
    "VPG": "corral.plugins.algos.vpg",
    "VPGConfig": "corral.plugins.algos.vpg",
    "TRPO": "corral.plugins.algos.trpo",
    "TRPOConfig": "corral.plugins.algos.trpo",
    "SAC": "corral.plugins.algos.sac",
    "SACConfig": "corral.plugins.algos.sac",
    "DQN": "corral.plugins.algos.dqn",
    "DQNConfig": "corral.plugins.algos.dqn",
    "TanhGaussianPolicy": "corral.plugins.policies.tanh_gaussian",
    "QNetworkPolicy": "corral.plugins.policies.qnet",
    "ReplayBuffer": "corral.rl.replay_buffer",
}

__all__ = ["hookimpl", "__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'corral' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
