"""cfg -> objects: environment, policy, WorkerFactory, sampler, algorithm, loggers, trainer."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Iterator

from omegaconf import DictConfig, OmegaConf

from corral.framework.algorithm import Algorithm
from corral.framework.checks import composed_ignored, composed_problems
from corral.framework.config import CorralConfig, config_of
from corral.framework.env import EnvFactory, EnvSpec, limit_above_time_limit, make_env
from corral.framework.errors import ConfigError, CorralError, CorralWarning, WorkerError, raised_within
from corral.framework.logger import Logger
from corral.framework.plugins import PluginManager, call_hook, component_error, get_plugin_manager
from corral.framework.policy import Policy
from corral.framework.registry import KINDS, Registration
from corral.framework.sampler import Sampler
from corral.framework.trainer import apply_torch_threads
from corral.framework.worker import WorkerFactory, exception_summary


@dataclass
class Run:
    """Every object of one composed run."""

    cfg: DictConfig
    env: Any
    env_spec: EnvSpec
    policy: Policy
    worker_factory: WorkerFactory
    sampler: Sampler
    algo: Algorithm
    loggers: list[Logger]
    trainer: Any

    def train(self) -> dict[str, float]:
        """Train with the trainer's configured epochs and batch size."""
        return self.trainer.train()

    def close(self, *, quiet: bool = False) -> None:
        """Shut the sampler down and close the loggers (idempotent; see :meth:`Trainer.shutdown` for
        ``quiet``)."""
        self.trainer.shutdown(quiet=quiet)


def env_source(env_cfg: Any, registry: Any = None) -> Any:
    """The environment source (an EnvFactory, a callable, an Env) that the env option ``env_cfg``
    (its ``name`` and fields) makes; no environment is made yet. ``registry``: the plugin
    manager's (default: the global one)."""
    registration = (registry or get_plugin_manager().registry).get("env", env_cfg.name)
    with building(registration):
        return registration.factory(config_of(registration, env_cfg))


@contextlib.contextmanager
def building(registration: Registration, manager: PluginManager | None = None) -> Iterator[None]:
    """Build the option ``registration`` (its config dataclass, its factory, a method that finishes
    it) in the block: an exception of its own (not a corral error, whose message says what to
    change) is one :class:`~corral.framework.errors.ComponentError` line naming the option, the
    plugin that registered it and where it raised (:func:`~corral.framework.plugins.component_error`)."""
    try:
        yield
    except CorralError:
        raise
    except Exception as exc:  # noqa: BLE001 - a component's own failure, named
        raise component_error(registration, exc, manager) from exc


def validate(cfg: DictConfig, manager: PluginManager | None = None) -> None:
    """Check that every chosen option exists, that every key is a field of its option and every
    value is inside its field's declared range (:mod:`corral.framework.checks`), and that the
    choices fit together (the ``corral_validate_config`` hook). Nothing is built before this."""
    manager = manager or get_plugin_manager()
    check_values(cfg, manager)
    call_hook(manager.hook.corral_validate_config, cfg=cfg)


def check_values(cfg: DictConfig, manager: PluginManager | None = None) -> None:
    """The cheap part of :func:`validate`: every chosen option exists, every key is a field of its
    option, every value is inside its declared range. Builds nothing and runs no plugin hook."""
    manager = manager or get_plugin_manager()
    for kind in ("trainer", "env", "algo", "policy", "sampler", "worker"):
        node = cfg.get(kind)
        if not isinstance(node, DictConfig) or "name" not in node:
            raise ConfigError(f"config group '{kind}' is missing; choose one with {kind}=<option> (see `corral plugins`)")
        manager.registry.get(kind, node.name)
    for name in (cfg.get("logger") or {}):
        manager.registry.get("logger", name)
    problems = composed_problems(cfg, manager.registry, CorralConfig, KINDS)
    if problems:
        raise ConfigError("\ncorral: error: ".join(problems))


def warn_ignored(cfg: DictConfig, given: Collection[str], manager: PluginManager | None = None) -> list[str]:
    """Print one ``corral: warning: ...`` line to stderr for each value among ``given`` (the dotted
    keys a command line set) that its option would ignore (a field's ``applies_if``); return the lines."""
    manager = manager or get_plugin_manager()
    lines = [f"corral: warning: {m}" for m in composed_ignored(cfg, manager.registry, KINDS, given)]
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    return lines


def probe_env(env: Any, env_cfg: Any) -> Any:
    """One environment of the run, made to read its spaces; an environment that raises while it is
    made (its own bug, or an ``env.kwargs`` value it refuses, ``max_episode_steps=0``) is a
    :class:`~corral.framework.errors.WorkerError` naming ``env=``, with the traceback from where the
    environment's code was entered."""
    try:
        return make_env(env)
    except CorralError:
        raise
    except Exception as exc:  # noqa: BLE001 - the environment's own failure, in one line
        raise _env_error(exc, env_cfg) from exc


def _env_error(exc: BaseException, env_cfg: Any, when: str = "") -> WorkerError:
    """The one line for the environment of the option ``env_cfg`` (``env=<name>``, its ``env.kwargs``)
    that raised ``exc`` while it was made, with the traceback from where the environment's code was
    entered; ``when`` says which making it was (``" again, for the trainer's setup,"``). Raise it
    ``from exc``."""
    import traceback

    kwargs = dict(env_cfg.get("kwargs") or {})
    given = f" with env.kwargs {kwargs}" if kwargs else ""
    return WorkerError(f"env={env_cfg.get('name', '?')}: making the environment{given}{when} raised "
                       f"{exception_summary(exc)}; fix the environment or its settings",
                       remote_traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))


def _raised_making_env(exc: BaseException) -> bool:
    """True when ``exc`` was raised while an environment was being made: its traceback passes through
    :func:`~corral.framework.env.make_env` or an :class:`~corral.framework.env.EnvFactory`'s call, so
    the environment's own code (or gymnasium's, making it) raised it, not the code that asked for it."""
    return raised_within(exc, (make_env.__code__, EnvFactory.__call__.__code__))


@contextlib.contextmanager
def _env_failures_named(env_cfg: Any, when: str = "") -> Iterator[None]:
    """In the block, another part makes the run's environment on its own (the trainer's ``setup``
    makes one to read its spaces): an exception the environment raised while it was made is the
    environment's, one line naming ``env=`` as :func:`probe_env` gives (:func:`_env_error`); anything
    else (the part's own failure, a corral error) goes on as it is."""
    try:
        yield
    except CorralError:
        raise
    except Exception as exc:  # noqa: BLE001 - only the environment's failure is renamed
        if not _raised_making_env(exc):
            raise
        raise _env_error(exc, env_cfg, when) from exc


def build(cfg: DictConfig, *, log_dir: str | Path | None = None, manager: PluginManager | None = None,
          given: Collection[str] | None = None) -> Run:
    """Build every part of a run from a composed config (nothing starts sampling yet).

    A value the run would ignore (a field's ``applies_if`` does not hold) is one
    :class:`~corral.framework.errors.CorralWarning` (a ``corral: warning:`` line on the command line),
    before anything is built, for the dotted keys in ``given`` (``corral eval``'s overrides; ``()``:
    none). None: in a config made in Python (library use), every value that differs from its field's
    default counts as given (a shipped preset holds none that its own choices ignore); in a Hydra job,
    the keys of the job's command line (a user's own ``@hydra.main`` that calls ``build``), except in
    ``train.py``'s jobs, whose pre-run check or sweep job named them already
    (:func:`command_line_warned`, :func:`warn_ignored`)."""
    import torch

    manager = manager or get_plugin_manager()
    validate(cfg, manager)
    if given is None and _in_hydra_job():
        from corral.framework.override_keys import job_given_keys

        given = () if _COMMAND_LINE_WARNED.get() else job_given_keys()
    for message in composed_ignored(cfg, manager.registry, KINDS, given):
        warnings.warn(CorralWarning(message), stacklevel=2)
    reg = manager.registry
    seed = int(cfg.seed)
    if (threads := cfg.trainer.get("torch_threads")) is not None:
        apply_torch_threads(threads)  # before the networks are built: their initial weights depend on it
    torch.manual_seed(seed)

    env = env_source(cfg.env, reg)
    probe = probe_env(env, cfg.env)
    try:
        env_spec = EnvSpec.from_env(probe, cfg.env.get("max_episode_length"))
        if (above := limit_above_time_limit(probe, cfg.env.get("max_episode_length"))) is not None:
            logging.getLogger(__name__).warning(above)
    finally:
        probe.close()

    policy_reg = reg.get("policy", cfg.policy.name)
    with building(policy_reg, manager):
        policy = policy_reg.factory(config_of(policy_reg, cfg.policy), env_spec=env_spec)
    if not isinstance(policy, Policy):  # a duck-typed agent: workers could not seed it or update it
        kind = type(policy)
        raise ConfigError(
            f"policy={cfg.policy.name} ({policy_reg.source}) built a {kind.__module__}.{kind.__qualname__}, which is "
            "not a corral.Policy; its class must subclass corral.Policy (get_actions, reset, get_param_values, "
            "set_param_values) so that workers can seed it and send it parameter updates"
        )
    normalization, norm_reg = _normalization(reg, cfg, env_spec, manager)  # normalize=: None, None when off
    if norm_reg is not None:
        with building(norm_reg, manager):
            agents = normalization.wrap_policy(policy)
    else:
        agents = policy

    worker_reg = reg.get("worker", cfg.worker.name)
    with building(worker_reg, manager):
        worker_cfg = config_of(worker_reg, cfg.worker)
    sampler_reg = reg.get("sampler", cfg.sampler.name)
    with building(sampler_reg, manager):
        sampler_options = _asdict(config_of(sampler_reg, cfg.sampler))
    n_workers = int(sampler_options.pop("n_workers", 1))
    worker_factory = WorkerFactory(
        seed=seed,
        max_episode_length=env_spec.max_episode_length,
        n_workers=n_workers,
        worker_class=worker_reg.factory,
        worker_args=_asdict(worker_cfg),
    )
    with building(sampler_reg, manager):
        sampler = sampler_reg.factory.from_worker_factory(worker_factory, agents=agents, envs=env, **sampler_options)

    try:
        algo_reg = reg.get("algo", cfg.algo.name)
        with building(algo_reg, manager):
            algo = algo_reg.factory(
                config_of(algo_reg, cfg.algo), env_spec=env_spec, policy=policy, sampler=sampler, seed=seed
            )
        if norm_reg is not None:
            with building(norm_reg, manager):
                algo = normalization.wrap_algorithm(algo)
        log_path = Path(log_dir) if log_dir is not None else None
        loggers = []
        for name, node in (cfg.get("logger") or {}).items():
            logger_reg = reg.get("logger", name)
            with building(logger_reg, manager):
                built_logger = logger_reg.factory(config_of(logger_reg, node), log_dir=log_path)
                built_logger.option_name = name
            loggers.append(built_logger)
        trainer_reg = reg.get("trainer", cfg.trainer.name)
        with building(trainer_reg, manager):
            trainer = trainer_reg.factory(
                config_of(trainer_reg, cfg.trainer), snapshot_dir=log_path, loggers=loggers, seed=seed, run_config=cfg
            )
            # setup makes an environment again (its spaces; a recording check): a failure of that is the env's
            with _env_failures_named(cfg.env, " again, for the trainer's setup,"):
                trainer.setup(algo, env)
    except BaseException:
        sampler.shutdown_worker()
        raise
    return Run(cfg, env, env_spec, policy, worker_factory, sampler, algo, loggers, trainer)


#: True in a job of corral's own entry point (``train.py``), whose command line's ignored values were said.
_COMMAND_LINE_WARNED: contextvars.ContextVar[bool] = contextvars.ContextVar("command_line_warned", default=False)


@contextlib.contextmanager
def command_line_warned() -> Iterator[None]:
    """In the block, the Hydra job's command line had its ignored values said already (``train.py``'s
    pre-run check, or :func:`warn_ignored` in a sweep's job), so :func:`build` does not say them again."""
    token = _COMMAND_LINE_WARNED.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE_WARNED.reset(token)


def _in_hydra_job() -> bool:
    """Whether this is a Hydra job (``train.py``'s, or a user's own ``@hydra.main``)."""
    from hydra.core.hydra_config import HydraConfig

    return bool(HydraConfig.initialized())


def _normalization(reg: Any, cfg: DictConfig, env_spec: EnvSpec,
                   manager: PluginManager | None = None) -> tuple[Any, Registration | None]:
    """The run's ``normalize=`` option built (wraps the starting agent and the algorithm) and its
    registration, or ``(None, None)`` when the config has no ``normalize`` node or normalises nothing."""
    node = cfg.get("normalize")
    if not isinstance(node, DictConfig) or "name" not in node:
        return None, None
    norm_reg = reg.get("normalize", node.name)
    with building(norm_reg, manager):
        normalization = norm_reg.factory(config_of(norm_reg, node), env_spec=env_spec)
    return (normalization, norm_reg) if normalization is not None else (None, None)


def _asdict(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    return dict(OmegaConf.to_container(obj, resolve=True))  # type: ignore[arg-type]


__all__ = ["Run", "build", "building", "check_values", "env_source", "probe_env", "validate"]
