"""The Hydra entry point behind ``python train.py`` and ``corral train``."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any, Sequence

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from corral.framework.config import CONFIG_NAME, register_configs
from corral.framework.errors import CorralError
from corral.framework.plugins import get_plugin_manager, warnings_as_lines

# corral/conf/hydra/launcher/joblib.yaml sets corral's defaults for the launcher and so shares the
# name of the joblib plugin's own schema node, which Hydra merges in with a deprecation warning
# (in the sweep's process and again in each job process, which imports this module).
warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/joblib' is validated against ConfigStore schema",
                        category=UserWarning)


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
        with warnings_as_lines():  # a broken or clashing plugin: one `corral: warning: ...` line each
            args = prepare(sys.argv[1:] if argv is None else argv)
    except CorralError as exc:  # e.g. a plugin failed with CORRAL_STRICT_PLUGINS=1
        print(f"corral: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    sys.argv = [sys.argv[0]] + args
    try:
        return _hydra_main()
    except KeyboardInterrupt:  # Ctrl-C outside a trainer, e.g. in a multirun: the launcher has stopped its jobs
        multirun = any(a in ("-m", "--multirun") for a in args)
        note = "; finished jobs keep their summary.json (corral results <sweep dir>)" if multirun else ""
        print(f"\ncorral: interrupted{note}", file=sys.stderr, flush=True)
        raise SystemExit(130) from None


@hydra.main(version_base="1.3", config_path="pkg://corral.conf", config_name=CONFIG_NAME)
def _hydra_main(cfg: DictConfig) -> float | None:
    from corral.framework.trainer import TrainingInterrupted

    try:
        return run(cfg, log_dir=HydraConfig.get().runtime.output_dir)
    except CorralError as exc:
        # A clear one-paragraph message instead of a traceback from deep inside a library.
        print(f"corral: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    except TrainingInterrupted as exc:
        raise SystemExit(exc.exit_code) from None


def snapshot_config(source: str | Path) -> DictConfig | None:
    """The resolved config stored in the snapshot of a run directory or snapshot file (None for a
    snapshot without one). For a resumed run it is the original run's config, not what the
    resuming command composed (which is what the run's ``.hydra/config.yaml`` holds)."""
    import torch

    from corral.framework.trainer import find_snapshot

    state = torch.load(find_snapshot(source), map_location="cpu", weights_only=False)
    return OmegaConf.create(state["config"]) if state.get("config") else None


def resolve_resume(cfg: DictConfig) -> DictConfig:
    """With ``trainer.resume=<dir>``, continue with the config the run was started with.

    Only ``trainer.*`` settings given explicitly on the new command line (``trainer.n_epochs=200``,
    ``trainer.max_env_steps=...``) replace the original ones.
    """
    resume = cfg.trainer.get("resume")
    if not resume:
        return cfg
    old = snapshot_config(resume)
    if old is None:
        return cfg
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
    """Build and train one run; write ``summary.json``; return the final evaluation return.

    The final evaluation return is that of the last epoch; when the last epoch had no evaluation
    (``trainer.eval_every`` does not divide it) one more evaluation runs after training, so sweeps
    (Optuna's objective) always compare evaluation returns. Without evaluation
    (``trainer.eval_every=0``) the final training return is returned instead. The summary is
    written whether the run completes, is interrupted or fails (``status`` says which).
    """
    import time

    from corral.framework.compose import build

    cfg = resolve_resume(cfg)
    started = time.time()
    t0 = time.perf_counter()
    built = None
    stats: dict[str, float] = {}
    status, error = "failed", None
    try:
        built = build(cfg, log_dir=log_dir)
        try:
            stats = dict(built.train())
            if "eval/return_mean" not in stats and built.trainer.config.eval_every and built.trainer.epoch > 0:
                stats.update(built.trainer.evaluate())
                best = built.trainer.best_eval_return
                final = stats["eval/return_mean"]
                built.trainer.best_eval_return = final if best is None else max(best, final)
        finally:
            built.close()
        status = "completed"
    except BaseException as exc:
        from corral.framework.trainer import TrainingInterrupted

        status = "interrupted" if isinstance(exc, (TrainingInterrupted, KeyboardInterrupt)) else "failed"
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        if log_dir is not None and (built is not None or status != "failed"):
            _write_summary(cfg, log_dir, built, stats, status, started, time.perf_counter() - t0, error)
    objective = stats.get("eval/return_mean", stats.get("train/return_mean"))
    return objective


def _write_summary(cfg: DictConfig, log_dir: str | Path, built: Any, stats: dict[str, float], status: str,
                   started: float, wall_time: float, error: str | None = None) -> None:
    """Write the run's ``summary.json`` (see :mod:`corral.results.summary`)."""
    import datetime as dt
    import os
    import socket
    import time

    from corral.results.summary import write_summary

    trainer = built.trainer if built is not None else None
    overrides, job = [], {}
    try:
        hydra_cfg = HydraConfig.get()
        overrides = [str(o) for o in hydra_cfg.overrides.task]
        job = {"name": hydra_cfg.job.name, "num": hydra_cfg.job.get("num"), "id": hydra_cfg.job.get("id"),
               "mode": str(hydra_cfg.mode).rsplit(".", 1)[-1]}
    except ValueError:  # not running under Hydra (library use)
        pass
    finished = time.time()
    summary = {
        "status": status,
        "error": error,
        "final_eval_return": stats.get("eval/return_mean"),
        "best_eval_return": trainer.best_eval_return if trainer is not None else None,
        "final_train_return": stats.get("train/return_mean"),
        "env_steps": trainer.total_env_steps if trainer is not None else 0,
        "epochs": trainer.epoch if trainer is not None else 0,
        "wall_time_s": wall_time,
        "train_time_s": trainer.elapsed if trainer is not None else 0.0,
        "started_at": started,
        "finished_at": finished,
        "started_utc": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(timespec="seconds"),
        "finished_utc": dt.datetime.fromtimestamp(finished, dt.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "overrides": overrides,
        "job": job,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    write_summary(log_dir, summary)
