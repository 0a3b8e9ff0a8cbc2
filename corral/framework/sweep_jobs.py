"""The jobs of a sweep that an interrupt left unrun, and the sweep's last line that says how to run them.

Hydra's basic sweeper expands a sweep's overrides into its jobs (``a=1,2 b=x,y``: their product in
order, the last key changing fastest, ``hydra.sweeper.params`` before the command line's), and its
basic launcher runs them one after another in the sweep's own process. So when Ctrl-C (or SIGTERM)
stops job N, the jobs after it never started. ``train.py`` follows the jobs as they run
(:func:`following` around Hydra's main, :func:`running` around each job) and an interrupted sweep
ends with :meth:`SweepFollower.unrun_line`: which jobs never started, and one command for each
block of them that runs exactly those jobs.

A basic sweep run in batches (``hydra.sweeper.max_batch_size``, with any launcher) stops after a batch
with a failed job: the sweeper reads each batch's results before it starts the next. The sweep's last
line then names the jobs that never started, and how to run them, the same way (:func:`stopped_batches`).

Only what is known is said: any other sweeper or launcher (Optuna, joblib, Ray, submitit) picks or
runs its jobs otherwise, and a sweep whose jobs cannot be worked out again exactly (``shuffle(...)``,
a ``multirun.yaml`` that cannot be read), gets no line.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

from corral.framework.shell_words import hydra_override, shell_override

#: The ``_target_`` of Hydra's own sweeper and launcher: the only pair whose job order is known here.
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"

#: The most jobs whose overrides the line lists by name (the commands cover all of them).
LISTED_JOBS = 4


@dataclass
class SweepJob:
    """One job of a sweep as it ran in this process: its number, overrides and directory, and how
    it ended (``ended``: returned or failed; ``interrupted``: stopped by Ctrl-C or SIGTERM, with
    ``resume_dir`` the directory ``trainer.resume=`` continues it from, None when it saved nothing)."""

    num: int
    overrides: list[str]
    output_dir: Path
    ended: bool = False
    interrupted: bool = False
    resume_dir: Path | None = None

    def stopped(self, resume_dir: Path | None) -> None:
        """Record that an interrupt stopped the job, resumable from ``resume_dir`` (None: not)."""
        self.interrupted, self.resume_dir = True, resume_dir


@dataclass
class SweepFollower:
    """The jobs of the sweep ``train.py`` runs in this process, as they start and end."""

    sweep_dir: str = ""  # hydra.sweep.dir as the command gave it (relative to ``cwd`` or absolute)
    cwd: Path = field(default_factory=Path.cwd)  # the directory train.py was started in
    basic: bool = False  # Hydra's basic sweeper and launcher run the jobs
    jobs: list[SweepJob] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # what a sweeper kept of an interrupted sweep (note_kept)

    def results_note(self) -> str:
        """What an interrupted sweep's line says of its finished jobs: they keep their ``summary.json``, and
        the command that lists them, with the sweep's directory as the command gave it (relative to where
        ``train.py`` was started, quoted for a shell); when this process never learnt the directory (a
        launcher that does not tell it, :func:`note_sweep_dir`, before a job ran here), the command alone; then
        what the sweeper said it kept (:func:`note_kept`, such as where an Optuna study's finished trials are)."""
        if not self.sweep_dir:
            return "; ".join(["finished jobs keep their summary.json (`corral results` on the sweep's directory lists "
                              "them)", *self.kept])
        where = self.sweep_dir
        if not Path(where).is_absolute() and _resolved(self.cwd) != _resolved(Path.cwd()):
            where = str(Path(self.cwd, where))  # the shell is where train.py was started: the same directory
        return "; ".join([f"finished jobs keep their summary.json (`corral results {shlex.quote(where)}` lists each "
                          "one's status)", *self.kept])

    @property
    def interrupted(self) -> bool:
        """True when an interrupt stopped the latest job."""
        return bool(self.jobs) and self.jobs[-1].interrupted

    def unrun_line(self) -> str | None:
        """The sweep's last line after an interrupt: the jobs that never started (and the stopped job
        when it left nothing to resume), with the commands that run exactly those; None when every
        job ran or started, or when which jobs did cannot be known here."""
        if not self.basic or not self.jobs:
            return None
        try:
            return self._unrun_line()
        except Exception:  # noqa: BLE001 - a line that only adds to the exit: never a traceback instead of it
            return None

    def _unrun_line(self) -> str | None:
        """:meth:`unrun_line`, which may raise."""
        plan = read_sweep(Path(self.cwd, self.sweep_dir))
        if plan is None:
            return None
        jobs = plan.jobs()
        last = self.jobs[-1]
        if any(job.num >= len(jobs) or jobs[job.num] != job.overrides for job in self.jobs):
            return None  # not the jobs that ran: say nothing rather than something wrong
        status = _fresh_status(last.output_dir)
        first, resumable, again = last.num + 1, False, False
        if status == "completed" or last.ended:
            pass  # it ran (a job interrupted in its final evaluation counts as completed)
        elif last.resume_dir is not None:
            resumable = True
        elif not last.interrupted and status == "interrupted":
            pass  # stopped again while stopping: its own lines say whether it can be resumed
        else:  # it left nothing to resume: it runs again with the rest
            first, again = last.num, True
        rest = range(first, len(jobs))
        if not rest:
            return None
        never = range(last.num + 1, len(jobs))
        of = f" of {len(jobs)}"
        said = []
        if never:
            listed = "; ".join(plan.label(jobs[n]) for n in never[:LISTED_JOBS])
            more = f"; ... ({len(never) - LISTED_JOBS} more)" if len(never) > LISTED_JOBS else ""
            said.append(f"{_numbers(never)}{of} never started ({listed}{more})")
            of = ""
        if resumable:
            said.append(f"job {last.num} can be resumed with {shell_override('trainer.resume', last.resume_dir)}")
        if again:
            said.append(f"job {last.num}{of} ({plan.label(jobs[last.num])}) left nothing to resume")
        return (f"corral: sweep interrupted: {'; '.join(said)}; run {_numbers(rest)} with "
                f"{plan.commands(rest, _command_prefix(), Path(self.sweep_dir), self.cwd)}")


def _resolved(path: Path) -> Path:
    """``path`` made absolute, its links followed (as it is when it cannot be)."""
    try:
        return path.resolve()
    except OSError:
        return path


def _numbers(nums: range) -> str:
    """``job 2`` or ``jobs 1-2``."""
    return f"job {nums[0]}" if len(nums) == 1 else f"jobs {nums[0]}-{nums[-1]}"


def _fresh_status(run_dir: Path) -> str | None:
    """The status in ``run_dir``'s ``summary.json`` when this process wrote it (None otherwise)."""
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return str(summary.get("status")) if summary.get("pid") == os.getpid() else None


def _command_prefix() -> str:
    """How the sweep was started: ``corral train`` or ``python <script>``."""
    if Path(sys.argv[0]).name.startswith("corral"):  # `corral train` (corral.framework.cli)
        return "corral train"
    return f"python {shlex.quote(sys.argv[0])}"


@dataclass(frozen=True)
class SweepPlan:
    """A basic sweep's jobs, as its sweeper expands them: for each key (in the sweeper's order) its
    ``key=value`` items; the jobs are their product. ``params`` are ``hydra.sweeper.params`` as
    overrides (what the sweeper puts before the command line's); ``hydra`` the command's ``hydra.*``
    overrides other than the sweep directory."""

    keys: list[str]
    items: list[list[str]]
    params: list[str]
    hydra: list[str]

    def jobs(self) -> list[list[str]]:
        """Every job's overrides, in job-number order."""
        return [list(job) for job in itertools.product(*self.items)]

    def label(self, job: Sequence[str]) -> str:
        """The job's overrides of the keys the sweep varies (all of them when it varies none)."""
        varied = [item for item, values in zip(job, self.items) if len(values) > 1]
        return " ".join(varied or job) or "no overrides"

    def blocks(self, start: int) -> list[list[str]]:
        """The jobs from number ``start`` on as few sweeps as they make (a sweep is a product): each
        one's task overrides, ``key=v1,v2`` for a key with several values."""
        sizes = [len(values) for values in self.items]
        digits: list[int] = []
        for size in reversed(sizes):
            start, digit = divmod(start, size)
            digits.insert(0, digit)
        ranges: list[list[range]] = []
        moved = [i for i, d in enumerate(digits) if d]
        if not moved:
            ranges.append([range(size) for size in sizes])
        else:
            last = moved[-1]  # the keys after it start at their first value: one block from here to their end
            ranges.append([range(d, d + 1) for d in digits[:last]] + [range(digits[last], sizes[last])]
                          + [range(size) for size in sizes[last + 1:]])
            for i in reversed(range(last)):
                if digits[i] + 1 < sizes[i]:
                    ranges.append([range(d, d + 1) for d in digits[:i]] + [range(digits[i] + 1, sizes[i])]
                                  + [range(size) for size in sizes[i + 1:]])
        return [[self._item(k, [self.items[k][j] for j in block[k]]) for k in range(len(self.keys))]
                for block in ranges]

    def _item(self, k: int, items: list[str]) -> str:
        """One override for key ``k`` taking the values of ``items`` (``key=value`` each)."""
        if len(items) == 1:
            return items[0]
        cut = len(self.keys[k]) + 1
        return f"{self.keys[k]}={','.join(item[cut:] for item in items)}"

    def commands(self, rest: range, prefix: str, sweep_dir: Path, cwd: Path) -> str:
        """The commands that run exactly the jobs ``rest`` (the last of the sweep), each into a new
        sweep directory next to ``sweep_dir``; when they cannot be checked to, each job's overrides."""
        blocks = self.blocks(rest[0])
        wanted = sorted(tuple(job) for job in self.jobs()[rest[0]:])
        made = sorted(tuple(job) for block in blocks for job in expand(self.params + block))
        if made != wanted:  # values the sweeper would read otherwise: the jobs' own overrides, one by one
            jobs = self.jobs()
            return (f"{prefix} and their overrides: "
                    + "; ".join(f"job {n}: `{shlex.join(jobs[n])}`" for n in rest))
        dirs = _new_dirs(sweep_dir, cwd, len(blocks))
        runs = [f"`{prefix} -m {shlex.join([*block, *self.hydra, hydra_override('hydra.sweep.dir', where)])}`"
                for block, where in zip(blocks, dirs)]
        return runs[0] if len(runs) == 1 else f"{', '.join(runs[:-1])} and {runs[-1]}"


def _new_dirs(sweep_dir: Path, cwd: Path, n: int) -> list[str]:
    """``n`` sweep directories that do not exist yet, named after ``sweep_dir`` (``<dir>-rest``,
    ``<dir>-rest2``, ...)."""
    base = sweep_dir if sweep_dir.name not in ("", ".", "..") else Path(cwd, sweep_dir).resolve()
    out: list[str] = []
    for i in itertools.count(1):
        if len(out) == n:
            return out
        candidate = base.with_name(f"{base.name}-rest{'' if i == 1 else i}")
        if not Path(cwd, candidate).exists():
            out.append(str(candidate))
    raise AssertionError("unreachable")


def _parser() -> Any:
    """Hydra's override parser, with the config loader of the running Hydra when there is one
    (``glob(...)`` lists a config group's options through it)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    loader = GlobalHydra.instance().config_loader() if GlobalHydra.instance().is_initialized() else None
    return OverridesParser.create(config_loader=loader)


def expand(overrides: Sequence[str]) -> list[list[str]]:
    """The jobs Hydra's basic sweeper makes of ``overrides`` (``hydra.sweeper.params`` first)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return [job for batch in BasicSweeper.split_arguments(_parser().parse_overrides(list(overrides)), None)
            for job in batch]


def read_sweep(sweep_dir: Path, any_launcher: bool = False) -> SweepPlan | None:
    """The :class:`SweepPlan` of the basic sweep whose ``multirun.yaml`` (the sweeper's record of the
    sweep, written before its first job) is in ``sweep_dir``; None for another sweeper, or another
    launcher unless ``any_launcher`` (the sweeper alone numbers the jobs), a sweep whose job order is
    random (``shuffle(...)``), or a record that does not give the jobs."""
    from omegaconf import DictConfig, OmegaConf

    record = OmegaConf.load(sweep_dir / "multirun.yaml")
    hydra_cfg = record.get("hydra") if isinstance(record, DictConfig) else None
    if hydra_cfg is None or hydra_cfg.sweeper.get("_target_") != BASIC_SWEEPER \
            or (not any_launcher and hydra_cfg.launcher.get("_target_") != BASIC_LAUNCHER):
        return None
    given = OmegaConf.to_container(hydra_cfg.overrides, resolve=False)
    params = OmegaConf.to_container(hydra_cfg.sweeper.params, resolve=True) if hydra_cfg.sweeper.get("params") else {}
    assert isinstance(given, dict) and isinstance(params, dict)
    param_items = [str(k) + f"={v}" for k, v in params.items()]  # as BasicSweeper writes them
    parsed = _parser().parse_overrides(param_items + [str(o) for o in given.get("task") or []])
    items: dict[str, list[str]] = {}
    for override in parsed:  # as BasicSweeper.split_arguments takes them: a key given again replaces its values
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep() or getattr(override.value(), "shuffle", False):
                return None
            items[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            items[key] = [f"{key}={override.get_value_element_as_str()}"]
    hydra_given = [str(o) for o in given.get("hydra") or []
                   if str(o).split("=", 1)[0].lstrip("+~") not in ("hydra.sweep.dir", "hydra.mode")]
    plan = SweepPlan(keys=list(items), items=list(items.values()), params=param_items, hydra=hydra_given)
    if plan.jobs() != expand(param_items + [str(o) for o in given.get("task") or []]):
        return None
    return plan


def stopped_batches(sweep_dir: str, num: int, task: Sequence[str], cwd: Path | None = None) -> str | None:
    """What a sweep's last line says of its other jobs after its job ``num`` (task overrides ``task``)
    failed, when Hydra's basic sweeper ran the jobs in batches of ``hydra.sweeper.max_batch_size`` (with
    any launcher): it reads each batch's results before the next and stops at the first failed one, so
    the batches after the job's never started. The line names the jobs that ran, those that never
    started and the commands that run exactly those; when the jobs cannot be worked out again
    (:func:`read_sweep`), that the jobs after the job's batch never started. None when no job can have
    been left unstarted (another sweeper, a single batch, the job's batch the last): then the sweep
    ran its other jobs. ``sweep_dir`` is ``hydra.sweep.dir``, relative to ``cwd`` (default: the
    current directory, where ``train.py`` was started)."""
    from omegaconf import OmegaConf

    cwd = Path.cwd() if cwd is None else cwd
    where = Path(cwd, sweep_dir)
    try:
        sweeper = OmegaConf.load(where / "multirun.yaml").hydra.sweeper
        if sweeper.get("_target_") != BASIC_SWEEPER or sweeper.get("max_batch_size") is None:
            return None
        size = int(sweeper.max_batch_size)
    except Exception:  # noqa: BLE001 - no record of the sweep to say more from: the line as it is
        return None
    if size <= 0:  # -1: every job in one batch (and Hydra refuses anything else below 1)
        return None
    ran = range((num // size + 1) * size)  # the batches before the job's had no failed job: all of them ran
    results = f"`corral results {shlex.quote(str(sweep_dir))}` lists each one's status"
    stop = f"Hydra's basic sweeper starts no batch after one with a failed job (hydra.sweeper.max_batch_size={size})"
    try:
        plan = read_sweep(where, any_launcher=True)
        jobs = plan.jobs() if plan is not None else []
        if plan is not None and num < len(jobs) and jobs[num] == list(task):
            if len(ran) >= len(jobs):
                return None
            never = range(len(ran), len(jobs))
            listed = "; ".join(plan.label(jobs[n]) for n in never[:LISTED_JOBS])
            more = f"; ... ({len(never) - LISTED_JOBS} more)" if len(never) > LISTED_JOBS else ""
            return (f"the sweep ran {_numbers(ran)} ({results}) and stopped: {stop}, so {_numbers(never)} of "
                    f"{len(jobs)} never started ({listed}{more}); run them with "
                    f"{plan.commands(never, _command_prefix(), Path(sweep_dir), cwd)}")
    except Exception:  # noqa: BLE001 - the jobs cannot be worked out again: what is known without them
        pass
    return f"the sweep stopped after job {ran[-1]} ({results}): {stop}, so any later jobs never started"


_follower: SweepFollower | None = None


@contextlib.contextmanager
def following() -> Iterator[SweepFollower]:
    """Follow the jobs that run in this process while the block runs (``train.py``'s command, from its first
    step to its last). SIGTERM raises :class:`~corral.framework.interrupts.Terminated` (a KeyboardInterrupt) in
    the whole block (:func:`~corral.framework.interrupts.catch_stop_signals`), so that a ``kill`` at any moment of
    a sweep (while Hydra composes, while a launcher sets up, between an Optuna sweeper's batches), not only while
    a launcher waits for its jobs, ends it as Ctrl-C does: with the sweep's one line and exit status 143, not with
    SIGTERM's default action (no line, the launcher's processes left running). A launcher or a trainer inside
    installs its own handlers for its part and puts these back."""
    global _follower
    from corral.framework.interrupts import catch_stop_signals

    previous, _follower = _follower, SweepFollower()
    try:
        with catch_stop_signals():
            yield _follower
    finally:
        _follower = previous


def note_sweep_dir(sweep_dir: Any, cwd: Any = None) -> None:
    """Tell the sweep followed in this process (:func:`following`) its directory: ``hydra.sweep.dir`` as
    the command gave it, relative to ``cwd`` (where ``train.py`` was started; default: the current
    directory) or absolute. A launcher whose jobs run in other processes (joblib, Ray, submitit) or a
    sweeper calls it when it launches, so that an interrupted sweep's line names the directory
    (:meth:`SweepFollower.results_note`); nothing happens outside :func:`following` (a job's process)."""
    follower = _follower
    if follower is None or sweep_dir is None or not str(sweep_dir):
        return
    follower.sweep_dir = str(sweep_dir)
    follower.cwd = Path(str(cwd)) if cwd is not None and str(cwd) else Path.cwd()


def note_kept(what: str) -> None:
    """Tell the sweep followed in this process (:func:`following`) what it keeps of an interrupted sweep
    beyond the jobs' ``summary.json`` (``what``: a clause of the sweep's last line, such as where an Optuna
    study's finished trials are), for :meth:`SweepFollower.results_note`; nothing happens outside
    :func:`following`."""
    if _follower is not None and what:
        _follower.kept.append(what)


@contextlib.contextmanager
def running(hydra_config: Any) -> Iterator[SweepJob]:
    """Around one job of ``train.py``: record it when it is a sweep's job run in this process
    (``hydra_config`` is its HydraConfig), and record it as ended when it returns or raises an
    error; an interrupt leaves it as :meth:`SweepJob.stopped` says."""
    from hydra.types import RunMode

    hc = hydra_config
    job = SweepJob(num=-1, overrides=[], output_dir=Path(str(hc.runtime.output_dir)))
    follower = _follower
    num = hc.job.get("num") if hc.mode == RunMode.MULTIRUN else None
    if follower is not None and num is not None:
        if not follower.jobs:
            follower.sweep_dir, follower.cwd = str(hc.sweep.dir), Path(str(hc.runtime.cwd))
            follower.basic = (hc.sweeper.get("_target_") == BASIC_SWEEPER
                              and hc.launcher.get("_target_") == BASIC_LAUNCHER)
        job.num, job.overrides = int(num), [str(o) for o in hc.overrides.task]
        follower.jobs.append(job)
    try:
        yield job
    except Exception:
        job.ended = True
        raise
    job.ended = True


__all__ = ["BASIC_LAUNCHER", "BASIC_SWEEPER", "SweepFollower", "SweepJob", "SweepPlan", "expand", "following",
           "note_kept", "note_sweep_dir", "read_sweep", "running", "stopped_batches"]
