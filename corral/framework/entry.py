"""The Hydra entry point behind ``python train.py`` and ``corral train``."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any, Sequence

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from corral.framework.config import CONFIG_NAME, register_configs
from corral.framework.errors import (
    ConfigError,
    CorralError,
    OutputError,
    SweepSettingError,
    error_report,
    no_room_error,
    os_error_in,
    warnings_as_lines,
)
from corral.framework.plugins import call_run_summary, get_plugin_manager
from corral.framework.precheck import MULTIRUN_FLAGS, precheck, split_flags
from corral.framework.run_lock import LOCK_FILE
from corral.framework.shell_words import shell_override

# corral/conf/hydra/launcher/joblib.yaml (and submitit_*.yaml) set corral's defaults for the launcher and
# so share the name of the plugin's own schema node, which Hydra merges in with a deprecation warning
# (in the sweep's process and again in each job process, which imports this module).
warnings.filterwarnings("ignore", message=r"\s*'hydra/launcher/(joblib|submitit_local|submitit_slurm)' is "
                                          r"validated against ConfigStore schema", category=UserWarning)


def prepare(argv: Sequence[str]) -> list[str]:
    """Load plugins, store their configs and search path in Hydra; return the overrides ``argv``.

    The plugins' YAML directories reach Hydra through a search-path plugin, not through an extra
    command-line override, so ``argv`` comes back unchanged.
    """
    register_configs(get_plugin_manager())
    return list(argv)


def flags_last(args: Sequence[str]) -> list[str]:
    """``args`` with Hydra's flags (and their values) moved after the overrides, in their order.
    Hydra's parser takes the overrides as one run of positional arguments, so ``a=1 -m b=1,2`` or
    ``seed=1 --cfg job algo=vpg`` would stop at the flag (``unrecognized arguments: ...``); after them,
    ``--info`` without a value does not take an override for its value. A flag's place changes
    nothing else."""
    flags, overrides = split_flags(args)
    return overrides + flags


def main(argv: Sequence[str] | None = None) -> Any:
    """Run ``train.py``: compose the config from ``argv`` (default ``sys.argv[1:]``) and train."""
    from corral.framework.sweep_jobs import following

    given = list(sys.argv[1:] if argv is None else argv)
    # From the first step on, SIGTERM takes Ctrl-C's path (following), so a sweep stopped at any moment ends
    # with the line below. A sweep's jobs run here (Hydra's basic launcher) and one is interrupted: the
    # sweep's last line names the jobs that never started and how to run them (SweepFollower.unrun_line).
    with following() as sweep:
        try:
            return _checked_and_run(given)
        except KeyboardInterrupt as exc:  # Ctrl-C (or SIGTERM) outside a trainer, e.g. in a multirun: the launcher
            # has stopped its jobs
            from corral.framework.interrupts import Terminated

            multirun = any(a in ("-m", "--multirun") for a in given) or bool(sweep.sweep_dir)
            note = f"; {sweep.results_note()}" if multirun else ""  # the sweep's directory, when a launcher said it
            by = " by SIGTERM" if isinstance(exc, Terminated) else ""
            print(f"\ncorral: interrupted{by}{note}", file=sys.stderr, flush=True)
            if (line := sweep.unrun_line()) is not None:
                print(line, file=sys.stderr, flush=True)
            raise SystemExit(143 if by else 130) from None  # as a run stopped by SIGTERM / Ctrl-C exits
        except SystemExit:  # an interrupted job's exit status (130, 143) ends the sweep
            if sweep.interrupted and (line := sweep.unrun_line()) is not None:
                print(line, file=sys.stderr, flush=True)
            raise


def _checked_and_run(argv: Sequence[str]) -> Any:
    """:func:`main`'s work: load the plugins, check every value of ``argv`` (a CorralError is one line, exit
    status 2), then run Hydra's main."""
    try:
        with warnings_as_lines():  # a broken or clashing plugin, another library's warning: one line each
            args = flags_last(prepare(argv))
            precheck(args)  # every value checked, in one message style, before Hydra creates a run directory
    except CorralError as exc:  # e.g. a plugin failed with CORRAL_STRICT_PLUGINS=1
        print(error_report(exc), file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    from corral.framework.resume import absolute_resume, in_place_overrides

    args = absolute_resume(args)  # the same run wherever the job runs (hydra.job.chdir=true)
    sys.argv = [sys.argv[0]] + flags_last(args + in_place_overrides(args))  # resume=<dir> continues in <dir>
    return _sweep_or_run(multirun=any(a in MULTIRUN_FLAGS for a in args))


def no_room_message(exc: BaseException, multirun: bool) -> str | None:
    """One line for a run or sweep that Hydra could not start because its files could not be written
    (``.hydra/config.yaml`` on a full disk: :func:`no_room_error`); None for any other error."""
    problem = no_room_error(exc)
    if problem is None:
        return None
    where = problem.filename or _output_dir()
    what = f"could not write {where}" if where else "could not write the run's files"
    option = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    return (f"corral: error: {what} ({type(problem).__name__}: {problem.strerror or problem}); make room there, or "
            f"give {option}= a directory on another file system, and start again")


def _output_dir() -> str | None:
    """The directory of the job Hydra was starting, when it had got that far."""
    try:
        return str(HydraConfig.get().runtime.output_dir)
    except Exception:  # noqa: BLE001 - Hydra's config not set yet (or no longer)
        return None


def _sweep_or_run(multirun: bool) -> Any:
    """Run Hydra's main; a sweep whose job failed with a corral error ends with the one line of
    :class:`SweepJobFailed` and exit status 1, and a run or sweep whose files cannot be written (a full
    disk) with :func:`no_room_message`'s line and exit status 2. Hydra would add its hint about
    HYDRA_FULL_ERROR, which shows nothing more here (the job has printed its error); so Hydra is
    asked to raise what stopped it (HYDRA_FULL_ERROR=1 while it runs), and anything else gets Hydra's
    own report."""
    if os.environ.get("HYDRA_FULL_ERROR"):
        try:
            return _hydra_main()
        except SweepJobFailed as exc:  # Hydra's full report, with the sweep's last line as its message
            exc.args = (exc.sweep_line(),)
            raise
    os.environ["HYDRA_FULL_ERROR"] = "1"
    stderr = sys.stderr
    # Hydra's line for a failed job: SweepJobFailed's line names a sweep's; said again, or not at all for a
    # run whose files cannot be written (released for anything else)
    held = sys.stderr = HeldJobLines(stderr)
    try:
        return _hydra_main()
    except SweepJobFailed as exc:  # its line names the job and its overrides: Hydra's line would repeat them
        print(exc.sweep_line(), file=stderr, flush=True)
        raise SystemExit(1) from None
    except CorralError as exc:  # from the sweeper: a search space it cannot search, no trial completed
        print(f"corral: error: {exc}", file=stderr, flush=True)
        raise SystemExit(2 if isinstance(exc, ConfigError) else 1) from None
    except Exception as exc:  # noqa: BLE001 - reported as Hydra reports it without the variable set
        from hydra._internal.utils import run_and_report

        if (line := no_room_message(exc, multirun)) is not None:
            print(line, file=stderr, flush=True)
            raise SystemExit(2) from None
        held.release()  # a job that failed otherwise: Hydra's line says which, before Hydra's report
        os.environ.pop("HYDRA_FULL_ERROR", None)
        stopped = exc.with_traceback(_from_run_job(exc.__traceback__))

        def reraise() -> None:
            raise stopped

        run_and_report(reraise)  # prints Hydra's compact report and exits with status 1
        raise
    finally:
        if sys.stderr is held:
            sys.stderr = stderr
        os.environ.pop("HYDRA_FULL_ERROR", None)


def _from_run_job(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` from Hydra's ``run_job`` frame on (``tb`` itself when it has none): the traceback that
    Hydra's compact report strips down to the job's own frames, as it does when it reports an error
    itself. It looks for ``run_job`` among the first ten frames only, and a re-raised job error has
    Hydra's launch frames above it."""
    current = tb
    while current is not None and current.tb_frame.f_code.co_name != "run_job":
        current = current.tb_next
    return current if current is not None else tb


class HeldJobLines:
    """``sys.stderr`` while Hydra runs a run or a sweep: everything passes through, except the line
    Hydra writes when it reads a failed job's result (``Error executing job with overrides: [...]``),
    which is held back. A sweep's job that failed with a corral error has printed its own line, and
    the sweep's last line (:class:`SweepJobFailed`) names the job and its overrides; a run whose files
    cannot be written ends with its own line; so the held line is dropped. :meth:`release` writes it
    for any other failure."""

    PREFIX = "Error executing job with overrides: "

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.held: list[str] = []

    def write(self, text: str) -> int:
        """Write ``text`` through, or hold it when it is Hydra's failed-job line."""
        if text.startswith(self.PREFIX):
            self.held.append(text)
            return len(text)
        return int(self.stream.write(text))

    def release(self) -> None:
        """Write the held lines."""
        for text in self.held:
            self.stream.write(text)
        self.held.clear()
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, ... of the real stream
        return getattr(self.stream, name)


@hydra.main(version_base="1.3", config_path="pkg://corral.conf", config_name=CONFIG_NAME)
def _hydra_main(cfg: DictConfig) -> float | None:
    with warnings_as_lines():  # in every job's process: e.g. a tracker that went quiet is one line
        return _job(cfg)


def _job(cfg: DictConfig) -> float | None:
    """One job of ``train.py``: train ``cfg``; a CorralError is one ``corral: error:`` line, exit code 2."""
    from corral.framework.compose import command_line_warned
    from corral.framework.sweep_jobs import running
    from corral.framework.trainer import TrainingInterrupted

    # running: a sweep's job run here, so main() knows which jobs have run; command_line_warned: the
    # command line's ignored values are said by precheck() (one run) or just below (a sweep's job)
    with running(HydraConfig.get()) as job, command_line_warned():
        try:
            if HydraConfig.get().mode == RunMode.MULTIRUN and not cfg.trainer.get("resume"):
                # A sweep's job: the warnings precheck() gives one run, for the job's own overrides.
                from corral.framework.compose import warn_ignored
                from corral.framework.override_keys import given_keys

                warn_ignored(cfg, given_keys(_task_overrides()))
            return run(cfg, log_dir=HydraConfig.get().runtime.output_dir)
        except CorralError as exc:
            # A clear one-paragraph message instead of a traceback from deep inside a library.
            from corral.framework.logger import job_prefix

            print(error_report(exc, lead=job_prefix()), file=sys.stderr, flush=True)
            if HydraConfig.get().mode == RunMode.MULTIRUN:
                raise SweepJobFailed.of(exc) from None
            remove_refused_attempt(Path(HydraConfig.get().runtime.output_dir))
            raise SystemExit(2) from None
        except TrainingInterrupted as exc:  # Ctrl-C (or SIGTERM) stops a sweep too
            # resumable from the run's directory exactly when the trainer's line said so (it has a snapshot)
            job.stopped(Path(HydraConfig.get().runtime.output_dir) if exc.snapshot is not None else None)
            raise SystemExit(exc.exit_code) from None


def remove_refused_attempt(run_dir: Path) -> None:
    """Remove what Hydra made for a run that was refused before it wrote anything (a resume whose
    overrides would change the run, a branch that cannot start): a directory holding only Hydra's
    ``.hydra/`` record of the command and an empty ``corral.log``. A directory with anything else
    in it is left as it is."""
    try:
        entries = {p.name for p in run_dir.iterdir()}
        log = run_dir / "corral.log"
        if not entries <= {".hydra", "corral.log", LOCK_FILE} or (log.exists() and log.stat().st_size):
            return
        shutil.rmtree(run_dir / ".hydra", ignore_errors=True)
        log.unlink(missing_ok=True)
        (run_dir / LOCK_FILE).unlink(missing_ok=True)
        run_dir.rmdir()
    except OSError:  # gone already, or not ours to remove: nothing else to do
        pass


class SweepJobFailed(CompactHydraException):
    """A sweep's job stopped with a corral error (already printed on the job's own line).

    An ordinary exception, not an exit: Hydra's launchers record the job as failed and go on with
    the sweep's other jobs, as they do for any job that raises, and the sweep ends by reporting
    the first failure in one line (:func:`main` prints :meth:`sweep_line`; Hydra prints a
    CompactHydraException as its message). ``reason`` is the corral error's first line;
    ``stops_sweep`` is true for a :class:`~corral.framework.errors.SweepSettingError` (a sweeper that
    reads it stops the sweep); ``num``, ``task`` and ``sweep_dir`` are the job's number, task
    overrides and ``hydra.sweep.dir``. All survive pickling, so they reach a sweeper from a
    launcher's other processes too."""

    reason: str = ""
    stops_sweep: bool = False
    num: int | None = None
    task: tuple[str, ...] = ()
    sweep_dir: str = ""
    head: str = ""  # "corral: job N (...) failed: ...": the message up to what it says of the other jobs

    @classmethod
    def of(cls, exc: BaseException) -> "SweepJobFailed":
        """The failure of the current job, from the corral error that stopped it."""
        hc = HydraConfig.get()
        overrides = " ".join(str(o) for o in hc.overrides.task)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        num = hc.job.get("num")  # type: ignore[attr-defined]  # a DictConfig at run time, typed as JobConf
        head = f"corral: job {num} ({overrides}) failed: {first}"
        failed = cls(f"{head}; the sweep ran its other jobs (`corral results {shlex.quote(str(hc.sweep.dir))}` lists each one's status)")
        failed.reason, failed.stops_sweep = first, isinstance(exc, SweepSettingError)
        failed.num = int(num) if num is not None else None
        failed.task, failed.sweep_dir, failed.head = tuple(str(o) for o in hc.overrides.task), str(hc.sweep.dir), head
        return failed

    def sweep_line(self) -> str:
        """The sweep's last line, in the sweep's own process: the message, except after Hydra's basic
        sweeper stopped at this job's batch (``hydra.sweeper.max_batch_size``: it starts no batch after
        one with a failed job), where it says which jobs ran and which never started, and how to run
        those (:func:`corral.framework.sweep_jobs.stopped_batches`)."""
        if self.num is None or not self.head:
            return str(self)
        from corral.framework.sweep_jobs import stopped_batches

        rest = stopped_batches(self.sweep_dir, self.num, self.task)
        return str(self) if rest is None else f"{self.head}; {rest}"


def snapshot_config(source: str | Path, trust: bool = False) -> DictConfig | None:
    """The resolved config stored in the snapshot of a run directory or snapshot file (None for a
    snapshot without one): :func:`corral.framework.resume.snapshot_config`."""
    from corral.framework.resume import snapshot_config as stored_config

    return stored_config(source, trust=trust)


def resolve_resume(cfg: DictConfig) -> DictConfig:
    """With ``trainer.resume=<dir>``, continue with the config the run was started with.

    ``trainer.*`` settings, the loggers and the sampler given on the new command line replace the
    original ones (see :mod:`corral.framework.resume`); any other override that would change the
    run is a ``ConfigError`` naming it. ``train.py`` has checked this before Hydra started the run
    (:func:`corral.framework.precheck.precheck`). Outside Hydra (library use: :func:`run` called with
    a config) there is no command line, and what ``cfg`` changes in the run's config stands for it
    (:func:`corral.framework.resume.changed_settings`).
    """
    from corral.framework.resume import resumed_config

    return resumed_config(cfg, _task_overrides() if HydraConfig.initialized() else None)


def _task_overrides() -> list[str]:
    """The overrides on the command line of this job (none outside Hydra)."""
    try:
        return [str(o) for o in HydraConfig.get().overrides.task]
    except ValueError:  # not running under Hydra
        return []


def run(cfg: DictConfig, log_dir: str | Path | None = None) -> float | None:
    """Build and train one run; write ``summary.json``; return the final evaluation return.

    The run holds its directory (:mod:`corral.framework.run_lock`) while it trains: a second process
    resuming it, or given the same ``hydra.run.dir``, is refused in one line instead of writing
    into the same files.

    The final evaluation return is that of the last epoch; when the last epoch had no evaluation
    (``trainer.eval_every`` does not divide it) one more evaluation runs after training, so sweeps
    (Optuna's objective) always compare evaluation returns. Without evaluation
    (``trainer.eval_every=0``) the final training return is returned instead. The summary is
    written whether the run completes, is interrupted or fails (``status`` says which).
    """
    from corral.framework.run_lock import training_in

    with training_in(log_dir):
        return _run(cfg, log_dir)


def _run(cfg: DictConfig, log_dir: str | Path | None) -> float | None:
    """:func:`run`, in its directory."""
    import time

    from corral.framework import resume as resuming
    from corral.framework.compose import build

    started = time.time()
    t0 = time.perf_counter()
    cfg = resolve_resume(cfg)
    plan = resuming.plan(cfg.trainer.resume, log_dir) if cfg.trainer.get("resume") else None
    previous = None
    copied: list[Path] = []
    if plan is not None:
        previous = _read_summary(plan.origin) if plan.origin is not None else None
        copied = resuming.copy_history(plan)
        if plan.in_place:
            resuming.say(f"corral: resuming the run in {plan.run_dir}: its progress.csv, TensorBoard events, "
                         "corral.log and summary.json continue")
        elif plan.run_dir is not None:
            resuming.say(f"corral: resuming into {plan.run_dir}, a branch of {plan.origin or plan.snapshot} "
                         "(its history up to the snapshot is copied; the original stays as it was)")
    built = None
    in_flight: BaseException | None = None  # what stops the run, on its way up (None: nothing)
    stats: dict[str, float] = {}
    status, error = "failed", None
    from corral.framework.interrupts import hold_while_stopping, stopping_notice
    from corral.framework.trainer import Terminated, TrainingInterrupted, catch_stop_signals

    # Once an interrupt or an error is on its way up, a further Ctrl-C waits while the workers are shut
    # down, summary.json is written and the closing line printed (hold_while_stopping, left at the end).
    stopping = contextlib.ExitStack()

    try:
        with catch_stop_signals():  # SIGTERM while building or in the final evaluation: Ctrl-C's path too
            built = build(cfg, log_dir=log_dir)
            failing = False
            try:
                stats = dict(built.train())
                trainer = built.trainer
                if trainer.already_finished:
                    branch, where = None, plan.run_dir if plan else log_dir
                    if plan is not None and not plan.in_place:  # a branch with nothing to do leaves nothing
                        built.close(quiet=True)
                        if resuming.drop_branch(plan, copied):
                            branch, where = plan.run_dir, plan.origin or plan.snapshot
                    elif plan is not None:  # nor does the run itself: not even Hydra's record of this command
                        resuming.drop_session_record(log_dir)
                    resuming.say(resuming.finished_message(where, trainer.stop_reason, trainer.epoch,
                                                           trainer.total_env_steps, branch=branch))
                    status = "finished"
                    return stats.get("eval/return_mean", stats.get("train/return_mean"))
                if "eval/return_mean" not in stats and built.trainer.config.eval_every and built.trainer.epoch > 0:
                    # the final policy's evaluation: with trainer.video_every, its video too (a run shorter
                    # than trainer.eval_every epochs has no other evaluation to record)
                    trainer = built.trainer
                    stats.update(trainer.evaluate(video=bool(trainer.config.video_every)))
                    if (trainer.count_evaluation(stats["eval/return_mean"]) and trainer.config.keep_best
                            and trainer.snapshot_dir is not None and trainer.snapshot_epoch == trainer.epoch):
                        trainer.save_snapshot(best=True)  # the final snapshot, now the best one too
            except BaseException:
                failing = True
                stopping.enter_context(hold_while_stopping(stopping_notice))  # until the record is written
                raise
            finally:
                built.close(quiet=failing)  # a logger that cannot close raises only when nothing else went wrong
            status = "completed"
    except BaseException as exc:
        in_flight = exc
        # Again: catch_stop_signals put the handlers back as it was left, undoing the hold entered inside it.
        stopping.enter_context(hold_while_stopping(stopping_notice))
        # An exception may name its own status (an Optuna trial stopped by its pruner: "pruned").
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(getattr(exc, "summary_status", "failed"))
        error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, KeyboardInterrupt) and isinstance(exc.__context__, TrainingInterrupted):
            raise exc.__context__ from None  # pressed again while stopping: the trainer's line has said where
        if isinstance(exc, KeyboardInterrupt) and not isinstance(exc, TrainingInterrupted):
            # outside the epochs: while starting (nothing to resume) or in the final evaluation (nothing lost)
            trainer = built.trainer if built is not None else None
            by = " by SIGTERM" if isinstance(exc, Terminated) else ""
            if trainer is not None and trainer.stop_reason is not None:
                what = (f"in the final evaluation; training had finished ({trainer.stop_reason} reached) and is saved, "
                        "so the run counts as completed")
                status, error = "completed", None  # only the extra evaluation for the objective is missing
            elif plan is not None:
                what = ("before training resumed; the run is as it was "
                        f"(resume with {shell_override('trainer.resume', cfg.trainer.resume)})")
            else:
                what = "before training started; nothing to resume"
            resuming.say(f"\ncorral: interrupted{by} {what}")
            raise TrainingInterrupted(None, 143 if by else 130) from None
        if not isinstance(exc, KeyboardInterrupt) and log_dir is not None:
            # The run's log says why it stopped, whole: a worker's traceback, or a bug's.
            from corral.framework.logger import run_log

            if isinstance(exc, CorralError):
                run_log(log_dir).error("corral: error: %s", exc)
            else:
                run_log(log_dir).error("corral: the run failed", exc_info=exc)
        raise
    finally:
        with stopping:
            wall = time.perf_counter() - t0
            if status != "finished":
                if built is not None and not stats:  # failed or interrupted: the last committed epoch's row
                    stats = dict(built.trainer.last_stats)
                summary = None
                # a resume stopped before its snapshot was loaded leaves the run's summary as it was
                untouched = plan is not None and (built is None or built.trainer.resumed_epoch is None)
                unwritten: OutputError | None = None
                if log_dir is not None and not untouched:
                    try:
                        summary = _write_summary(cfg, log_dir, built, stats, status, started, wall, error, previous,
                                                 plan)
                    except Exception as raised:
                        if (problem := os_error_in(raised)) is None:
                            raise
                        unwritten = OutputError(
                            f"could not write the run's {Path(log_dir) / 'summary.json'} ({type(problem).__name__}: "
                            f"{problem.strerror or problem}); `corral results` and `corral plot` will list the run "
                            "as unfinished")
                if built is not None:
                    _closing_line(built.trainer, status, stats, summary, wall, log_dir)
                if unwritten is not None:
                    if status == "completed":  # nothing else went wrong: the lost record is the run's error
                        raise unwritten
                    from corral.framework.logger import job_prefix

                    # the error that stopped the run comes next, in its own line
                    print(f"{job_prefix()}corral: warning: {unwritten}", file=sys.stderr, flush=True)
                if summary is not None and log_dir is not None:  # the plugins' turn, once the run's lines are out
                    hook_failed = call_run_summary(get_plugin_manager().hook.corral_run_summary,
                                                   log_dir=Path(log_dir), summary=summary)
                    if hook_failed is not None:
                        from corral.framework.logger import job_prefix, run_log

                        if in_flight is None:  # the run completed: the plugin's failure is the command's error
                            run_log(log_dir).error("corral: error: %s", hook_failed)
                            raise hook_failed
                        # the error that stopped the run is the run's, and comes next in its own line
                        run_log(log_dir).warning("corral: warning: %s", hook_failed)
                        print(f"{job_prefix()}corral: warning: {hook_failed}", file=sys.stderr, flush=True)
    objective = stats.get("eval/return_mean", stats.get("train/return_mean"))
    return objective


def resumed_overrides(first: Sequence[str], now: Sequence[str]) -> list[str]:
    """The overrides of a run resumed with ``now`` whose first session had ``first``: ``first``, with
    each key that ``now`` gives again replaced by ``now``'s value, then ``now``'s new keys. Left out:
    how this session ran, not what the run is: ``trainer.resume`` / ``trainer.trust_snapshot``, the
    loggers, the sampler (the same episodes under any) and Hydra's own settings."""
    def key(override: str) -> str:
        return override.split("=", 1)[0].lstrip("+~")

    def how_it_ran(k: str) -> bool:
        return (k in ("trainer.resume", "trainer.trust_snapshot") or k.split(".", 1)[0] in ("logger", "sampler")
                or k.startswith(("hydra.", "hydra/")))

    merged = {key(o): o for o in first}
    for override in now:
        if not how_it_ran(key(override)):
            merged[key(override)] = override
    return list(merged.values())


def _read_summary(run_dir: Path) -> dict[str, Any] | None:
    """A run directory's ``summary.json`` (None when it has none or it cannot be read)."""
    import json

    try:
        return json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def _best_snapshot_path(trainer: Any) -> str | None:
    """The path of the run's best snapshot (``trainer.keep_best``), or None."""
    name = getattr(trainer, "best_snapshot", None)
    directory = getattr(trainer, "snapshot_dir", None)
    return str(Path(directory) / name) if name and directory is not None else None


def _closing_line(trainer: Any, status: str, stats: dict[str, float], summary: dict[str, Any] | None,
                  wall_time: float, log_dir: str | Path | None) -> None:
    """The run's last line: status (and the limit that ended it), final and best evaluation
    return, environment steps, wall time and the run directory; on stderr and in ``corral.log``."""
    from corral.framework.logger import job_prefix, run_log

    final = stats.get("eval/return_mean")
    best = trainer.best_eval_return
    head = f"{status} ({trainer.stop_reason} reached)" if status == "completed" and trainer.stop_reason else status
    parts = [
        f"corral: {head} after {trainer.epoch} epoch{'' if trainer.epoch == 1 else 's'}",
        f"final eval {final:.2f}" if final is not None else "final eval n/a",
        f"best eval {best:.2f}" if best is not None else "best eval n/a",
        f"{trainer.total_env_steps:,} env steps",
        f"wall time {_duration(wall_time)}",
    ]
    if log_dir is not None:
        parts.append(str(log_dir))
    if status == "failed" and (saved := trainer.saved_message()) is not None:  # nothing is lost: how to go on
        parts.append(saved)
    line = " | ".join(parts)
    print(job_prefix() + line, file=sys.stderr, flush=True)
    run_log(log_dir).info(line)


def _duration(seconds: float) -> str:
    """``42.1s``, ``3m05s``, ``2h01m``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _write_summary(cfg: DictConfig, log_dir: str | Path, built: Any, stats: dict[str, float], status: str,
                   started: float, wall_time: float, error: str | None = None,
                   previous: dict[str, Any] | None = None, plan: Any = None) -> dict[str, Any]:
    """Write the run's ``summary.json`` (see :mod:`corral.results.summary`) and return it.

    A resumed run keeps its first session's start time, overrides and job, adds its wall time to
    theirs, and records each resume in ``resumes``."""
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
        job_cfg: Any = hydra_cfg.job  # a DictConfig at run time (`.get`), typed as the JobConf dataclass
        job = {"name": job_cfg.name, "num": job_cfg.get("num"), "id": job_cfg.get("id"),
               "mode": str(hydra_cfg.mode).rsplit(".", 1)[-1]}
    except ValueError:  # not running under Hydra (library use)
        pass
    finished = time.time()
    summary = {
        "status": status,
        "error": error,
        "final_eval_return": stats.get("eval/return_mean"),
        "best_eval_return": trainer.best_eval_return if trainer is not None else None,
        "best_snapshot": _best_snapshot_path(trainer),
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
        "stop_reason": trainer.stop_reason if trainer is not None and status == "completed" else None,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    if plan is not None:  # a resumed run: one run across its sessions
        first = previous or {}
        resumes = list(first.get("resumes") or [])
        resumes.append({"started_utc": summary["started_utc"], "snapshot": str(plan.snapshot),
                        "from_epoch": trainer.resumed_epoch if trainer is not None else None,
                        "overrides": overrides, "in_place": plan.in_place,
                        **({} if plan.in_place or plan.origin is None else {"branch_of": str(plan.origin)})})
        # One run across its sessions: its first start, and the overrides that make it what it is now
        # (the first session's, with this one's changes: a branch that trains longer, or with another
        # trainer.batch_size, is not grouped with the original by `corral results`). A branch is a job
        # of its own (of a sweep of branches); a run resumed in place stays the job it was.
        kept = ("started_at", "started_utc") if not plan.in_place else ("started_at", "started_utc", "job")
        for key in kept:
            if key in first:
                summary[key] = first[key]
        if "overrides" in first:
            summary["overrides"] = resumed_overrides(list(first["overrides"]), overrides)
        summary["wall_time_s"] = float(first.get("wall_time_s") or 0.0) + wall_time
        summary["resumes"] = resumes
    write_summary(log_dir, summary)  # the corral_run_summary hook is called by _run, after the closing line
    return summary
