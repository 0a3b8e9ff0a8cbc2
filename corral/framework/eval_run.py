"""``corral eval <run dir | snapshot> [overrides...]`` and its Python twin :func:`evaluate_run`.

The run is rebuilt from its snapshot's own config (plus ``key=value`` overrides), the snapshot's
weights are loaded through the trainer, and episodes are collected as training's evaluation
collects them (:mod:`corral.framework.evaluation`): the run's workers, episode limit, wrappers and
action clipping, deterministic actions unless ``--stochastic``, on the evaluation seed branch of
``--seed`` (default: the run's seed, so the defaults repeat the run's own evaluation episodes).

    corral eval outputs/2026-01-01/12-00-00 --episodes 20
    corral eval runs/ppo --episodes 5 --video videos/
    corral eval runs/ppo --env-id CartPole-v0 --sampler multiprocessing --n-workers 2
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import logging
import sys
import typing
import warnings
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from corral.framework.arguments import CommandParser
from corral.framework.errors import (
    ConfigError,
    CorralError,
    OutputError,
    SnapshotError,
    error_report,
    warnings_as_lines,
)
from corral.framework.precheck import repeated_key_warnings

if typing.TYPE_CHECKING:
    from corral.framework.evaluation import TrialEvaluation
    from corral.framework.worker import WorkerFactory


@dataclasses.dataclass
class EvalResult:
    """What :func:`evaluate_run` measured (also what ``eval.json`` holds)."""

    run: str
    snapshot: str
    epoch: int
    env_steps: int
    env_id: str | None
    episodes: int
    deterministic: bool
    seed: int
    sampler: str
    n_workers: int
    returns: list[float]
    lengths: list[int]
    videos: list[str]
    #: Which tasks the episodes ran on, for a meta-RL environment (None for any other environment).
    tasks: str | None = None
    #: Trials run, for an agent that runs trials (meta-RL: ``returns`` and ``lengths`` are per trial).
    trials: int | None = None
    #: Environment episodes in each trial.
    episodes_per_trial: int | None = None
    #: The algorithm's meta-evaluation statistics of the trials (the run's ``meta_eval/*`` columns).
    meta_eval: dict[str, float] | None = None

    @property
    def return_mean(self) -> float:
        """Mean undiscounted return."""
        return float(np.mean(self.returns))

    @property
    def return_std(self) -> float:
        """Standard deviation of the return over episodes."""
        return float(np.std(self.returns))

    @property
    def length_mean(self) -> float:
        """Mean episode length."""
        return float(np.mean(self.lengths))

    @property
    def length_std(self) -> float:
        """Standard deviation of the episode length."""
        return float(np.std(self.lengths))

    def to_json(self) -> dict[str, Any]:
        """The ``eval.json`` document."""
        out = dataclasses.asdict(self)
        out.update(return_mean=self.return_mean, return_std=self.return_std, length_mean=self.length_mean,
                   length_std=self.length_std)
        return out

    def summary(self) -> str:
        """The lines ``corral eval`` prints."""
        mode = "deterministic" if self.deterministic else "stochastic"
        if self.trials is not None:
            ran = (f"{self.trials} {mode} trial{'' if self.trials == 1 else 's'} of {self.episodes_per_trial} "
                   f"episode{'' if self.episodes_per_trial == 1 else 's'}")
            what = "trial return"
        else:
            ran, what = f"{self.episodes} {mode} episode{'' if self.episodes == 1 else 's'}", "return"
        lines = [
            f"corral eval: {self.snapshot} (epoch {self.epoch}, {self.env_steps:,} env steps), "
            f"{ran} on {self.env_id or 'the run env'}, seed {self.seed}",
            f"{what} {self.return_mean:.2f} ± {self.return_std:.2f}   "
            f"length {self.length_mean:.1f} ± {self.length_std:.1f}",
        ]
        if self.meta_eval:
            lines.append("meta_eval: " + "  ".join(f"{k.partition('/')[2]} {v:.4g}" for k, v in self.meta_eval.items()))
        if self.tasks:
            lines.append(f"tasks: {self.tasks}")
        if self.videos:
            lines.append(f"{len(self.videos)} video(s) in {Path(self.videos[0]).parent}")
        return "\n".join(lines)


def evaluate_run(
    source: str | Path,
    overrides: Sequence[str] = (),
    *,
    episodes: int | None = None,
    deterministic: bool = True,
    seed: int | None = None,
    video_dir: str | Path | None = None,
    env_id: str | None = None,
    sampler: str = "local",
    n_workers: int = 1,
    trust: bool = False,
    output: str | Path | None = None,
) -> EvalResult:
    """Evaluate a trained run (a run directory, its ``snapshots/`` or one snapshot file).

    ``overrides`` are ``key=value`` changes of the run's ``env.*``, ``worker.*`` or ``seed``
    (``env.max_episode_length=100``; anything else is a ConfigError, see :func:`check_eval_override`);
    with ``env_id``, the ``env.*`` ones are of ``env_id``'s environment (``env.kwargs.k=v``: a keyword
    its constructor takes), and the run is built on its own environment for the policy's spaces;
    ``output`` is where ``eval.json`` goes (default: ``<run dir>/eval.json``; ``""``: nowhere).
    ``trust`` allows a snapshot whose objects part needs unpickling (``trainer.trust_snapshot``,
    see :mod:`corral.framework.snapshot`): only for snapshots you trust.

    ``episodes`` (None: 10) is the number of episodes; for a run whose algorithm runs trials on its
    held-out tasks (``held_out_evaluation``, see :class:`~corral.framework.evaluation.TrialEvaluation`:
    RL2, PEARL) it is the number of trials, cycling through the held-out tasks in the order of the
    run's meta-evaluation, on its seeds (None: the meta-evaluation's own trials, so the defaults
    repeat the run's ``meta_eval/*`` numbers when the action mode is the run's).
    """
    from corral.framework.compose import build
    from corral.framework.config import register_configs
    from corral.framework.evaluation import (
        check_recordable,
        check_video_complete,
        evaluation_episodes,
        evaluation_factory,
        recorded_videos,
        recording_envs,
        require_video,
    )
    from corral.framework.override_keys import given_keys
    from corral.framework.plugins import get_plugin_manager
    from corral.framework.trainer import find_snapshot, runs_inside
    from corral.results.writable import directory_problem, write_atomically

    if episodes is not None and episodes < 1:
        raise ConfigError(f"--episodes must be at least 1, got {episodes}")
    if n_workers < 1:
        raise ConfigError(f"--n-workers must be at least 1, got {n_workers}")
    if seed is not None and seed < 0:
        raise ConfigError(f"--seed must be >= 0 (a seed of numpy's SeedSequence, as the run's seed is), got {seed}")
    if seed is not None and (given := [o for o in overrides if o.partition("=")[0] == "seed"]):
        raise ConfigError(f"{given[-1]} and --seed {seed} both set the evaluation seed; give one of them")
    if video_dir is not None:
        require_video()
        if (problem := directory_problem(video_dir)) is not None:
            raise ConfigError(f"--video {video_dir}: cannot create the directory for the videos: {problem}; give "
                              "a directory you can write to")
        if episodes is not None and episodes % n_workers:
            raise ConfigError(f"--video with --n-workers {n_workers} needs --episodes a multiple of {n_workers} "
                              "(each worker runs the same number, and every recorded episode is counted)")
    if output:
        _check_output(Path(output), str(output))
    if not Path(source).expanduser().exists():
        raise ConfigError(f"{source} does not exist: give corral eval a run directory (the one with snapshots/) or "
                          "a snapshot file")
    try:
        snapshot = find_snapshot(source)
    except SnapshotError:
        raise ConfigError(f"no snapshot found in {source}: give corral eval a run directory (the one with "
                          f"snapshots/) or a snapshot file{runs_inside(Path(source))}") from None
    run_dir = snapshot.parent.parent if snapshot.parent.name == "snapshots" else snapshot.parent
    if output is None:
        _check_output(run_dir / "eval.json")
    register_configs()
    get_plugin_manager().registry.get("sampler", sampler)  # an unknown --sampler: said before anything is built
    cfg, run_env = _run_config(snapshot, run_dir, overrides, trust)
    run_seed = int(cfg.seed)
    built_cfg, other = cfg, None
    if env_id is not None:  # the env.* overrides are of the environment evaluated: --env-id's
        cfg, other = _other_env(cfg, env_id)
        built_cfg = _with_env(cfg, run_env)  # the run as trained: the policy's spaces
    # The overrides' values the run would ignore (a field's applies_if): one warning line each; not the run's own.
    # With --env-id the env.* overrides are of the other environment, not of the run built here.
    run = build(built_cfg, given=given_keys([o for o in overrides if env_id is None or not o.startswith("env.")]))
    try:
        env_overrides = [o for o in overrides if o.startswith("env.")]
        if env_id is None and env_overrides:  # the policy takes the spaces it was trained on
            _check_same_spaces(run_env, run.env_spec, env_overrides)
        try:
            _load_weights(run, snapshot, trust, overrides)
        except SnapshotError:
            if snapshot.exists() or not Path(source).expanduser().is_dir():
                raise
            # A run that is still training removed it (it keeps its last trainer.keep_snapshots): its latest.
            snapshot = find_snapshot(source)
            _load_weights(run, snapshot, trust, overrides)
        env = run.env
        eval_seed = run_seed if seed is None else int(seed)
        trials = _held_out_evaluation(run, cfg, env_id, episodes, deterministic, eval_seed, n_workers,
                                      changed_env=_changed_settings(cfg.env, run_env, "env"))
        if trials is None:
            _check_run_task_known(run_env, overrides, run.worker_factory.worker_class)
            if video_dir is not None and episodes is None and 10 % n_workers:
                raise ConfigError(f"--video with --n-workers {n_workers} needs --episodes a multiple of {n_workers} "
                                  "(each worker runs the same number, and every recorded episode is counted)")
        factory: WorkerFactory = evaluation_factory(run.worker_factory, seed=eval_seed, n_workers=n_workers)
        if trials is not None:  # the meta-evaluation's workers and seeds
            factory = trials.worker_factory
        if env_id is not None:
            env = _compatible_env(other, cfg.env, env_id, run.env_spec)
            factory = dataclasses.replace(factory, max_episode_length=cfg.env.get("max_episode_length"))
        if video_dir is not None:
            check_recordable(env, factory.worker_class, factory.worker_args)
            env = recording_envs(env, video_dir, n_workers, name_prefix="eval")
        if trials is not None:
            batch = trials.run(env, sampler=sampler)
            meta_stats: dict[str, float] | None = trials.statistics(batch)
            returns, lengths = trials.trial_returns(batch)
        else:
            batch = evaluation_episodes(run.algo.eval_policy, env, factory, episodes or 10,
                                        deterministic=deterministic, sampler=sampler)
            meta_stats, returns, lengths = None, batch.episode_returns, batch.lengths
        epoch, env_steps = run.trainer.epoch, run.trainer.total_env_steps
    finally:
        run.close()
    videos = [str(p) for p in recorded_videos(video_dir, "eval")] if video_dir is not None else []
    for video in videos:
        try:
            check_video_complete(video)
        except OSError as exc:  # what a full disk leaves, which the video writer does not notice
            raise OutputError(f"could not write the video {video} ({exc.strerror}); make room there, or evaluate "
                              "without --video") from None
    result = EvalResult(
        run=str(run_dir), snapshot=str(snapshot), epoch=epoch, env_steps=env_steps,
        env_id=env_id or cfg.env.get("id"), episodes=batch.n_episodes if trials is None else trials.n_trials,
        deterministic=deterministic, seed=eval_seed, sampler=sampler, n_workers=n_workers,
        returns=[float(r) for r in returns], lengths=[int(n) for n in lengths], videos=videos,
        tasks=trials.tasks if trials is not None else _tasks_used(factory.worker_class, cfg.env),
        trials=None if trials is None else trials.n_trials,
        episodes_per_trial=None if trials is None else trials.episodes_per_trial, meta_eval=meta_stats,
    )
    if output != "":
        path = Path(output) if output is not None else run_dir / "eval.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(result.to_json(), indent=2) + "\n"
        write_atomically(path, lambda f: f.write(text), text=True)
    return result


def _held_out_evaluation(run: Any, cfg: Any, env_id: str | None, episodes: int | None, deterministic: bool,
                         seed: int, n_workers: int, changed_env: Sequence[str] = ()) -> TrialEvaluation | None:
    """The trials of the run's meta-evaluation, when its algorithm runs trials on held-out tasks (it has
    ``held_out_evaluation``, see :class:`~corral.framework.evaluation.TrialEvaluation`); None for any
    other run. ``episodes`` trials (None: the meta-evaluation's own) in ``deterministic`` mode; an
    option that takes the held-out tasks away is one :class:`ConfigError` line. ``changed_env``: the env
    settings the command line changed (:func:`_changed_settings`): the held-out tasks then run in another
    environment than the run's meta-eval ran them in (its tasks may differ too), and the ``tasks:`` words say so."""
    plan = getattr(run.algo, "held_out_evaluation", None)
    if not callable(plan):
        return None
    algo = f"algo={cfg.algo.name}"
    if env_id is not None:
        raise ConfigError(f"--env-id {env_id}: corral eval of a meta-RL run ({algo}) runs the run's held-out tasks, "
                          "which are tasks of its own environment; evaluate without --env-id")
    trials = plan(run.env, seed=seed, n_trials=episodes, deterministic=deterministic, n_workers=1)
    if trials.n_trials % n_workers:
        raise ConfigError(f"--n-workers {n_workers} with {trials.n_trials} trials: corral eval of a meta-RL run "
                          f"({algo}) gives each worker the same number of trials, so give --episodes a multiple of "
                          f"{n_workers} (the trials; the run's meta-eval runs {plan(run.env, seed=seed).n_trials})")
    if n_workers > 1:
        trials = plan(run.env, seed=seed, n_trials=trials.n_trials, deterministic=deterministic, n_workers=n_workers)
    own = plan(run.env, seed=seed).deterministic
    if own != deterministic:
        flag = "without --stochastic" if own else "with --stochastic"
        mode = "the policy's mode" if own else "sampled actions"
        trials = dataclasses.replace(trials, tasks=f"{trials.tasks}; the run's meta-eval acts with {mode} "
                                     f"(algo.meta_eval_deterministic={str(own).lower()}): run {flag} to repeat it")
    if changed_env:
        trials = dataclasses.replace(trials, tasks=f"{trials.tasks}; run in the environment with "
                                     f"{', '.join(changed_env)}: not the environment of the run's meta-eval, so its "
                                     "meta_eval numbers are not repeated")
    return trials


def _changed_settings(now: Any, run: Any, prefix: str) -> list[str]:
    """``<prefix>.<key>=<value> (the run's: <value>)`` for each setting of the config node ``now`` that differs
    from the run's own node ``run`` (a key the run lacks: ``the run has none``), in key order."""
    from omegaconf import OmegaConf

    def flat(node: Any, at: str) -> dict[str, Any]:
        if not isinstance(node, dict):
            return {at: node}
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(flat(value, f"{at}.{key}"))
        return out

    mine = flat(OmegaConf.to_container(now, resolve=True), prefix)
    theirs = flat(OmegaConf.to_container(run, resolve=True), prefix)
    return [f"{key}={mine[key]} (the run's: {theirs[key]})" if key in theirs else f"{key}={mine[key]} (the run has none)"
            for key in sorted(mine) if key not in theirs or mine[key] != theirs[key]]


def _check_run_task_known(run_env: Any, overrides: Sequence[str], worker_class: Any) -> None:
    """Raise a one-line :class:`ConfigError` for a run of a task environment under an algorithm that sets
    no tasks (algo=ppo ...) whose saved config has no ``env.task_seed``: it was trained before the run
    had one task, when each of its environments drew a task of its own, so evaluating on the run's
    one task would report numbers for a task it did not train on. ``env.task_seed=N`` picks one."""
    from corral.framework.plugins import get_plugin_manager

    if "task_seed" in run_env or getattr(worker_class, "sets_tasks", False):
        return
    if any(o.partition("=")[0] == "env.task_seed" for o in overrides):
        return
    config = get_plugin_manager().registry.get("env", run_env.name).config
    if config is None or not dataclasses.is_dataclass(config):
        return
    if "task_seed" not in {f.name for f in dataclasses.fields(config)}:
        return
    raise ConfigError(f"the run's config has no env.task_seed (env={run_env.name}): it was trained before a run "
                      "had one task, when each of its environments drew a task of its own, which corral eval cannot "
                      "rebuild; give env.task_seed=N to evaluate on the task that seed draws (not one the run "
                      "trained on), or train the run again")


def _tasks_used(worker_class: Any, env_cfg: Any) -> str | None:
    """Which tasks the episodes ran on, in words, for a meta-RL environment (one with ``env.task_seed``;
    None for any other): a trial-running worker's own words for its trials without a task schedule,
    else the run's one task (see docs/meta-rl.md)."""
    if "task_seed" not in env_cfg:
        return None
    if getattr(worker_class, "sets_tasks", False):
        return str(getattr(worker_class, "tasks_without_schedule", "a new task for every trial"))
    return f"the run's one task (env.task_seed={env_cfg.task_seed}), the one its training and evaluation episodes ran"


def _check_output(path: Path, given: str | None = None) -> None:
    """Raise a one-line :class:`ConfigError`, before any episode runs, when ``eval.json`` cannot be
    written at ``path``: ``given`` is the ``-o`` value, or None for the default (the run directory)."""
    from corral.results.writable import directory_problem

    where = f"-o {given}" if given is not None else f"the run directory's {path}"
    instead = ("give the file eval.json is written to (e.g. {})".format(path / "eval.json") if given is not None
               else "give -o <file> elsewhere (or -o '' to write none)")
    if path.is_dir():
        raise ConfigError(f"{where} is a directory; {instead}")
    if (problem := directory_problem(path.absolute().parent)) is not None:
        instead = "give a file in a directory you can write to" if given is not None else instead
        raise ConfigError(f"{where}: cannot write eval.json there: {problem}; {instead}")


#: The settings an evaluation override may change, besides ``seed``: the environment's and the
#: worker's. The policy and the normalisation statistics come from the snapshot, and the
#: algorithm, trainer, sampler and loggers take no part in an evaluation.
EVAL_OVERRIDABLE = ("env.", "worker.")


def _not_a_change(given: str) -> str:
    """Why ``given`` (``+key=value``, ``~key``, a word) is not an override of ``corral eval``, and what to write."""
    if given.startswith("~"):
        return "corral eval changes values of the run's config and deletes none; leave it out"
    if given.startswith("+") and "=" in given:
        return (f"corral eval changes values of the run's config and adds no key with +; write {given.lstrip('+')} "
                "(env.kwargs takes a new key without +)")
    return "an override is key=value, a change of the run's env.*, worker.* or seed"


def check_eval_override(override: str, cfg: Any) -> None:
    """Raise a one-line :class:`ConfigError` for a ``key=value`` that would not change an
    evaluation of the run whose config is ``cfg`` (so it is never accepted and then ignored)."""
    key, _, value = override.partition("=")
    if key == "env.id":
        raise ConfigError(f"{override}: use --env-id {value} to evaluate on another environment id (it checks that "
                          "the policy's observation and action spaces fit it)")
    if key == "seed" or key.startswith(EVAL_OVERRIDABLE):
        return
    if key in ("sampler", "sampler.name", "sampler.n_workers"):
        flag = "--n-workers" if key.endswith("n_workers") else "--sampler"
        raise ConfigError(f"{override}: corral eval takes its sampler from its own options, not the run's: give "
                          f"{flag} {value}")
    current = cfg[key].get("name") if "." not in key and key in cfg and hasattr(cfg[key], "keys") else None
    if current is not None and str(current) == value:
        raise ConfigError(f"{override}: the run was trained with {key}={current} already, and corral eval evaluates "
                          f"with the run's own {key}; leave it out"
                          + (" (worker.* changes its settings)" if key == "worker" else ""))
    if current is not None:
        raise ConfigError(f"{override}: corral eval cannot change the run's {key} option (it was trained with "
                          f"{key}={current}); evaluate with its own, or train a run with {key}={value}")
    raise ConfigError(f"{override} would not change the evaluation: corral eval takes overrides of env.*, worker.* "
                      "and seed only (the policy and normalisation come from the snapshot); --episodes, --stochastic, "
                      "--sampler and --n-workers set the rest")


def check_eval_type(override: str, cfg: Any) -> None:
    """Raise a one-line :class:`ConfigError` when the value ``override`` gave (already merged into the
    run's ``cfg``) does not have its setting's type, as ``train.py``'s composition would
    (``env.max_episode_length=1.5``: an int, not silently truncated). The run's stored config is plain
    YAML, so the type comes from the option's registered config class (``seed``: the primary schema)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from corral.framework.checks import unknown_key_message
    from corral.framework.config import CorralConfig
    from corral.framework.plugins import get_plugin_manager
    from corral.framework.precheck import true_false_message, type_message

    key = override.partition("=")[0]
    kind, _, rest = key.partition(".")
    schema: Any
    if not rest:  # seed
        schema, name, path = CorralConfig, kind, kind
    else:
        name = rest.split(".")[0]
        schema, path = get_plugin_manager().registry.get(kind, cfg[kind].name).config, f"{kind}.{name}"
    if schema is None:
        return
    fields = [f.name for f in dataclasses.fields(schema)]
    if name not in fields:  # train.py's line, without its advice to choose another option (eval keeps the run's)
        raise ConfigError(unknown_key_message(kind, f"{kind}={cfg[kind].name}", name, fields))
    value = OmegaConf.select(cfg, path)
    try:
        OmegaConf.merge(OmegaConf.structured(schema), {name: value})
    except OmegaConfBaseException as exc:
        raise ConfigError(type_message(override, str(exc).splitlines()[0])) from None
    hint = typing.get_type_hints(schema).get(name)
    written = override.partition("=")[2]
    accepted = ("true", "false") if hint is bool else ("true", "false", "null")
    if key == path and hint in (bool, typing.Optional[bool]) and written.strip().lower() not in accepted:
        # OmegaConf would read 2 or yes as true in silence; train.py refuses them too (precheck.check_bool_values)
        raise ConfigError(true_false_message(key, written))


def _run_config(snapshot: Path, run_dir: Path, overrides: Sequence[str], trust: bool) -> tuple[Any, Any]:
    """The run's own config (from its snapshot, else ``.hydra/config.yaml``) with ``overrides``,
    no loggers, no resume, and a local sampler for the build (evaluation brings its own); and the
    run's own ``env`` node, without the overrides (what the policy was trained on)."""
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    from corral.framework.entry import snapshot_config
    from corral.framework.precheck import type_message
    from corral.framework.resume import check_run_options, snapshot_sources

    cfg: Any = snapshot_config(snapshot, trust=trust)
    if cfg is None:
        hydra_cfg = run_dir / ".hydra" / "config.yaml"
        if not hydra_cfg.is_file():
            raise ConfigError(f"{snapshot} holds no config and {hydra_cfg} does not exist, so corral eval cannot rebuild "
                              "the run (corral eval takes runs made by train.py); a run trained from Python is "
                              "evaluated where it was built: trainer.restore(<run dir>), then trainer.evaluate()")
        cfg = OmegaConf.load(hydra_cfg)
    # an option whose plugin is missing here (uninstalled, CORRAL_DISABLE_PLUGINS): one line naming the package;
    # the run's sampler and loggers take no part in an evaluation
    used = {key: cfg[key] for key in cfg if key not in ("sampler", "logger")}
    check_run_options(used, run_dir, snapshot_sources(snapshot, trust=trust), "evaluate")
    run_env = copy.deepcopy(cfg.env)
    for override in overrides:
        if override.startswith(("+", "~")) or "=" not in override:
            raise ConfigError(f"{override}: {_not_a_change(override)}")
    parsed_overrides = [parse_override(override) for override in overrides]
    for line in repeated_key_warnings(overrides, "the evaluation", sweep=None):
        print(f"corral eval: warning: {line}", file=sys.stderr, flush=True)
    for override in overrides:
        check_eval_override(override, cfg)
    for override, parsed in zip(overrides, parsed_overrides):
        if parsed.key_or_group == "worker.n_prior_episodes" and parsed.value() == 0:
            _check_no_prior_episodes(override, cfg)
    for override, parsed in zip(overrides, parsed_overrides):
        try:  # Hydra's own change of a key (train.py's composition): a mapping merges into the run's
            OmegaConf.update(cfg, parsed.key_or_group, parsed.value(), merge=True)
        except OmegaConfBaseException as exc:  # env.kwargs=[1]: a list where the run has a mapping (train.py's line)
            raise ConfigError(type_message(override, str(exc).splitlines()[0])) from None
        check_eval_type(override, cfg)
    with open_dict(cfg):
        cfg.logger = {}
        cfg.trainer.resume = None
        cfg.trainer.trust_snapshot = False  # no resume here; _load_weights hands the trainer's loader --trust
        cfg.sampler = OmegaConf.create({"name": "local", "n_workers": 1})
        if OmegaConf.select(cfg, "normalize.update") is False:
            # a resumed run's freeze (normalize.update=false), which a new run may not ask for; evaluation
            # never updates the statistics whatever the flag, and this build starts from the snapshot's
            cfg.normalize.update = True
    return cfg, run_env


def _check_no_prior_episodes(override: str, cfg: Any) -> None:
    """Raise the evaluation's one line for ``worker.n_prior_episodes=0`` on a worker that acts on a
    latent task ``z`` (PEARL's): an evaluation's trials start with an empty context, whose posterior is
    the prior, so the first episode acts on the prior either way and 0 evaluates exactly as 1 does;
    what training says of it (the context buffers it fills) does not apply here."""
    from corral.framework.plugins import get_plugin_manager

    worker = get_plugin_manager().registry.get("worker", cfg.worker.name).factory
    if not getattr(worker, "samples_latent_tasks", False):
        return
    own = cfg.worker.get("n_prior_episodes")
    then = "the run's own value; leave it out" if own == 1 else f"which to give instead (the run has {own})"
    raise ConfigError(f"{override}: corral eval starts each trial with an empty context, whose posterior is the "
                      "prior, so the first episode acts on the prior either way and 0 evaluates exactly as "
                      f"worker.n_prior_episodes=1, {then}")


def parse_override(override: str) -> Any:
    """``override`` read as ``train.py`` reads it, with Hydra's override grammar
    (``env.kwargs={max_episode_steps:20}`` is a mapping, ``'a b'`` a quoted string); one that Hydra
    cannot read, or a sweep (``env.n_arms=3,4``: corral eval evaluates one setting), is one
    :class:`ConfigError` line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from corral.framework.precheck import hydra_message

    try:
        (parsed,) = OverridesParser.create().parse_overrides([override])
    except HydraException as exc:
        raise ConfigError(hydra_message(exc)) from None
    if parsed.is_sweep_override():
        raise ConfigError(f"{override}: corral eval evaluates one setting, not a sweep of several; run it once for "
                          "each value")
    return parsed


def _load_weights(run: Any, snapshot: Path, trust: bool, overrides: Sequence[str] = ()) -> None:
    """The snapshot's parameters into the rebuilt run, through the trainer's own loader (which
    unpickles an objects part only with ``trust``); the training sampler's state is not restored
    (evaluation brings its own workers). Parameters that do not fit the rebuilt policy (its sizes
    changed by ``overrides``) are one :class:`ConfigError` line."""
    algo = run.algo
    sampler = algo.sampler
    algo.sampler = None
    run.trainer.config.trust_snapshot = bool(trust)  # what the trainer's loader reads
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # the trainer's "resumed from" line
            run.trainer.restore(snapshot)
    except RuntimeError as exc:
        if "state_dict" not in str(exc):
            raise
        # torch's size mismatch: the policy built for the evaluation is not the one the snapshot holds
        changed = f" ({' '.join(overrides)} changed it)" if overrides else ""
        first = str(exc).strip().splitlines()
        raise ConfigError(f"the parameters of {snapshot} do not fit the policy built for the evaluation{changed}: "
                          f"{first[-1].strip() if first else exc}; evaluate with settings that keep the spaces "
                          "and sizes the run was trained with") from None
    finally:
        algo.sampler = sampler


def _other_env(cfg: Any, env_id: str) -> tuple[Any, Any]:
    """``cfg`` with ``env.id`` set to ``env_id``, and the environment source it makes. The id and the
    ``env.kwargs`` (the run's, with the overrides) are checked against ``env_id``'s environment, before
    the run is built: an id gymnasium cannot make is one line that names ``--env-id``, a keyword its
    environment does not take one line that names it."""
    import gymnasium as gym
    from omegaconf import OmegaConf

    from corral.framework.compose import env_source
    from corral.framework.env import EnvFactory, import_entry_point

    if "id" not in cfg.env:
        raise ConfigError(f"--env-id needs a gymnasium environment option (env=gym or a preset); the run used "
                          f"env={cfg.env.name}, which has no id")
    try:
        import_entry_point(env_id)
    except (gym.error.Error, ImportError) as exc:  # ImportError: a module the environment's module needs
        raise ConfigError(f"gymnasium cannot make environment {env_id!r}: {str(exc).strip()}; check --env-id (any "
                          "registered gymnasium id, or module:id, whose observation and action spaces are the "
                          "run's)") from None
    cfg = _with_env(cfg, OmegaConf.merge(cfg.env, {"id": env_id}))
    env = env_source(cfg.env)
    if isinstance(env, EnvFactory):
        env.check()  # an env.kwargs key that env_id's environment does not take
    return cfg, env


def _with_env(cfg: Any, env: Any) -> Any:
    """A copy of ``cfg`` whose ``env`` node is ``env``."""
    from omegaconf import open_dict

    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        cfg.env = env
    return cfg


def _compatible_env(env: Any, env_cfg: Any, env_id: str, spec: Any) -> Any:
    """``env`` (``--env-id``'s environment source) once one of its environments shows that its spaces
    are the trained ones; an ``env.max_episode_length`` above its own time limit is a warning, as in
    a run. An environment that raises while it is made is the run's one line (``env=...: making the
    environment ... raised ...``) after the traceback from the environment's code."""
    from corral.framework.compose import probe_env
    from corral.framework.env import limit_above_time_limit

    probe = probe_env(env, env_cfg)
    try:
        obs, act = probe.observation_space, probe.action_space
        above = limit_above_time_limit(probe, env_cfg.get("max_episode_length"))
    finally:
        probe.close()
    if not _fits(obs, act, spec):
        raise ConfigError(
            f"--env-id {env_id} is not compatible with the run: observations {obs}, actions {act}; the policy "
            f"was trained on observations {spec.observation_space}, actions {spec.action_space}"
        )
    if above is not None:
        logging.getLogger(__name__).warning(above)
    return env


def _fits(obs: Any, act: Any, spec: Any) -> bool:
    """True when observations ``obs`` and actions ``act`` are what the policy of ``spec`` (an
    :class:`~corral.framework.env.EnvSpec`) takes: the same observation shape and action space."""
    return bool(obs.shape == spec.observation_space.shape and act == spec.action_space)


def _check_same_spaces(run_env: Any, spec: Any, env_overrides: Sequence[str]) -> None:
    """Raise a one-line :class:`ConfigError` when the run's environment changed by ``env_overrides``
    (its :class:`~corral.framework.env.EnvSpec` ``spec``) no longer has the spaces of the run's own
    environment ``run_env`` (its config node), which the trained policy takes: ``env.n_arms=3`` on a
    5-armed bandit run."""
    from corral.framework.compose import env_source, probe_env

    probe = probe_env(env_source(run_env), run_env)
    try:
        obs, act = probe.observation_space, probe.action_space
    finally:
        probe.close()
    if _fits(obs, act, spec):
        return
    given = " ".join(env_overrides)
    raise ConfigError(
        f"{given} changes the environment's spaces to observations {spec.observation_space}, actions "
        f"{spec.action_space}, and the run's policy takes observations {obs}, actions {act}, which it was trained "
        f"on; evaluate with env.* settings that keep the spaces, or train a run with {given}"
    )


@contextlib.contextmanager
def _gymnasium_deprecations_unsaid() -> Iterator[None]:
    """Leave gymnasium's deprecation warnings unprinted in the block, as ``train.py``'s job does
    (Python's default filter ignores a DeprecationWarning): ``--env-id CartPole-v0`` made gymnasium
    print two lines of its own, in ANSI colour (``The environment CartPole-v0 is out of date``) that
    ``env.id=CartPole-v0`` in a run does not. gymnasium shows them through a filter it adds when
    :mod:`gymnasium.logger` is first imported, ahead of Python's; the filter of
    :func:`~corral.framework.env.silence_gymnasium_deprecations` goes ahead of it, for the block only."""
    from corral.framework.env import silence_gymnasium_deprecations

    with warnings.catch_warnings():
        silence_gymnasium_deprecations()
        yield


def eval_command(argv: Sequence[str]) -> int:
    """``corral eval``: parse the command line, evaluate, print mean ± std, write ``eval.json``."""
    parser = CommandParser(
        prog="corral eval", description="Evaluate a trained run: its snapshot's policy, through the run's workers.")
    parser.add_argument("run", help="a run directory, its snapshots/ directory or a snapshot file")
    parser.add_argument("overrides", nargs="*", default=[], help="key=value changes of the run's env.*, worker.* or seed")
    parser.add_argument("--episodes", type=int, help="episodes to run (default 10); for a meta-RL run (algo=rl2_ppo, "
                        "pearl): trials, cycling through the run's held-out tasks in the order of its meta-eval "
                        "(default: the meta-eval's own trials, every held-out task algo.meta_eval_trials times)")
    parser.add_argument("--stochastic", action="store_true", help="sample actions instead of the policy's mode")
    parser.add_argument("--seed", type=int, help="evaluation seed (default: the run's seed)")
    parser.add_argument("--video", metavar="DIR", help="record every episode as an MP4 in DIR (corral[video])")
    parser.add_argument("--env-id", help="evaluate on another compatible gymnasium id")
    parser.add_argument("--sampler", default="local", help="sampler that runs the evaluation (default local)")
    parser.add_argument("--n-workers", type=int, default=1, help="evaluation workers (default 1)")
    parser.add_argument("--trust", action="store_true",
                        help="load a snapshot that needs full unpickling (only for snapshots you trust)")
    parser.add_argument("-o", "--output", help="where eval.json goes (default: <run dir>/eval.json)")
    parser.add_argument("--json", action="store_true", help="print eval.json instead of the summary")
    opts = parser.parse_intermixed_args(list(argv))  # overrides may come after options
    from corral.framework.interrupts import Terminated, catch_stop_signals
    from corral.framework.logger import log_corral_records_as_lines

    log_corral_records_as_lines()  # a warning while it builds the run (corral.*'s log records): `corral: warning: ...`
    try:
        # `kill`, a scheduler's preemption: Ctrl-C's path and line; a CorralWarning is a `corral: warning: ...` line
        # and gymnasium's deprecation notes are not printed, as in train.py's job
        with catch_stop_signals(), warnings_as_lines(), _gymnasium_deprecations_unsaid():
            result = evaluate_run(
                opts.run, opts.overrides, episodes=opts.episodes, deterministic=not opts.stochastic, seed=opts.seed,
                video_dir=opts.video, env_id=opts.env_id, sampler=opts.sampler, n_workers=opts.n_workers,
                trust=opts.trust, output=opts.output,
            )
    except KeyboardInterrupt as exc:  # the sampler's workers are already shut down (its `with` block)
        by = " by SIGTERM" if isinstance(exc, Terminated) else ""
        print(f"\ncorral eval: interrupted{by}; no eval.json was written (it is written once every episode is in)",
              file=sys.stderr, flush=True)
        return 143 if by else 130
    except CorralError as exc:
        print(error_report(exc, "corral eval: error: "), file=sys.stderr)
        return 2
    print(json.dumps(result.to_json(), indent=2) if opts.json else result.summary())
    return 0


__all__ = ["EVAL_OVERRIDABLE", "EvalResult", "check_eval_override", "check_eval_type", "eval_command", "evaluate_run"]
