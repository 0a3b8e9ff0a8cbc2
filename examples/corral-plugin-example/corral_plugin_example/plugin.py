"""The hook module: what the ``corral`` entry point in ``pyproject.toml`` names.

corral imports this module at start-up (after its built-ins) and calls the hooks below. Keep it
cheap to import: it runs for every ``python train.py`` and ``corral plugins``, whatever the user
chose. A failure here costs the user only this plugin (a warning naming the distribution), never
the run.
"""

from __future__ import annotations

from typing import Any, Callable

from corral import hookimpl
from corral.framework.errors import ConfigError
from corral_plugin_example.goal_chain import GoalChainConfig, build_goal_chain
from corral_plugin_example.jsonl import JSONLinesLoggerConfig, build_jsonl_logger
from corral_plugin_example.noisy_obs import NoisyObsConfig, NoisyObsWorker
from corral_plugin_example.reinforce import ReinforceConfig, build_reinforce


@hookimpl
def corral_register(register: Callable[..., None]) -> None:
    """Register ``worker=noisy_obs``, ``env=goal_chain``, ``logger=jsonl`` and ``algo=reinforce``."""
    register("worker", "noisy_obs", NoisyObsWorker, config=NoisyObsConfig,
             help="worker=vec with Gaussian observation noise from each env's own seed stream")
    register("env", "goal_chain", build_goal_chain, config=GoalChainConfig,
             help="walk a chain of cells to a goal; tasks = goals (sample_tasks / set_task)")
    register("logger", "jsonl", build_jsonl_logger, config=JSONLinesLoggerConfig,
             help="one JSON line per epoch in <run dir>/progress.jsonl")
    register("algo", "reinforce", build_reinforce, config=ReinforceConfig,
             help="REINFORCE with a learned value baseline (policy=mlp)")


@hookimpl
def corral_config_searchpath() -> list[str]:
    """This package's YAML presets: ``experiment=example_quick``."""
    return ["pkg://corral_plugin_example.conf"]


@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """Reject a goal outside the chain before any worker starts (Hydra checks types, not ranges)."""
    env = cfg.get("env")
    if env is None or env.get("name") != "goal_chain":
        return
    goal, n_states = env.get("goal"), env.get("n_states")
    if goal is not None and not 0 <= goal < n_states:
        raise ConfigError(f"env.goal={goal} is outside the chain: with env.n_states={n_states} choose 0..{n_states - 1}")
