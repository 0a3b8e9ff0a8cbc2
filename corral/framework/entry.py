"""The Hydra entry point behind ``python train.py`` and ``corral train``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from corral.framework.config import CONFIG_NAME, register_configs
from corral.framework.errors import CorralError
from corral.framework.plugins import get_plugin_manager


def prepare(argv: Sequence[str]) -> list[str]:
    """Load plugins, store their configs and search path in Hydra; return the overrides ``argv``.

    The plugins' YAML directories reach Hydra through a search-path plugin, not through an extra
    command-line override, so ``argv`` comes back unchanged.
    """
    register_configs(get_plugin_manager())
    return list(argv)


def main(argv: Sequence[str] | None = None) -> Any:
    """Run ``train.py``: compose the config from ``argv`` (default ``sys.argv[1:]``) and train."""
    try:
        args = prepare(sys.argv[1:] if argv is None else argv)
    except CorralError as exc:  # e.g. a plugin failed with CORRAL_STRICT_PLUGINS=1
        print(f"corral: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    sys.argv = [sys.argv[0]] + args
    return _hydra_main()


@hydra.main(version_base="1.3", config_path="pkg://corral.conf", config_name=CONFIG_NAME)
def _hydra_main(cfg: DictConfig) -> float | None:
    from corral.framework.trainer import TrainingInterrupted

    try:
        return run(cfg, log_dir=HydraConfig.get().runtime.output_dir)
    except CorralError as exc:
        # A clear one-paragraph message instead of a traceback from deep inside a library.
        print(f"corral: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    except TrainingInterrupted:
        raise SystemExit(130) from None


def resolve_resume(cfg: DictConfig) -> DictConfig:
    """With ``trainer.resume=<dir>``, continue with the config the run was started with.

    Only ``trainer.*`` settings given explicitly on the new command line (``trainer.n_epochs=200``,
    ``trainer.max_env_steps=...``) replace the original ones.
    """
    from corral.framework.trainer import find_snapshot

    resume = cfg.trainer.get("resume")
    if not resume:
        return cfg
    import torch

    state = torch.load(find_snapshot(resume), map_location="cpu", weights_only=False)
    if not state.get("config"):
        return cfg
    old = OmegaConf.create(state["config"])
    with open_dict(old):
        old.trainer.resume = str(resume)
        for key in _explicit_trainer_overrides():
            OmegaConf.update(old, key, OmegaConf.select(cfg, key), force_add=True)
    return old


def _explicit_trainer_overrides() -> list[str]:
    """``trainer.*`` keys set on the command line of this job."""
    try:
        overrides = HydraConfig.get().overrides.task
    except ValueError:  # not running under Hydra
        return []
    keys = []
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+~")
        if key.startswith("trainer.") and key != "trainer.resume":
            keys.append(key)
    return keys


def run(cfg: DictConfig, log_dir: str | Path | None = None) -> float | None:
    """Build and train one run; write ``summary.json``; return the final evaluation return."""
    import time

    from corral.framework.compose import build

    cfg = resolve_resume(cfg)
    t0 = time.perf_counter()
    built = build(cfg, log_dir=log_dir)
    try:
        stats = built.train()
    finally:
        built.close()
    trainer = built.trainer
    objective = stats.get("eval/return_mean", stats.get("train/return_mean"))
    if log_dir is not None:
        summary = {
            "final_eval_return": stats.get("eval/return_mean"),
            "best_eval_return": trainer.best_eval_return,
            "final_train_return": stats.get("train/return_mean"),
            "env_steps": trainer.total_env_steps,
            "epochs": trainer.epoch,
            "wall_time_s": time.perf_counter() - t0,
            "train_time_s": trainer.elapsed,
            "config": OmegaConf.to_container(cfg, resolve=True),
        }
        Path(log_dir, "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return objective
