"""Trainer: runs epochs, logs, evaluates, snapshots atomically and resumes bit-for-bit.

Signal handling (when Ctrl-C and SIGTERM interrupt training, and when they wait) lives in
:mod:`corral.framework.interrupts`; its names are importable from here too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from corral.framework.algorithm import Algorithm
from corral.framework.batch import EpisodeBatch, StepType, nonfinite_values
from corral.framework.checks import check, checked
from corral.framework.env import EnvSpec, make_env
from corral.framework.errors import (
    AlgorithmError,
    ConfigError,
    CorralError,
    EnvironmentValueError,
    OutputError,
    SnapshotError,
    TrainingDivergedError,
    WorkerError,
    os_error_in,
)
from corral.framework.evaluation import evaluate, record_video, run_worker_factory
from corral.framework.interrupts import (
    StopRequest,
    Terminated,
    catch_stop_signals,
    defer_interrupts,
    finish_epoch_on_interrupt,
    hold_while_stopping,
    interrupt_for,
    send_again,
    signal_label,
    stopping_notice,
)
from corral.framework.logger import Logger, job_prefix, run_log
from corral.framework.progress import ProgressBar
from corral.framework.shell_words import shell_override
from corral.framework.snapshot import load_snapshot, remove_snapshot, save_snapshot
from corral.framework.video import check_recordable
from corral.results.writable import write_atomically

SNAPSHOT_FORMAT = 1
#: The file in a run's ``snapshots/`` that names the snapshot of its best evaluation (``trainer.keep_best``),
#: as ``latest`` names the newest one; either can be given where a snapshot is asked for.
BEST_POINTER = "best"
#: The pointer files of a snapshot directory: each holds the file name of one snapshot beside it.
POINTERS = ("latest", BEST_POINTER)


@dataclass
@checked("trainer")
class TrainerConfig:
    """Settings of the default trainer (``trainer.*`` on the command line)."""

    n_epochs: Optional[int] = field(
        default=100, metadata=check(ge=1, help="number of epochs to train (at most; null: no limit, trainer.max_env_steps decides)")
    )
    max_env_steps: Optional[int] = field(
        default=100_000, metadata=check(ge=1, help="stop after the epoch that reaches this many environment steps (null: no limit)")
    )
    batch_size: int = field(default=2048, metadata=check(ge=1, help="environment steps collected per epoch (at least)"))
    stop_at_eval_return: Optional[float] = field(default=None, metadata=check(
        applies_if=("eval_every", ">", 0),
        help="stop after the first evaluation whose eval/return_mean reaches this (null: never), as well as at "
             "n_epochs / max_env_steps"))
    eval_every: int = field(default=5, metadata=check(ge=0, help="run deterministic evaluation every N epochs (0: never)"))
    eval_episodes: int = field(default=10, metadata=check(ge=1, applies_if=("eval_every", ">", 0),
                                                          help="episodes per evaluation"))
    video_every: int = field(default=0, metadata=check(
        ge=0, applies_if=("eval_every", ">", 0), help="record one evaluation episode as MP4 every K evaluations to <run dir>/videos and TensorBoard "
                   "(needs corral[video]; 0: never)"))
    snapshot_every: int = field(default=1, metadata=check(ge=0, help="write a snapshot every N epochs (0: only at the end)"))
    keep_snapshots: int = field(default=3, metadata=check(ge=0, help="how many recent snapshots to keep (0: all)"))
    keep_best: bool = field(default=False, metadata=check(
        applies_if=("eval_every", ">", 0),
        help="also keep the snapshot of the epoch with the best evaluation return, named by snapshots/best "
             "(written when an evaluation beats every earlier one; keep_snapshots never removes it)"))
    resume: Optional[str] = field(default=None, metadata={"help": "run directory (or snapshot file) to resume from"})
    trust_snapshot: bool = field(default=False, metadata=check(
        applies_if=("resume", "!=", None),
        help="also load a snapshot's objects part (state only pickle can hold), which can run code: only for "
             "snapshots you trust"))
    progress: bool = field(default=True, metadata={"help": "live progress bar when stderr is a terminal"})
    torch_threads: int = field(
        default=1, metadata=check(ge=0, help="torch intra-op threads in the training process (0: torch's default)")
    )

    def __post_init__(self) -> None:
        if self.n_epochs is None and self.max_env_steps is None:
            raise ConfigError("trainer.n_epochs and trainer.max_env_steps are both null, so the run would never "
                              "stop; set one of them (e.g. trainer.max_env_steps=100000)")


_DEFAULT_TORCH_THREADS: list[int] = []  # torch's own thread count in this process, before corral changed it


def apply_torch_threads(threads: int) -> None:
    """Set torch's intra-op thread count to ``threads`` (``trainer.torch_threads``; 0: torch's own default
    for this process, also after an earlier run in the process changed it). Small networks are fastest
    single-threaded, and extra threads spin against workers. The count also changes the numbers: the
    QR decomposition behind orthogonal initialisation gives (slightly) different weights for different
    counts, so :func:`~corral.framework.compose.build` applies it before it builds anything, and the
    same seed gives the same run in a fresh process and in a sweep's later job alike."""
    import torch

    if not _DEFAULT_TORCH_THREADS:
        _DEFAULT_TORCH_THREADS.append(torch.get_num_threads())
    wanted = int(threads) if int(threads) > 0 else _DEFAULT_TORCH_THREADS[0]
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped training; the trainer has printed what is kept. ``snapshot`` is the
    run's newest snapshot, the one a resume continues from (None: nothing to resume); ``exit_code``
    is the shell's convention for the signal (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, snapshot: Path | None, exit_code: int = 130) -> None:
        super().__init__(str(snapshot))
        self.snapshot = snapshot
        self.exit_code = exit_code


#: What :attr:`Trainer.phase` can be: between epochs, or where in an epoch the trainer is.
PHASES = ("idle", "sampling", "training", "evaluating", "committing")


class Trainer:
    """Runs an algorithm for epochs of ``batch_size`` environment steps.

    Library use, as in garage::

        trainer = Trainer(snapshot_dir="runs/ppo")
        trainer.setup(algo, env)
        trainer.train(n_epochs=50, batch_size=2048)

    Without a ``config``, a limit applies only when the caller sets it: ``train(n_epochs=50)``
    runs 50 epochs, ``train(max_env_steps=100_000)`` runs until 100,000 environment steps.
    With a config (``train.py``), ``trainer.n_epochs`` and ``trainer.max_env_steps`` both apply
    and whichever is reached first ends the run (:attr:`stop_reason` names it).

    Each epoch ends with a *commit*, done with Ctrl-C and SIGTERM held back: the
    ``corral_epoch_end`` hooks, every logger's row and, when one is due, the snapshot. A run
    interrupted anywhere else keeps every committed epoch; resuming continues after the last
    snapshot and first drops the rows of epochs it will run again (:meth:`Logger.resume`).
    """

    def __init__(
        self,
        config: TrainerConfig | None = None,
        *,
        snapshot_dir: str | os.PathLike | None = None,
        loggers: Sequence[Logger] | None = None,
        seed: int = 1,
        run_config: Any = None,
        hooks: Any = None,
    ) -> None:
        #: Library use (no config): only the limits passed to :meth:`train` apply.
        self._limits_from_config = config is not None
        self.config = config or TrainerConfig(max_env_steps=None)
        self.log_dir = Path(snapshot_dir) if snapshot_dir is not None else None
        if loggers is None:
            from corral.framework.plugins import get_registry

            loggers = [get_registry().get("logger", "console").factory(None, log_dir=self.log_dir)]
        self.loggers = list(loggers)
        self.seed = seed
        self.run_config = run_config
        self._hooks = hooks
        self.algo: Algorithm | None = None
        self.env: Any = None
        self.env_spec: EnvSpec | None = None
        #: The video the last evaluation recorded (``trainer.video_every``), else None; loggers get it
        #: through ``Logger.log_video`` and hooks can read it in ``corral_epoch_end``.
        self.last_video: Path | None = None
        self.epoch = 0
        self.total_env_steps = 0
        self.elapsed = 0.0
        self.last_stats: dict[str, float] = {}
        self.best_eval_return: float | None = None
        #: The file name of the snapshot of the best evaluation (``trainer.keep_best``), else None.
        self.best_snapshot: str | None = None
        #: The limits of the current :meth:`train` call, ``(n_epochs, max_env_steps)`` (None: no such limit).
        self._budget: tuple[int | None, int | None] = (None, None)
        self._sampler_state: Any = None
        self._progress: ProgressBar | None = None
        #: Where the trainer is now (one of :data:`PHASES`).
        self.phase = "idle"
        #: Epochs held by the newest snapshot written or restored (None: no snapshot yet).
        self.snapshot_epoch: int | None = None
        #: The limit that ended the last :meth:`train` call, e.g. ``"n_epochs=50"`` (None while running).
        self.stop_reason: str | None = None
        #: True when :meth:`train` found its limits already reached (a finished run resumed).
        self.already_finished = False
        self._restored = False
        #: The epoch a resumed run continued from (None: not resumed).
        self.resumed_epoch: int | None = None
        self._committed = (0, 0)  # (epochs, env steps) of the last committed epoch
        self._signals = StopRequest()  # the stop signals of the train() call under way (catch_stop_signals)
        self._warned_overshoot = False
        apply_torch_threads(self.config.torch_threads)

    # ------------------------------------------------------------------ setup
    def setup(self, algo: Algorithm, env: Any) -> None:
        """Give the trainer its algorithm and its environment (an Env or an EnvFactory)."""
        self.algo = algo
        self.env = env
        probe = make_env(env)
        try:
            # The episode limit the workers use (env.max_episode_length), not only the env's own.
            factory = run_worker_factory(algo, seed=self.seed, max_episode_length=None)
            self.env_spec = EnvSpec.from_env(probe, factory.max_episode_length)
        finally:
            probe.close()
        if self.config.video_every and self.config.eval_every:  # before any training: a missing extra, workers
            check_recordable(env, factory.worker_class, factory.worker_args)  # that cannot record, no frames

    @property
    def snapshot_dir(self) -> Path | None:
        """Where snapshots go (``<log_dir>/snapshots``)."""
        return self.log_dir / "snapshots" if self.log_dir is not None else None

    @property
    def hooks(self) -> Any:
        """The plugin hook relay."""
        if self._hooks is None:
            from corral.framework.plugins import get_plugin_manager

            self._hooks = get_plugin_manager().hook
        return self._hooks

    def _call_hook(self, name: str, **kwargs: Any) -> Any:
        """The hook ``name`` of :attr:`hooks`, a plugin's failure in it named (:func:`call_hook`)."""
        from corral.framework.plugins import call_hook

        return call_hook(getattr(self.hooks, name), **kwargs)

    # ------------------------------------------------------------------ training
    def limits(self, n_epochs: int | None = None, max_env_steps: int | None = None) -> tuple[int | None, int | None]:
        """The ``(n_epochs, max_env_steps)`` a :meth:`train` call stops at (None: no such limit).

        An argument wins; otherwise the config's value applies when the trainer was given a config
        (``train.py`` always gives one). A library ``Trainer()`` has only the limits passed to it.
        """
        if n_epochs is None and self._limits_from_config:
            n_epochs = self.config.n_epochs
        if max_env_steps is None and (self._limits_from_config or self.config.max_env_steps is not None):
            max_env_steps = self.config.max_env_steps
        return (None if n_epochs is None else int(n_epochs)), (None if max_env_steps is None else int(max_env_steps))

    def progress_done(self) -> float:
        """The fraction (0 to 1) of this :meth:`train` call's budget done so far: environment steps over
        its step limit or epochs over its epoch limit, whichever is further along."""
        n_epochs, max_env_steps = self._budget
        done = [self.epoch / n_epochs if n_epochs else 0.0,
                self.total_env_steps / max_env_steps if max_env_steps else 0.0]
        return min(1.0, max(done))

    def limit_reached(self, n_epochs: int | None, max_env_steps: int | None) -> str | None:
        """The limit the run has reached, as ``"n_epochs=50"``, ``"max_env_steps=100000"`` or
        ``"stop_at_eval_return=475"`` (the last epoch's evaluation reached ``trainer.stop_at_eval_return``;
        None: none of them)."""
        if n_epochs is not None and self.epoch >= n_epochs:
            return f"n_epochs={n_epochs}"
        if max_env_steps is not None and self.total_env_steps >= max_env_steps:
            return f"max_env_steps={max_env_steps}"
        target, reached = self.config.stop_at_eval_return, self.last_stats.get("eval/return_mean")
        if target is not None and reached is not None and self.epoch > 0 and reached >= target:
            return f"stop_at_eval_return={target:g}"
        return None

    def train(self, n_epochs: int | None = None, batch_size: int | None = None,
              max_env_steps: int | None = None) -> dict[str, float]:
        """Train until ``n_epochs`` epochs or ``max_env_steps`` environment steps, whichever comes
        first (both count from the start of the run); return the last epoch's statistics.

        See :meth:`limits` for which limits apply. :attr:`stop_reason` names the limit that ended
        the call. The sampler stays up afterwards so ``train`` can be called again with a larger
        limit to continue; call :meth:`shutdown` (or use the trainer as a context manager) when
        done. On an error or Ctrl-C the sampler is shut down before the exception propagates.
        """
        if self.algo is None:
            raise RuntimeError("call trainer.setup(algo, env) before trainer.train()")
        epochs_limit, steps_limit = self.limits(n_epochs, max_env_steps)
        self._budget = (epochs_limit, steps_limit)
        if epochs_limit is None and steps_limit is None:
            raise ConfigError("Trainer.train() needs a limit: pass n_epochs= or max_env_steps= "
                              "(or give the Trainer a TrainerConfig)")
        batch_size = int(batch_size if batch_size is not None else self.config.batch_size)
        if batch_size < 1:
            raise ConfigError(f"trainer.batch_size must be >= 1, got {batch_size}")
        if self.config.resume and not self._restored and self.epoch == 0 and self.total_env_steps == 0:
            self.restore(self.config.resume)
        self.stop_reason = self.limit_reached(epochs_limit, steps_limit)
        self.already_finished = self.stop_reason is not None
        if self.already_finished:
            return self.last_stats
        if steps_limit is not None and self.total_env_steps == 0 and steps_limit < batch_size:
            logging.getLogger(__name__).warning(
                "trainer.max_env_steps=%s is below trainer.batch_size=%s, the steps of one epoch at least: the run "
                "stops after its first epoch, with %s steps or more; lower trainer.batch_size to stop nearer %s",
                steps_limit, batch_size, f"{batch_size:,}", f"{steps_limit:,}")
        sampler = self.algo.sampler
        if self._sampler_state is None and sampler is not None:
            self._sampler_state = _try_state(sampler)
        if self.config.progress and sys.stderr.isatty():
            self._progress = ProgressBar(n_epochs=epochs_limit, max_env_steps=steps_limit, start_epoch=self.epoch,
                                         start_env_steps=self.total_env_steps)
        self._committed = (self.epoch, self.total_env_steps)
        error: BaseException | None = None
        try:
            with catch_stop_signals() as self._signals:
                self._call_hook("corral_run_start", trainer=self, cfg=self.run_config)
                while (reason := self.limit_reached(epochs_limit, steps_limit)) is None:
                    self._signals.check()  # a Ctrl-C that code under the last epoch swallowed
                    if not self._has_unsaved_epochs():
                        self._run_epoch(batch_size)
                        continue
                    # Finished epochs not in a snapshot yet (trainer.snapshot_every > 1): a first
                    # Ctrl-C lets this epoch finish and saves it instead of losing them.
                    with finish_epoch_on_interrupt(self._stop_notice) as stop:
                        self._run_epoch(batch_size)
                    if stop.signum is not None and self.limit_reached(epochs_limit, steps_limit) is None:
                        with defer_interrupts():
                            if self.snapshot_dir is not None and self.snapshot_epoch != self.epoch:
                                self.save_snapshot()
                        raise interrupt_for(stop.signum)
                self.stop_reason = reason
                if self.snapshot_dir is not None and self.epoch > 0 and self.snapshot_epoch != self.epoch:
                    with defer_interrupts():
                        self.save_snapshot()
        except KeyboardInterrupt as exc:
            error = exc
            terminated = isinstance(exc, Terminated)
            if self._progress is not None:
                self._progress.clear()
            message = self.interrupt_message(terminated)
            # An epoch that was not committed is not part of the run: its counters go back.
            self.epoch, self.total_env_steps = self._committed
            self._write_held_lines()  # the last epoch's line comes before the line that says the run stopped
            print(f"\n{job_prefix()}{message}", file=sys.stderr, flush=True)  # [job N] in a multirun
            run_log(self.log_dir).info(message)
            raise TrainingInterrupted(self.snapshot_path(), 143 if terminated else 130) from None
        except BaseException as exc:
            error = exc
            # As for an interrupt: the epoch that failed is not part of the run (no row, no snapshot).
            self.epoch, self.total_env_steps = self._committed
            raise
        finally:
            self.phase = "idle"
            if self._progress is not None:
                self._progress.close()
                self._progress = None
            # Stopping on an interrupt or an error: a further Ctrl-C waits for the workers to be shut down.
            with hold_while_stopping(stopping_notice) if error is not None else contextlib.nullcontext():
                try:
                    self._call_hook("corral_run_end", trainer=self, error=error)
                finally:
                    if error is not None:
                        self.shutdown(quiet=True)  # the error that stops the run is the one to report
        return self.last_stats

    def _write_held_lines(self) -> None:
        """Have every logger that holds a line back write it now: the console logger under
        ``logger.console.every`` holds the last epoch's line until it closes, which is after the
        interrupted line. A logger's optional ``flush()`` does it; one that fails here is left to its
        ``close``, so the interrupt is what the run reports."""
        for logger in self.loggers:
            flush = getattr(logger, "flush", None)
            if not callable(flush):
                continue
            try:
                flush()
            except Exception as exc:  # noqa: BLE001 - the interrupt is the run's news; close() tries again
                logging.getLogger(__name__).debug("logger=%s could not flush: %s", _logger_name(logger), exc)

    def _has_unsaved_epochs(self) -> bool:
        """True when committed epochs are not in a snapshot yet (``trainer.snapshot_every`` > 1 or 0)."""
        return self.snapshot_dir is not None and self.epoch > (self.snapshot_epoch or 0)

    def _stop_notice(self, signum: int) -> str:
        saved = self.snapshot_epoch or 0
        held = f"the last snapshot holds epochs 0-{saved - 1}" if saved else "no snapshot was written yet"
        return (f"\n{job_prefix()}corral: {signal_label(signum)}: finishing epoch {self._committed[0]} "
                f"to save it with {_epochs(0, self._committed[0] - 1)} ({held}, trainer.snapshot_every="
                f"{self.config.snapshot_every}); {send_again(signum)} to stop now, and a resume runs the unsaved "
                "epochs again")

    def _hold_notice(self, signum: int) -> str:
        """What a signal held through a long update or commit says (see :func:`defer_interrupts`)."""
        name = signal_label(signum)
        epoch = self._committed[0]
        if self.phase == "training":
            return (f"\n{job_prefix()}corral: {name}: stopping once epoch {epoch}'s update ends (an update is "
                    f"never left half done); {send_again(signum)} to stop now")
        saved = " and saved" if self.snapshot_dir is not None else ""
        return f"\n{job_prefix()}corral: {name}: stopping once epoch {epoch} is logged{saved}"

    def snapshot_path(self) -> Path | None:
        """The newest snapshot of this run (None when there is none)."""
        if self.snapshot_dir is None or self.snapshot_epoch is None:
            return None
        return self.snapshot_dir / f"epoch_{self.snapshot_epoch:06d}.pt"

    def saved_message(self) -> str | None:
        """After a failure: which epochs the newest snapshot holds and how to continue from it
        (``epochs 0-9 are saved: trainer.resume=<dir> continues from them``); None without one."""
        path = self.snapshot_path()
        if path is None or not path.is_file() or not self.snapshot_epoch:
            return None
        saved = self.snapshot_epoch
        return (f"{_epochs(0, saved - 1)} {'is' if saved == 1 else 'are'} saved: {shell_override('trainer.resume', self.log_dir)} "
                f"continues from {'it' if saved == 1 else 'them'}")

    def interrupt_message(self, terminated: bool = False) -> str:
        """The line printed when Ctrl-C or SIGTERM stops training: where it stopped and what a
        resume continues from."""
        by = " by SIGTERM" if terminated else ""
        done, steps = self._committed
        where = f"while {self.phase} epoch {done}" if self.phase not in ("idle", "committing") else f"after epoch {done - 1}"
        head = f"corral: interrupted{by} {where} ({steps:,} env steps)"
        if done == 0:
            return f"{head}; no epoch finished, so there is nothing to resume"
        if self.snapshot_dir is None:
            return f"{head}; this trainer has no snapshot directory, so there is nothing to resume"
        saved = self.snapshot_epoch
        if not saved:
            return (f"{head}; no snapshot was written yet (trainer.snapshot_every={self.config.snapshot_every}), "
                    "so there is nothing to resume")
        resume = f"resume with {shell_override('trainer.resume', self.log_dir)}"
        if saved == done:
            return f"{head}; {_epochs(0, done - 1)} {'is' if done == 1 else 'are'} saved (progress rows and snapshot); {resume}"
        return (f"{head}; progress rows hold {_epochs(0, done - 1)}, the last snapshot {_epochs(0, saved - 1)} "
                f"(trainer.snapshot_every={self.config.snapshot_every}); {resume}, which runs "
                f"{_epochs(saved, done - 1)} again and gets the same rows")

    def _run_epoch(self, batch_size: int) -> None:
        """One epoch: sample, train, evaluate when due, then commit (see the class docstring)."""
        assert self.algo is not None
        epoch = self.epoch
        t0 = time.perf_counter()
        self.phase = "sampling"
        episodes = self.algo.sample(epoch, batch_size)
        # An environment's bare `except:` may have swallowed a Ctrl-C's KeyboardInterrupt: stop anyway.
        self._signals.check()
        if isinstance(episodes, EpisodeBatch) and (bad := nonfinite_values(episodes)) is not None:
            raise EnvironmentValueError(
                f"the environment {self.env!r} returned values no algorithm can learn from ({bad}); the run "
                "stopped before training on them: check the environment, or wrap it to end an episode whose state "
                "blew up")
        t_sampled = time.perf_counter()
        if isinstance(episodes, EpisodeBatch):
            self._warn_overshoot(epoch, batch_size, episodes)
        # A second signal stops the update at once: an interrupted epoch is dropped anyway.
        with defer_interrupts(self._hold_notice, second_stops=True):
            self.phase = "training"
            schedule = getattr(self.algo, "set_training_progress", None)  # Algorithm's; a duck-typed one may lack it
            if callable(schedule):
                schedule(self.progress_done())
            train_stats = self._train(epoch, episodes)
            # Counted now (evaluation reads them); not committed until _commit, and put back on an interrupt.
            self.epoch = epoch + 1
            self.total_env_steps += len(episodes)
            if self.algo.sampler is not None:
                self._sampler_state = _try_state(self.algo.sampler)
        t_trained = time.perf_counter()
        stats: dict[str, float] = {"epoch": int(epoch), "env_steps": int(self.total_env_steps)}  # ints, as documented
        stats.update(episode_stats(episodes))
        stats.update({k: float(v) for k, v in (train_stats or {}).items()})
        self.last_video = None
        if self.config.eval_every and (self.epoch % self.config.eval_every == 0):
            self.phase = "evaluating"
            stats.update(self.evaluate(video=self._video_due()))
        t_end = time.perf_counter()
        stats["time/sample_s"] = t_sampled - t0
        stats["time/train_s"] = t_trained - t_sampled
        stats["time/epoch_s"] = t_end - t0
        stats["time/total_s"] = self.elapsed + (t_end - t0)
        # "steps/s" everywhere (console line, progress bar): this epoch's steps per second of wall time.
        stats["time/steps_per_s"] = len(episodes) / max(t_end - t0, 1e-9)
        stats["time/sample_steps_per_s"] = len(episodes) / max(t_sampled - t0, 1e-9)
        with defer_interrupts(self._hold_notice):
            self.phase = "committing"
            self._commit(epoch, t_end - t0, stats)
        self.phase = "idle"
        if self._progress is not None:
            self._progress.update(self.epoch, self.total_env_steps, stats)

    def _warn_overshoot(self, epoch: int, batch_size: int, episodes: EpisodeBatch) -> None:
        """Say once when an epoch collected more than twice ``trainer.batch_size`` (the batch size is a
        minimum, and a run whose epochs are 40 times larger should know why)."""
        n = len(episodes)
        if self._warned_overshoot or n <= 2 * batch_size or not len(episodes.lengths):
            return
        self._warned_overshoot = True
        factory = getattr(getattr(self.algo, "sampler", None), "worker_factory", None)
        fragments = getattr(getattr(factory, "worker_class", None), "returns_fragments", False) is True
        if np.all(episodes.complete) and not fragments:  # (fragments may happen to end with their episodes)
            why = (f"the workers return whole episodes (this epoch {len(episodes.lengths)}, up to "
                   f"{int(episodes.lengths.max()):,} steps long) and an epoch ends when the last one it started does; "
                   "raise trainer.batch_size, or run fewer environments at once (worker.n_envs, sampler.n_workers)")
        else:
            why = ("each worker returns a fragment of a fixed size per call (worker.timesteps_per_call steps per "
                   "environment), more than its share of the batch; raise trainer.batch_size, or lower "
                   "worker.timesteps_per_call (or worker.n_envs, sampler.n_workers)")
        logging.getLogger(__name__).warning("epoch %d collected %s environment steps for trainer.batch_size=%s (%.1fx): %s",
                                            epoch, f"{n:,}", f"{batch_size:,}", n / batch_size, why)

    def _train(self, epoch: int, episodes: EpisodeBatch) -> dict[str, float]:
        """The algorithm's ``train_once``, checked: an update that leaves a ``loss/*`` statistic or
        the policy's parameters NaN or infinite raises :class:`TrainingDivergedError` (one line),
        also when the algorithm then raised on its own NaNs (torch's ``found invalid values``)."""
        assert self.algo is not None
        try:
            stats = self.algo.train_once(epoch, episodes)
        except CorralError:
            raise
        except Exception as exc:
            if (bad := diverged_values(self.algo, {})) is not None:  # the error is the NaNs', not the cause
                raise TrainingDivergedError(self._diverged(
                    epoch, episodes, f"{bad} (the update then raised {type(exc).__name__} on them)")) from exc
            raise self._update_raised(epoch, exc) from exc
        if (bad := diverged_values(self.algo, stats or {})) is not None:
            raise TrainingDivergedError(self._diverged(epoch, episodes, bad))
        return stats

    def _algo_name(self) -> str:
        return str(getattr(getattr(self.run_config, "algo", None), "name", None) or type(self.algo).__name__)

    def _update_raised(self, epoch: int, exc: Exception) -> AlgorithmError:
        """The one line for an update that raised ``exc``, with the traceback from the update's call."""
        import traceback

        summary = " ".join(f"{type(exc).__name__}: {exc}".split())
        if len(summary) > 300:
            summary = summary[:297] + "..."
        if "overflow" in str(exc):  # torch: "value cannot be converted to type float without overflow"
            fix = ("a value in the update is beyond the range of the tensors' float type: a learning rate (or another "
                   "algo.* setting) too large; lower it")
        else:
            fix = "fix the algorithm, or the algo.* setting it raised on"
        return AlgorithmError(
            f"algo={self._algo_name()}'s update in epoch {epoch} raised {summary}; the run stopped before sampling with "
            f"it (epoch {epoch} is not part of the run): {fix}; the traceback above shows where it raised",
            algorithm_traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))

    def _diverged(self, epoch: int, episodes: EpisodeBatch, bad: str) -> str:
        name = self._algo_name()
        rewards = np.abs(np.asarray(episodes.rewards, dtype=np.float64)) if isinstance(episodes, EpisodeBatch) else None
        scale = f"; this batch's rewards reach {rewards.max():.3g}" if rewards is not None and rewards.size else ""
        return (f"algo={name}'s update in epoch {epoch} diverged: {bad}; the run stopped before sampling with it "
                f"(epoch {epoch} is not part of the run): lower the learning rate, scale the rewards "
                f"(normalize.reward=true{scale}) or clip the gradients, and start the run again")

    def _commit(self, epoch: int, seconds: float, stats: dict[str, float]) -> None:
        """Make epoch ``epoch`` part of the run: hooks, every logger's row, the snapshot when one
        is due. Called with interrupts held back, so it is done wholly or not at all: the run's
        totals (:attr:`elapsed`, :attr:`best_eval_return`, :attr:`last_stats`) count the epoch from
        here on (the hooks and the snapshot see them), and go back to the last committed epoch's
        when any part fails, as :meth:`train` puts the epoch and step counters back."""
        before = (self.elapsed, self.best_eval_return, self.last_stats, self.best_snapshot)
        try:
            self.elapsed += seconds
            new_best = "eval/return_mean" in stats and self.count_evaluation(stats["eval/return_mean"])
            self._epoch_end_hooks(epoch, stats)
            self.last_stats = stats
            if self._progress is not None:
                self._progress.clear()
            for logger in self.loggers:
                with self._writing(f"logger={_logger_name(logger)} could not write the row of epoch {epoch}"):
                    logger.log(epoch, stats)
                    if self.last_video is not None and callable(getattr(logger, "log_video", None)):
                        logger.log_video(epoch, self.last_video, stats)
            every = self.config.snapshot_every
            best = new_best and self.config.keep_best
            if self.snapshot_dir is not None and (best or (every and self.epoch % every == 0)):
                self.save_snapshot(best=best)
        except BaseException:
            # The epoch is not part of the run: neither its seconds nor its evaluation count (summary.json's
            # train_time_s and best_eval_return, and any later snapshot, hold the committed epochs only).
            self.elapsed, self.best_eval_return, self.last_stats, self.best_snapshot = before
            raise
        self._committed = (self.epoch, self.total_env_steps)

    def _restored_best(self, name: Any) -> str | None:
        """The best snapshot a restored state names, when it is in this run's snapshots (a branch
        may lack it: then None, with a note when ``trainer.keep_best`` would keep one)."""
        if not isinstance(name, str) or not name or self.snapshot_dir is None:
            return None
        if (self.snapshot_dir / name).is_file():
            pointer = self.snapshot_dir / BEST_POINTER
            with self._writing(f"could not write snapshots/{BEST_POINTER}"):  # OutputError: one line
                if not pointer.is_file() or pointer.read_text().strip() != name:  # a branch of the epoch it names
                    write_atomically(pointer, lambda f: f.write(name + "\n"), text=True)
            return name
        if self.config.keep_best:
            print(f"{job_prefix()}{_restored_best_note(name, self.snapshot_dir, self.best_eval_return)}",
                  file=sys.stderr, flush=True)
        return None

    def count_evaluation(self, return_mean: float) -> bool:
        """Count an evaluation's mean return in :attr:`best_eval_return`; True when it beats every
        earlier one (the first always does)."""
        best = self.best_eval_return
        self.best_eval_return = return_mean if best is None else max(best, return_mean)
        return best is None or return_mean > best

    def _epoch_end_hooks(self, epoch: int, stats: dict[str, float]) -> None:
        """The ``corral_epoch_end`` hooks of epoch ``epoch``. What each implementation added to (or
        changed in) ``stats`` is checked as soon as it returns, before the next one or any logger sees
        it: a statistic must be a number (:func:`statistic_value`; numpy's become Python's, so every
        logger records them alike). Anything else stops the run as a hook that raises does, with one
        line naming the plugin, the statistic and its type; the epoch is not part of the run."""
        from corral.framework.plugins import call_hook_checked, hook_result_error

        caller = self.hooks.corral_epoch_end
        seen = dict(stats)

        def check(plugin: str | None) -> None:
            for key, value in list(stats.items()):
                if key in seen and seen[key] is value:
                    continue
                number = statistic_value(value)
                if number is None:
                    kind = type(value)
                    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
                    shown = " ".join(repr(value).split())
                    shown = shown if len(shown) <= 60 else shown[:57] + "..."
                    raise hook_result_error(
                        caller, plugin, f"set the statistic {key} to {shown} (type {name})",
                        f"a statistic must be a number (int or float, numpy's too; not bool), so the run stopped before "
                        f"any logger wrote epoch {epoch}, which is not part of the run")
                stats[key] = seen[key] = number

        call_hook_checked(caller, check, trainer=self, epoch=epoch, stats=stats)

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """Turn an ``OSError`` of the block (a full disk, a permission), or one under a library's own
        error (:func:`os_error_in`), into one-line :class:`OutputError`: what could not be written,
        why, and how the run goes on."""
        try:
            yield
        except Exception as raised:
            exc = os_error_in(raised)  # torch.save gives a full disk as a RuntimeError raised while handling it
            if exc is None:
                raise
            why = exc.strerror or str(exc) or type(exc).__name__
            where = f": {exc.filename}" if exc.filename else ""
            fix = "fix that (space, permissions, the path) and"
            if self.snapshot_epoch and self.log_dir is not None:
                then = (f"{fix} continue from its last snapshot (epochs 0-{self.snapshot_epoch - 1}) with "
                        f"{shell_override('trainer.resume', self.log_dir)}")
            else:
                then = f"{fix} start the run again (it has no snapshot yet)"
            raise OutputError(f"{what} ({type(exc).__name__}: {why}{where}); the run stopped there; {then}") from exc

    def evaluate(self, video: bool = False) -> dict[str, float]:
        """Deterministic evaluation episodes with fixed seeds, through workers built like the run's
        own (:mod:`corral.framework.evaluation`), plus, when the algorithm has one, its
        ``meta_evaluate(env, seed=...)`` statistics (meta-RL: adaptation on held-out tasks).
        ``video``: also record the first evaluation episode to ``<run dir>/videos`` (``last_video``)."""
        assert self.algo is not None and self.env_spec is not None
        factory = run_worker_factory(self.algo, seed=self.seed, max_episode_length=self.env_spec.max_episode_length)
        try:
            stats = evaluate(self.algo.eval_policy, self.env, n_episodes=self.config.eval_episodes,
                             worker_factory=factory)
        except WorkerError as exc:  # its workers are not the sampler's: say which ones failed
            raise WorkerError(f"the evaluation after epoch {self.epoch - 1} (trainer.eval_every; its workers run in this "
                              f"process): {exc.message}", worker_number=exc.worker_number, exitcode=exc.exitcode,
                              remote_traceback=exc.remote_traceback) from exc
        if video and self.log_dir is not None:
            with self._writing(f"could not record the video of epoch {self.epoch}"):  # a full disk: one line
                self.last_video, _ = record_video(self.algo.eval_policy, self.env, factory, self.log_dir / "videos",
                                                  name_prefix=f"epoch_{self.epoch:06d}")
        meta_evaluate = getattr(self.algo, "meta_evaluate", None)
        if callable(meta_evaluate):
            stats.update(meta_evaluate(self.env, seed=self.seed))
        return stats

    def _video_due(self) -> bool:
        """True at every ``video_every``-th evaluation (counted from the epoch, so resume keeps the rhythm)."""
        every, eval_every = self.config.video_every, self.config.eval_every
        return bool(every and eval_every and (self.epoch // eval_every) % every == 0)

    def shutdown(self, *, quiet: bool = False) -> None:
        """Stop the sampler and close the loggers (idempotent). Every logger is closed; one that cannot
        write what it still held (a full disk) raises an :class:`OutputError` afterwards, unless
        ``quiet`` (the run is already stopping on an error of its own, which says what went wrong)."""
        if self.algo is not None and self.algo.sampler is not None:
            self.algo.sampler.shutdown_worker()
        failed: OutputError | None = None
        for logger in self.loggers:
            try:
                with self._writing(f"logger={_logger_name(logger)} could not write its last rows as it closed"):
                    logger.close()
            except OutputError as exc:
                logging.getLogger(__name__).debug("%s", exc)
                failed = failed or exc
        if failed is not None and not quiet:
            raise failed

    def __enter__(self) -> "Trainer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown(quiet=exc[0] is not None)  # leaving on an error: that error is the one to see

    # ------------------------------------------------------------------ snapshots
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs."""
        import torch

        assert self.algo is not None
        return {
            "format": SNAPSHOT_FORMAT,
            "epoch": self.epoch,
            "total_env_steps": self.total_env_steps,
            "elapsed": self.elapsed,
            "best_eval_return": self.best_eval_return,
            "best_snapshot": self.best_snapshot,
            "last_stats": self.last_stats,
            "algo": self.algo.state_dict(),
            "sampler": self._sampler_state,
            "rng": {
                "python": random.getstate(),
                "numpy": np.random.get_state(),
                "torch": torch.get_rng_state(),
            },
            "config": self.run_config_yaml(),
        }

    def run_config_yaml(self) -> str | None:
        """The composed run config as YAML (None in library use)."""
        if self.run_config is None:
            return None
        from omegaconf import OmegaConf

        return OmegaConf.to_yaml(self.run_config)

    def save_snapshot(self, *, best: bool = False) -> Path:
        """Write a snapshot atomically (temporary file, fsync, rename) and prune old ones. ``best``:
        it is the snapshot of the best evaluation so far, which ``snapshots/best`` names and pruning
        keeps (``trainer.keep_best``)."""
        directory = self.snapshot_dir
        if directory is None:
            raise SnapshotError("this trainer has no snapshot_dir")
        path = directory / f"epoch_{self.epoch:06d}.pt"
        before = self.best_snapshot
        if best:
            self.best_snapshot = path.name  # the snapshot records that it is the best one
        try:
            with self._writing(f"could not write the snapshot {path.name}"):  # OutputError: one line
                directory.mkdir(parents=True, exist_ok=True)
                save_snapshot(self.state_dict(), path)  # data only; objects beside it (corral.framework.snapshot)
                write_atomically(directory / "latest", lambda f: f.write(path.name + "\n"), text=True)
                if best:
                    write_atomically(directory / BEST_POINTER, lambda f: f.write(path.name + "\n"), text=True)
        except BaseException:
            self.best_snapshot = before
            raise
        self.snapshot_epoch = self.epoch
        keep = self.config.keep_snapshots
        if keep:
            for old in sorted(directory.glob("epoch_*.pt"))[:-keep]:
                if old.name != self.best_snapshot:
                    remove_snapshot(old)
        return path

    def restore(self, source: str | os.PathLike) -> Path:
        """Load the latest snapshot of a run directory (or a snapshot file) into this trainer."""
        import torch

        assert self.algo is not None
        path = find_snapshot(source)
        state = load_snapshot(path, trust=self.config.trust_snapshot)  # no code runs unless trusted
        if state.get("format") != SNAPSHOT_FORMAT:
            raise SnapshotError(f"{path} has snapshot format {state.get('format')}, expected {SNAPSHOT_FORMAT}")
        self.algo.load_state_dict(state["algo"])
        self.epoch = int(state["epoch"])
        self.total_env_steps = int(state["total_env_steps"])
        self.elapsed = float(state["elapsed"])
        self.best_eval_return = state.get("best_eval_return")
        self.best_snapshot = self._restored_best(state.get("best_snapshot"))
        self.last_stats = dict(state.get("last_stats") or {})
        if state.get("sampler") is not None and self.algo.sampler is not None:
            try:
                self.algo.sampler.load_state_dict(state["sampler"])
                self._sampler_state = state["sampler"]
            except NotImplementedError:  # e.g. resumed under sampler=action_server, which keeps no such state
                print(f"corral: note: {type(self.algo.sampler).__name__} cannot restore the workers' sampling state "
                      "of this snapshot; the resumed episodes are correct but not the ones the original sampler "
                      "would have drawn", file=sys.stderr, flush=True)
        rng = state["rng"]
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        torch.set_rng_state(rng["torch"])
        self.snapshot_epoch = self.resumed_epoch = self.epoch
        self._restored = True
        for logger in self.loggers:  # drop rows of epochs this run will run again (see Logger.resume)
            with self._writing(f"logger={_logger_name(logger)} could not rewrite its rows for the resume"):
                getattr(logger, "resume", lambda *a: None)(self.epoch, self.total_env_steps)
        print(f"{job_prefix()}corral: resumed from {path} at epoch {self.epoch} ({self.total_env_steps:,} env steps)",
              file=sys.stderr, flush=True)
        return path


def _restored_best_note(name: str, directory: Path | None, best: float | None) -> str:
    """The note for a resumed run whose snapshot names a best snapshot that this run's directory lacks."""
    above = f" above {best:.2f}" if best is not None else ""
    return (f"corral: note: the best snapshot as of the resumed epoch ({name}) is not in {directory} (a branch "
            f"keeps it only while the original run's best came no later); this run's next evaluation{above} "
            "writes its best snapshot")


def _logger_name(logger: Any) -> str:
    """The logger's option name (``tensorboard``), or its class name in library use."""
    return str(getattr(logger, "option_name", None) or type(logger).__name__)


def _epochs(first: int, last: int) -> str:
    """``epoch 3`` or ``epochs 0-2``."""
    return f"epoch {first}" if first == last else f"epochs {first}-{last}"


def find_snapshot(source: str | os.PathLike) -> Path:
    """Resolve a run directory, a snapshot directory, a snapshot file or a pointer file
    (``snapshots/latest``, ``snapshots/best``) to the snapshot to load."""
    p = Path(source).expanduser()
    if p.is_file() and p.name in POINTERS:  # snapshots/latest or snapshots/best: the snapshot it names
        named = p.parent / p.read_text().strip()
        if named.is_file():
            return named
        raise SnapshotError(f"{p} names {named.name}, which is not in {p.parent}; give a snapshot file or the run "
                            "directory")
    if p.is_file():
        return p
    if not p.exists():
        raise SnapshotError(f"{p} does not exist; check trainer.resume (a run directory, the one with snapshots/, or a "
                            "snapshot file)")
    for d in (p / "snapshots", p):
        latest = d / "latest"
        if latest.is_file():
            candidate = d / latest.read_text().strip()
            if candidate.is_file():
                return candidate
        found = sorted(d.glob("epoch_*.pt")) if d.is_dir() else []
        if found:
            return found[-1]
    raise SnapshotError(f"no snapshot found in {p} (expected {p}/snapshots/epoch_*.pt){runs_inside(p)}; check "
                        "trainer.resume")


def runs_inside(directory: Path) -> str:
    """For a directory that holds runs rather than being one (a sweep directory, ``outputs/<date>``):
    ``"; it holds runs: <dir>/0, <dir>/1, ... (give one of them)"``, else ``""``."""
    if not directory.is_dir():
        return ""
    runs = sorted((d for d in directory.iterdir() if d.is_dir() and (d / "snapshots").is_dir()),
                  key=lambda d: (not d.name.isdigit(), int(d.name) if d.name.isdigit() else 0, d.name))
    if not runs:
        return ""
    shown = ", ".join(str(d) for d in runs[:3]) + (", ..." if len(runs) > 3 else "")
    return f"; it holds runs: {shown} (give one of them)"


def episode_stats(episodes: EpisodeBatch) -> dict[str, float]:
    """Return and length statistics of the episodes that end in a batch.

    A fragment that continues an episode from an earlier batch counts with its episode's whole
    return and length when the worker records ``episode_infos["prior_return"]`` and
    ``["prior_length"]`` (the ``fragment`` worker does); without them it is left out.
    """
    complete = episodes.complete
    returns = episodes.episode_returns
    lengths = episodes.lengths
    infos = episodes.episode_infos
    if "prior_return" in infos and "prior_length" in infos:
        returns = returns + infos["prior_return"]
        lengths = lengths + infos["prior_length"]
    elif episodes.n_episodes:
        complete = complete & ((episodes.step_types[episodes.starts] != StepType.MID) | (episodes.lengths == 1))
    returns = returns[complete]
    lengths = lengths[complete]
    if not len(returns):
        return {"train/n_episodes": 0.0}
    return {
        "train/return_mean": float(returns.mean()),
        "train/return_min": float(returns.min()),
        "train/return_max": float(returns.max()),
        "train/episode_length": float(lengths.mean()),
        "train/n_episodes": float(len(returns)),
    }


def diverged_values(algo: Algorithm, stats: dict[str, float]) -> str | None:
    """What an update left NaN or infinite: its ``loss/*`` statistics and the parameters of its
    policy (``get_param_values``), e.g. ``loss/value = nan; the policy's parameters: NaN in 130 of
    4,610``; None when every one is finite. Other statistics may be NaN on purpose (an explained
    variance of constant returns)."""
    problems = [f"{k} = {v}" for k, v in stats.items()
                if k.startswith("loss/") and isinstance(v, (int, float)) and not np.isfinite(v)]
    policy = getattr(algo, "policy", None)
    try:
        params = policy.get_param_values() if policy is not None else {}
    except Exception:  # noqa: BLE001 - a policy that cannot export its parameters is checked by its losses
        params = {}
    total = nan = inf = 0
    first = None
    for key, value in (params or {}).items():
        try:
            array = np.asarray(value)
        except Exception:  # noqa: BLE001 - not numpy-convertible (the contract says numpy): not checked
            continue
        if not np.issubdtype(array.dtype, np.floating):
            continue
        total += array.size
        n_nan, n_inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
        if (n_nan or n_inf) and first is None:
            first = key
        nan, inf = nan + n_nan, inf + n_inf
    if nan or inf:
        kinds = " and ".join(f"{what} in {n:,}" for what, n in (("NaN", nan), ("inf", inf)) if n)
        problems.append(f"the policy's parameters: {kinds} of {total:,} (first in {first})")
    return "; ".join(problems) or None


def statistic_value(value: Any) -> int | float | None:
    """``value`` as a statistic every logger records alike: an ``int`` or a ``float`` as it is, a
    numpy (or other real) number as Python's ``int`` or ``float``; None for anything else (a string,
    a bool, a tensor, an array, None), which a logger would refuse or write as text."""
    import numbers

    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _try_state(sampler: Any) -> Any:
    try:
        return sampler.state_dict()
    except NotImplementedError:
        return None


__all__ = [
    "BEST_POINTER", "PHASES", "POINTERS", "StopRequest", "Terminated", "finish_epoch_on_interrupt", "Trainer", "TrainerConfig", "TrainingInterrupted", "defer_interrupts", "episode_stats",
    "diverged_values", "find_snapshot", "catch_stop_signals", "statistic_value",
]
