"""The Hydra ``Sweeper`` behind ``hydra/sweeper=optuna`` (settings in corral/conf/hydra/sweeper/optuna.yaml).

hydra-optuna-sweeper (the last release, 1.2/1.3) requires ``optuna<3``; this sweeper does the same
job on current Optuna with the same ``params`` syntax (``interval(a, b)``, ``tag(log, interval(a, b))``,
``int(interval(a, b))``, ``range(a, b, step)``, ``tag(log, range(a, b))`` (ints, step 1), ``choice(a, b, c)``
or ``a,b,c``; ``log`` is the one tag it reads, any other is refused), plus:

- persistent studies: with ``storage: sqlite:///optuna.db`` an interrupted search resumes where it
  stopped (``n_trials`` counts the study's finished trials; trials left running by the interrupted
  sweep are marked failed and run again), and ``optuna-dashboard sqlite:///optuna.db`` shows it;
- pruning: with a ``pruner`` each job reports its evaluation return every evaluation epoch to its
  trial (corral/plugins/optuna_pruning.py) and stops when the pruner says so;
- job numbers follow trial numbers, so ``<sweep dir>/<N>`` is trial N, across resumes too.

Kept import-light: Hydra imports every module under ``hydra_plugins`` when it scans for plugins, so
Optuna is imported only when a sweep starts.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional, Sequence, cast

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from corral.framework.errors import ConfigError, SweepError, SweepSettingError, exception_chain

log = logging.getLogger(__name__)

_NOTHING_TO_SEARCH = ("hydra.sweeper=optuna has nothing to search: give hydra.sweeper.params or a search space on "
                      "the command line, e.g. algo.learning_rate='tag(log, interval(1e-4, 1e-2))'")
#: Study attribute listing the trials an interrupted sweep left running (run again, not counted).
INTERRUPTED_ATTR = "corral_interrupted"
RESULTS_FILE = "optimization_results.yaml"
#: The statistic a pruner hears from each trial unless ``prune_on`` names another.
PRUNE_ON_DEFAULT = "eval/return_mean"

#: The exit statuses of a job that Ctrl-C (130) or SIGTERM (143) stopped (``corral.framework.entry``'s job).
INTERRUPTED_JOB_EXITS = (130, 143)


def distribution(override: Override) -> Any:
    """The Optuna distribution of one sweep override (``key=interval(0.1, 1)`` and such); a
    :class:`ConfigError` naming the override for one Optuna cannot search (``interval(1, 0.1)``)."""
    try:
        return _distribution(override)
    except ValueError as exc:
        raise ConfigError(f"{override.input_line}: {exc}") from None


def _distribution(override: Override) -> Any:
    import optuna.distributions as d

    value = override.value()
    key = override.get_key_element()
    log_scale = _log_tag(value)
    if isinstance(value, ChoiceSweep):
        choices = [x if isinstance(x, (str, int, float, bool)) or x is None else str(x) for x in value.list]
        return d.CategoricalDistribution(choices)
    if isinstance(value, RangeSweep):
        if value.shuffle:
            raise ValueError("shuffle(range(...)) has no meaning for Optuna")
        values = list(value.range())
        if not values:
            raise ValueError(f"range({value.start}, {value.stop}, {value.step}) is empty")
        if all(isinstance(v, int) for v in values):
            if log_scale and value.step != 1:
                raise ValueError(f"a log-scale range steps by 1 (Optuna's log-scale ints do), got step {value.step}; "
                                 f"use tag(log, range({value.start}, {value.stop})) or drop the tag")
            return d.IntDistribution(values[0], values[-1], step=int(value.step), log=log_scale)
        if log_scale:
            raise ValueError("a log-scale range is of ints (step 1); for floats use tag(log, interval(a, b))")
        return d.FloatDistribution(float(values[0]), float(values[-1]), step=float(value.step))
    if isinstance(value, IntervalSweep):
        assert value.start is not None and value.end is not None
        if value.start > value.end:
            raise ValueError(f"the interval's low end {value.start} is above its high end {value.end}")
        if isinstance(value.start, int) and isinstance(value.end, int):
            return d.IntDistribution(value.start, value.end, log=log_scale)
        return d.FloatDistribution(float(value.start), float(value.end), log=log_scale)
    raise ValueError(f"Optuna cannot search over {key} this way (use interval(a, b), tag(log, interval(a, b)), "
                     "range(a, b, step) or choice(a, b, ...))")


def _log_tag(value: Any) -> bool:
    """Whether a sweep is tagged ``log``; a :class:`ValueError` for any other tag, or ``log`` on a
    choice (Optuna has no log-scale categorical): Optuna would search such a space linearly, the tag
    dropped in silence."""
    tags = set(getattr(value, "tags", None) or ())
    unknown = sorted(tags - {"log"})
    if unknown:
        raise ValueError(f"the optuna sweeper knows no tag {', '.join(unknown)}: it knows the tag log only (a "
                         f"log-scale interval(a, b) or range(a, b)), e.g. tag(log, interval(1e-5, 1e-1))")
    if tags and isinstance(value, ChoiceSweep):
        raise ValueError("tag(log, ...) has no meaning for a choice (Optuna picks among the choices as given); "
                         "use tag(log, interval(a, b)) or drop the tag")
    return bool(tags)


def stored_trials(storage: str, study_name: str) -> int:
    """How many trials the study ``study_name`` in ``storage`` has (0 when there is no such study)."""
    import optuna

    try:
        return len(optuna.load_study(study_name=study_name, storage=storage).get_trials(deepcopy=False))
    except KeyError:  # no such study yet
        return 0


def storage_failure(exc: BaseException) -> str | None:
    """What went wrong in an Optuna storage, when ``exc`` (or an error it was raised from or while
    handling) comes from the database layer (SQLite, SQLAlchemy, Optuna's storage errors):
    ``OperationalError: disk I/O error``; None for any other error."""
    found = None
    for error in exception_chain(exc):  # the innermost one says it most plainly (sqlite3's own words)
        if type(error).__module__.startswith(("sqlite3", "sqlalchemy")) or type(error).__name__ == "StorageInternalError":
            found = error
    if found is None:
        return None
    first = (str(found).strip().splitlines() or [""])[0]
    return f"{type(found).__name__}: {first}"


def search_space(params: dict[str, str] | None, arguments: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Distributions by key, and the fixed overrides every trial gets, from ``hydra.sweeper.params`` and
    the command line (the command line wins for a key given in both)."""
    lines = [f"{k}={v}" for k, v in (params or {}).items()] + list(arguments)
    space: dict[str, Any] = {}
    fixed: dict[str, str] = {}
    for override in OverridesParser.create().parse_overrides(lines):
        key = override.get_key_element()
        space.pop(key, None)
        fixed.pop(key, None)
        if override.is_sweep_override():
            space[key] = distribution(override)
        else:
            fixed[key] = override.input_line or f"{key}={override.get_value_element_as_str()}"
    return space, list(fixed.values())


def _check_buildable(part: str, spec: Any) -> None:
    """Raise a one-line :class:`ConfigError` when the sweeper's ``sampler`` or ``pruner`` node (a
    ``_target_`` and its arguments) cannot be built (``hydra.sweeper.sampler.seed=abc``, a pruner's
    argument out of its range): Hydra reported it in four lines once the sweep had started."""
    if not isinstance(spec, (dict, DictConfig)) or "_target_" not in spec:
        return
    import warnings

    from hydra.utils import instantiate

    try:
        with warnings.catch_warnings():  # an experimental option's warning: the sweep's own build gives it
            warnings.simplefilter("ignore")
            instantiate(spec)
    except Exception as exc:  # noqa: BLE001 - whatever the class raises is the user's setting's problem
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        reason = " ".join(str(cause).split()) or type(cause).__name__
        raise ConfigError(f"hydra.sweeper.{part}: {spec['_target_']} cannot be built from its settings "
                          f"({type(cause).__name__}: {reason}); check hydra.sweeper.{part}.*") from None


def _space_of(cfg: Any, overrides: Sequence[str]) -> dict[str, Any]:
    """The search space of a composed ``hydra.sweeper`` node and the command line's job overrides."""
    params = cfg.get("params")
    if params is not None and not isinstance(params, (dict, DictConfig)):
        raise ConfigError(f"hydra.sweeper.params must map settings to search spaces, e.g. "
                          f"{{algo.learning_rate: 'tag(log, interval(1e-4, 1e-2))'}}, got {params!r}")
    return search_space(OmegaConf.to_container(params, resolve=True) if isinstance(params, DictConfig) else params,
                        overrides)[0]


#: The sweeper's settings (its ``hydra.sweeper`` node's keys besides ``_target_`` and ``_recursive_``).
SETTINGS = ("direction", "study_name", "storage", "n_trials", "n_jobs", "sampler", "pruner", "prune_on", "params")


def _flow(values: Sequence[Any]) -> str:
    """A list as it is written on the command line: ``[maximize,minimize]``."""
    return "[" + ",".join(str(v) for v in values) + "]"


def _unknown_settings_message(keys: Sequence[str]) -> str:
    """One line for ``hydra.sweeper`` keys the sweeper does not have (``+hydra.sweeper.n_trial=5``):
    the keys, the closest setting, and the settings there are."""
    import difflib

    close = [m[0] for k in keys if (m := difflib.get_close_matches(k, SETTINGS, n=1))]
    hint = f"; did you mean {', '.join(f'hydra.sweeper.{c}' for c in close)}?" if close else ""
    return (f"{', '.join(f'hydra.sweeper.{k}' for k in keys)}: the optuna sweeper has no such setting{hint} (its "
            f"settings: {', '.join(SETTINGS)}; nothing would read it)")


class CorralOptunaSweeper(Sweeper):
    """Asks Optuna for ``n_jobs`` trials at a time, launches them as Hydra jobs, tells Optuna their
    results (a job's return value: ``train.py`` returns the run's final evaluation return)."""

    def __init__(
        self,
        direction: Any = "maximize",
        study_name: Optional[str] = None,
        storage: Optional[str] = None,
        n_trials: int = 20,
        n_jobs: int = 1,
        sampler: Any = None,
        pruner: Any = None,
        prune_on: str = PRUNE_ON_DEFAULT,
        params: Optional[DictConfig] = None,
        **ignored: Any,
    ) -> None:
        if ignored:
            raise ConfigError(_unknown_settings_message(list(ignored)))
        self.check_settings({"n_trials": n_trials, "n_jobs": n_jobs, "direction": direction})
        self.direction = direction
        self.study_name = study_name
        self.storage = storage
        self.n_trials = int(n_trials)
        self.n_jobs = int(n_jobs)
        self.sampler = sampler
        self.pruner = pruner
        self.prune_on = prune_on
        self.params: Any = OmegaConf.to_container(params, resolve=True) if isinstance(params, DictConfig) else params
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher: Any = None
        #: The batch being launched: each trial with its job's number (its directory under the sweep's).
        self._launched: list[tuple[Any, int]] = []

    @classmethod
    def check_config(cls, cfg: Any, overrides: Sequence[str] = ()) -> None:
        """Raise a one-line :class:`ConfigError` for a key the sweeper does not have (added with ``+``),
        a setting the study cannot run with, or a search
        space it cannot search (``hydra.sweeper.params`` and the sweeps among ``overrides``, the
        command line's job overrides); called on the composed ``hydra.sweeper`` before the sweep
        starts (``check_sweep_plugins``, which then checks each searched value's ends)."""
        unknown = [str(k) for k in cfg if str(k) not in SETTINGS and not str(k).startswith("_")]
        if unknown:
            raise ConfigError(_unknown_settings_message(unknown))
        cls.check_settings(cfg)
        if not _space_of(cfg, overrides):
            raise ConfigError(_NOTHING_TO_SEARCH)

    @staticmethod
    def check_job(job_cfg: Any) -> None:
        """Raise a one-line :class:`ConfigError` for a trial's config that cannot give the study its
        objective, the run's final evaluation return: ``trainer.eval_every=0`` (evaluation off; the
        job would return its training return, and the study would rank it among evaluated trials, or
        rank training returns as if they were evaluations). Called on the composed job config of each
        end of the search space (``check_sweep_plugins``), so a searched ``eval_every`` is checked too."""
        trainer = job_cfg.get("trainer")
        if trainer is not None and trainer.get("eval_every") == 0:
            raise ConfigError("trainer.eval_every=0: the Optuna objective is each trial's final evaluation return, and "
                              "with evaluation off a trial has none (it would be ranked by its training return); set "
                              "trainer.eval_every > 0 (an evaluation also runs after the last epoch)")

    @staticmethod
    def ignored_settings(cfg: Any) -> list[str]:
        """One line for a setting the study would not read: ``prune_on`` away from its default
        without a ``pruner`` (only a pruner reads it)."""
        prune_on = cfg.get("prune_on")
        if cfg.get("pruner") is None and prune_on not in (None, PRUNE_ON_DEFAULT):
            return [f"hydra.sweeper.prune_on={prune_on} has no effect while hydra.sweeper.pruner=null: only a pruner "
                    f"reads it; set a pruner (e.g. 'hydra.sweeper.pruner={{_target_: optuna.pruners.MedianPruner}}'), or "
                    f"leave prune_on at its default ({PRUNE_ON_DEFAULT})"]
        return []

    @classmethod
    def check_settings(cls, cfg: Any) -> None:
        """Raise a one-line :class:`ConfigError` for ``n_trials``, ``n_jobs`` or ``direction`` out of
        their range, or several directions (train.py returns one objective); checked again when
        Hydra builds the sweeper."""
        for key in ("n_trials", "n_jobs"):
            value = cfg.get(key, 1)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"hydra.sweeper.{key} must be an integer >= 1, got {value!r}")
        direction = cfg.get("direction", "maximize")
        directions = list(direction) if isinstance(direction, (list, tuple)) or OmegaConf.is_list(direction) else [direction]
        if len(directions) > 1:
            raise ConfigError(f"hydra.sweeper.direction={_flow(directions)}: corral's train.py reports one objective, "
                              "the run's final evaluation return (eval/return_mean), so Optuna would fail each trial "
                              "once it has trained; give one direction: maximize (or minimize)")
        if not directions or any(str(d).lower() not in ("maximize", "minimize") for d in directions):
            raise ConfigError(f"hydra.sweeper.direction must be maximize or minimize (train.py's objective is the "
                              f"final evaluation return: maximize), got {direction!r}")
        for part in ("sampler", "pruner"):
            _check_buildable(part, cfg.get(part))

    @classmethod
    def first_job_number(cls, cfg: Any) -> int:
        """The number of the first job directory this search writes (its jobs are numbered by trial):
        the trials its stored study (``storage`` and ``study_name``) already has, else 0. Read before
        the sweep starts, so that it never overwrites an earlier search's jobs; a SQLite file that
        does not exist yet is not created here."""
        storage, name = cfg.get("storage"), cfg.get("study_name")
        if not storage or not name:
            return 0
        if str(storage).startswith("sqlite:///") and not Path(str(storage)[len("sqlite:///"):]).exists():
            return 0
        return stored_trials(str(storage), str(name))

    @staticmethod
    def search_ends(cfg: Any, overrides: Sequence[str]) -> dict[str, list[str]]:
        """For each searched setting, the overrides of the values at its ends (low and high, or each
        choice): the values a check of the job's config should see before any trial runs."""
        ends: dict[str, list[str]] = {}
        for key, dist in _space_of(cfg, overrides).items():
            values = list(getattr(dist, "choices", ())) or [dist.low, dist.high]
            ends[key] = [f"{key}={v}" for v in dict.fromkeys(values)]
        return ends

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        """Instantiate the launcher the jobs run with."""
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    # ------------------------------------------------------------------ the study
    def _study(self, resumed: int = 0) -> Any:
        """The study (created, or loaded from the storage); ``resumed``: trials it already has."""
        import optuna
        from hydra.utils import instantiate

        from corral.plugins.optuna_pruning import LIVE_STUDIES, make_pruner

        sampler = self.sampler  # a _target_ node (the preset sets _recursive_: false), or a sampler object
        if isinstance(sampler, (dict, DictConfig)):
            spec = OmegaConf.create(sampler)
            if resumed and spec.get("seed") is not None:
                # A seeded sampler would propose the earlier trials' parameters again: reseed it from the
                # seed and the number of trials so far (a resumed search stays reproducible).
                spec.seed = int(spec.seed) + resumed
            sampler = instantiate(spec)
        direction = self.direction  # one (check_settings): a list of one is its direction
        if isinstance(direction, (list, tuple)) or OmegaConf.is_list(direction):
            direction = direction[0]
        study = optuna.create_study(
            study_name=self.study_name, storage=self.storage, sampler=sampler, pruner=make_pruner(self.pruner),
            direction=cast(Any, str(direction)), load_if_exists=True)
        LIVE_STUDIES[study.study_name] = study
        return study

    def _existing_trials(self) -> int:
        """How many trials a stored study of this name already has (0 in memory or for a new study)."""
        if not self.storage or not self.study_name:
            return 0
        return stored_trials(self.storage, self.study_name)

    def _recover(self, study: Any) -> int:
        """Mark trials an interrupted sweep left running as failed and queue their parameters again;
        return how many finished trials the study already has."""
        from optuna.trial import TrialState

        interrupted = set(study.user_attrs.get(INTERRUPTED_ATTR, []))
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            interrupted.add(trial.number)
            study.set_user_attr(INTERRUPTED_ATTR, sorted(interrupted))
            study.tell(trial.number, state=TrialState.FAIL)
            study.enqueue_trial(trial.params, skip_if_exists=False)
            log.info("Optuna: trial %d was left running by an interrupted sweep; it runs again", trial.number)
        done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED,
                                                                     TrialState.FAIL))
                if t.number not in interrupted]
        if done:
            log.info("Optuna: study %r resumes with %d finished trial(s)", study.study_name, len(done))
        return len(done)

    # ------------------------------------------------------------------ the sweep
    def sweep(self, arguments: list[str]) -> Any:
        """Run the search; log and write (``optimization_results.yaml``) the best parameters and value.
        A storage that cannot be read or written (a full disk under a SQLite file, a database that went
        away) stops the sweep with one :class:`SweepError` line naming ``hydra.sweeper.storage``."""
        try:
            return self._sweep(arguments)
        except Exception as exc:
            if (why := storage_failure(exc)) is None:
                raise
            raise SweepError(f"hydra.sweeper.storage={self.storage}: Optuna could not read or write the study there "
                             f"({why}); check that storage (a file that is not an Optuna database, a full disk) "
                             "and run the same command again to resume the study") from None

    def _sweep(self, arguments: list[str]) -> Any:
        from corral.framework.sweep_jobs import note_kept, note_sweep_dir

        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        space, fixed = search_space(self.params, arguments)
        if not space:
            raise ConfigError(_NOTHING_TO_SEARCH)
        launcher = type(self.launcher).__name__
        if self.pruner is not None and not self.storage and launcher != "BasicLauncher":
            log.warning("Optuna: no pruning: jobs of %s run in other processes and reach the study only "
                        "through a storage; set hydra.sweeper.storage (e.g. sqlite:///optuna.db)", launcher)
        study = self._study(resumed=self._existing_trials())
        done = self._recover(study)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        # Ctrl-C's line names it, whichever launcher runs the trials (one that does not say it too)
        note_sweep_dir(self.config.hydra.sweep.dir, self.config.hydra.runtime.get("cwd"))
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        log.info("Optuna: study %r (%s), %d trial(s) to run, %d at a time; storage %s", study.study_name,
                 ", ".join(d.name.lower() for d in study.directions), max(0, self.n_trials - done), self.n_jobs,
                 self.storage or "in memory")
        try:
            self._run_trials(study, space, fixed, done)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM, in a batch or between two: the finished trials are kept
            note_kept(self._interrupted(study, sweep_dir))
            raise
        except SystemExit as exc:
            if exc.code not in INTERRUPTED_JOB_EXITS:
                raise
            # A trial run in this process (Hydra's basic launcher) stopped by Ctrl-C or SIGTERM: its trainer said
            # so and ended the job with 130 / 143. The sweep ends as stopped while a launcher waits for its jobs:
            # the study's trials kept and said, then the interrupted sweep's line (it had ended with none).
            from corral.framework.interrupts import Terminated

            note_kept(self._interrupted(study, sweep_dir))
            raise (Terminated() if exc.code == 143 else KeyboardInterrupt()) from None
        self._report(study, sweep_dir)
        return study

    def _run_trials(self, study: Any, space: dict[str, Any], fixed: list[str], done: int) -> None:
        """Ask, launch and tell batches of ``n_jobs`` trials until the study has ``n_trials`` finished ones
        (``done`` already)."""
        from corral.plugins.optuna_pruning import STUDY_ENV, TRIAL_ENV

        while done < self.n_trials:
            batch = min(self.n_jobs, self.n_trials - done)
            trials = [study.ask(space) for _ in range(batch)]
            # The job finds its trial through these (Trial._trial_id: the storage's id, what optuna.Trial takes).
            study_env = f"++hydra.job.env_set.{STUDY_ENV}='{study.study_name}'"
            overrides = [tuple(f"{k}={v}" for k, v in t.params.items()) + tuple(fixed)
                         + (f"++hydra.job.env_set.{TRIAL_ENV}={t._trial_id}", study_env) for t in trials]
            self.validate_batch_is_legal(overrides)
            numbers = [t.number for t in trials]
            first = numbers[0] if numbers == list(range(numbers[0], numbers[0] + batch)) else done
            self._launched = [(trial, first + i) for i, trial in enumerate(trials)]
            returns = self.launcher.launch(overrides, initial_job_idx=first)
            self._launched = []
            stops = [self._tell(study, trial, ret) for trial, ret in zip(trials, returns)]
            stop = next((s for s in stops if s is not None), None)
            if stop is not None:  # every trial is told first, so a stored study holds no trial left running
                raise stop
            done += batch

    def _interrupted(self, study: Any, sweep_dir: Path) -> str:
        """Record what an interrupted search has: ``optimization_results.yaml`` with its finished trials (number,
        state, value, parameters), the best so far, and the trials of the batch that was running (number,
        parameters, job directory: they have no value; a stored study runs them again when resumed), marked
        ``interrupted``; return the clause of the sweep's last line that says where they are (a stored study: in
        its storage, and the same command resumes it; "" for a study in memory with none finished and none
        running). Never raises: a record that cannot be written is said instead."""
        from optuna.trial import TrialState

        try:
            finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED,
                                                                  TrialState.FAIL))
        except Exception as exc:  # noqa: BLE001 - the storage went away: what is known without it
            return f"the Optuna study could not be read ({type(exc).__name__}: {exc})"
        interrupted = set(study.user_attrs.get(INTERRUPTED_ATTR, [])) if self.storage else set()
        finished = [t for t in finished if t.number not in interrupted]
        complete = [t for t in finished if t.state == TrialState.COMPLETE]
        best = max(complete, key=lambda t: t.value if study.direction.name == "MAXIMIZE" else -t.value, default=None)
        results: dict[str, Any] = {
            "name": "optuna", "study_name": study.study_name, "storage": self.storage, "interrupted": True,
            "trials": {state.name.lower(): sum(t.state == state for t in finished)
                       for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)},
            "finished_trials": [{"number": t.number, "state": t.state.name.lower(), "value": t.value,
                                 "params": dict(t.params)} for t in finished]}
        if best is not None:
            results.update(best_params=dict(best.params), best_value=best.value, best_trial=best.number)
        told = {t.number for t in finished}
        running = [(trial, job) for trial, job in self._launched if trial.number not in told]
        if running:
            results["interrupted_trials"] = [
                {"number": trial.number, "params": dict(trial.params), "job_dir": str(sweep_dir / str(job))}
                for trial, job in running]
        where = sweep_dir / RESULTS_FILE
        try:
            OmegaConf.save(OmegaConf.create(results), where)
            written = f"{where}"
        except Exception as exc:  # noqa: BLE001 - a full disk: the study itself still says
            written = f"not {where}: {type(exc).__name__}: {exc}"
        which = f"{len(finished)}{f'; best value {best.value:g}, trial {best.number}' if best is not None else ''}"
        numbers = ", ".join(str(trial.number) for trial, _ in running)
        were = f"trial{'s' if len(running) > 1 else ''} {numbers}, which {'were' if len(running) > 1 else 'was'} running"
        if self.storage:
            again = ("the same command resumes the search" if self.study_name else
                     f"the same command with hydra.sweeper.study_name={study.study_name} resumes the search")
            if running:
                again += f" and runs {were}, again"
            return (f"the Optuna study {study.study_name!r} keeps its finished trials ({which}) in {self.storage} "
                    f"(and {written}); {again}")
        if not finished and not running:
            return ""  # nothing finished, nothing to find again
        if not finished:
            listed = f"no trial had finished, and {were}, {'are' if len(running) > 1 else 'is'}"
        else:
            listed = f"its finished trials ({which})" + (f" and {were}," if running else "") + " are"
        return (f"the Optuna study was in memory: {listed} in {written} (a search with "
                "hydra.sweeper.storage and hydra.sweeper.study_name can be resumed)")

    def _tell(self, study: Any, trial: Any, ret: Any) -> SweepSettingError | None:
        """Tell the study how ``trial``'s job ended; return the error that stops the sweep, if it has one."""
        import optuna
        from hydra.core.utils import JobStatus
        from optuna.trial import TrialState

        if ret.status == JobStatus.COMPLETED:
            value = ret.return_value
            values = list(value) if isinstance(value, (list, tuple)) else [value]
            if any(v is None for v in values):
                log.warning("Optuna: trial %d returned no objective (no evaluation and no episode); failed",
                            trial.number)
                study.tell(trial, state=TrialState.FAIL)
                return None
            study.tell(trial, [float(v) for v in values] if len(values) > 1 else float(values[0]))
            return None
        error = getattr(ret, "_return_value", None)
        if isinstance(error, optuna.TrialPruned):
            log.info("Optuna: %s", error)
            study.tell(trial, state=TrialState.PRUNED)
            return None
        if getattr(error, "stops_sweep", False):  # a setting of the sweep itself: every trial would fail alike
            study.tell(trial, state=TrialState.FAIL)
            return SweepSettingError(f"the Optuna search stopped at trial {trial.number}, as every trial would fail "
                                     f"alike: {getattr(error, 'reason', error)}")
        log.warning("Optuna: trial %d (%s) failed: %s: %s", trial.number, " ".join(ret.overrides[:len(trial.params)]),
                    type(error).__name__, error)
        study.tell(trial, state=TrialState.FAIL)
        return None

    def _report(self, study: Any, sweep_dir: Path) -> None:
        """Log the best trial(s) and write ``optimization_results.yaml``. No completed trial: an error
        when trials failed (a broken config fails every trial), a warning when they were all pruned."""
        from optuna.trial import TrialState

        counts = {s.name.lower(): len(study.get_trials(deepcopy=False, states=(s,)))
                  for s in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)}
        results: dict[str, Any] = {"name": "optuna", "study_name": study.study_name, "storage": self.storage,
                                   "trials": counts}
        if not counts["complete"]:
            what = ", ".join(f"{n} {state}" for state, n in counts.items() if n)
            OmegaConf.save(OmegaConf.create(results), sweep_dir / RESULTS_FILE)
            if counts["fail"] and not counts["pruned"]:
                raise SweepError(f"the Optuna search has no completed trial ({what}); each job's error is above, "
                                 f"and `corral results {sweep_dir}` lists them")
            log.warning("Optuna: no trial completed (%s): no best parameters", what)
            return
        trial = study.best_trial
        log.info("Best parameters: %s", trial.params)
        log.info("Best value: %s (trial %d)", trial.value, trial.number)
        results.update(best_params=trial.params, best_value=trial.value, best_trial=trial.number)
        OmegaConf.save(OmegaConf.create(results), sweep_dir / RESULTS_FILE)
