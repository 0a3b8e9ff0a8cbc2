"""Hydra's joblib launcher, with its settings checked before the sweep starts and each job in a worker
process of its own (``hydra/launcher=joblib``; settings in corral/conf/hydra/launcher/joblib.yaml).

Settings: the launcher uses ``n_jobs``, ``timeout``, ``verbose`` and its own ``cancel_grace_s``, and runs
the jobs in loky worker processes whatever ``backend`` says; hydra-joblib-launcher handed the others to
``joblib.Parallel``, which the launcher does not use: ``n_jobs=0`` was joblib's traceback, and ``backend=threading``,
``prefer=threads``, ``batch_size=4`` or ``pre_dispatch=1`` ran the jobs as before without a word.
:meth:`CorralJoblibLauncher.check_config` refuses such a setting (:data:`UNUSED`: one that differs
from the preset's value) in one line before any job (``corral.framework.precheck.check_sweep_plugins``
calls it).

Launch: ``joblib.Parallel`` runs the jobs in one pool of loky worker processes, and a pool whose
process dies (the out-of-memory killer's SIGKILL, a crash in native code, an ``os._exit()``) is
broken: loky kills the pool's other processes, so the jobs running beside the dead one stopped
mid-training too, the jobs not started never ran, and the sweep ended with joblib's
``TerminatedWorkerError`` traceback. With ``n_jobs=1`` joblib ran the jobs in the sweep's own
process, where such a death ended the sweep. :meth:`CorralJoblibLauncher.launch` runs each job
with Hydra's ``execute_job`` (as hydra-joblib-launcher does) in one of ``n_jobs`` *slots*: a loky
executor with a single worker process, that runs one job after another and is replaced when its
process dies. A death ends only the job that ran there (:func:`died`, with
:mod:`corral.launchers.job_death`, which every corral launcher shares): its ``[job N] corral: error:``
line says how the process ended and what to do, its directory gets a ``summary.json`` with
``status: failed``, and the sweep goes on with the other jobs and ends as a sweep with a failed job
does (:class:`~corral.framework.entry.SweepJobFailed`'s line, exit status 1). ``hydra.launcher.timeout``
is per job the same way, and the others go on: a job past it is sent SIGTERM, as a user's ``kill`` does,
so its trainer keeps or drops the epoch in progress, writes its snapshot and a ``summary.json`` with
``status: interrupted``; its line says it stopped at the timeout and how to resume it. A job still
running ``hydra.launcher.cancel_grace_s`` seconds (:data:`CANCEL_GRACE_S`) after that (code in it that
handles SIGTERM without stopping, such as an environment's own handler) is killed (SIGKILL) and failed, its line saying so and how to
resume it from its latest snapshot; one whose process ended on the SIGTERM by itself is failed with a
line saying that.

What a dead job's process leaves: the processes it started outlive it (the kernel hands them to
init), and one that does not watch its parent (a simulator server an environment started, a process
stuck in native code) ran on after the sweep. Each slot's process carries a mark in its environment
that every process it starts inherits (:data:`corral.launchers.job_processes.MARK_VAR`); when a slot
is closed (its process died, was killed past the timeout or by Ctrl-C, or is no longer needed) the
processes still carrying its mark are ended and the ``/dev/shm`` segments of the dead job's processes
removed (:func:`corral.launchers.job_processes.end_leftovers`), before the job's line is printed.
A job's process also gets the platform's ``multiprocessing`` start method, not loky's, so the worker
processes of ``sampler=multiprocessing`` start in a job as they do in a run of its own
(:func:`corral.launchers.job_processes.run_in_job_process`).

Ctrl-C (and a job stopped by Ctrl-C or SIGTERM) stops the whole sweep, as it did: the running jobs,
which a terminal's Ctrl-C reaches too, get ``hydra.launcher.cancel_grace_s`` seconds to write their
snapshot and summary (30 s by default: an epoch that took longer to finish than the 3 s they had before was
lost), then their processes are killed. SIGTERM to the sweep's process takes the same path: ``kill``,
systemd or a supervisor sends it to that process alone, which died of it at once and left its jobs
training, orphaned, and loky's processes and semaphores (``/dev/shm/sem.loky-*``) behind. The launcher
passes it on to each running job's process, so each job stops as the trainer does on SIGTERM (its
epoch kept or dropped, its snapshot and ``summary.json``: interrupted), gives them the same grace, kills
what is left and shuts loky's processes down; the sweep then ends with its interrupted line. A job killed
after its grace (after Ctrl-C's too) is not lost in silence: it had no line and no
``summary.json``; now :func:`corral.launchers.job_death.killed` prints its line (the job, its directory, what
its latest snapshot holds) and writes its ``summary.json`` with ``status: killed``. A scheduler that
sends SIGTERM to every process (``kill -TERM -<pgid>``) reaches the jobs itself
too: the trainer takes the launcher's copy, within a second of its own, as the same signal
(:data:`corral.framework.interrupts.SAME_SIGTERM_WINDOW_S`), not as a second one that stops at once.

Kept import-light: Hydra imports every module under ``hydra_plugins`` when it scans for plugins
(loky, Hydra's launch helpers and corral's framework are imported when a sweep is launched).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Sequence

from corral.framework.checks import check_minimums
from corral.framework.errors import ConfigError
from corral.launchers.job_death import JobProcessDied
from corral.launchers.settings_schema import extended, storing_plugin

log = logging.getLogger(__name__)

try:
    from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher

    INSTALLED = True
except ImportError:  # hydra-joblib-launcher not installed: the preset says what to install
    INSTALLED = False

    class JoblibLauncher:  # type: ignore[no-redef]
        """Stand-in that explains what is missing."""

        def __init__(self, **params: Any) -> None:
            raise ImportError("hydra/launcher=joblib needs hydra-joblib-launcher: pip install 'corral[sweep]' "
                              "(or pip install hydra-joblib-launcher)")

#: The backend hydra-joblib-launcher always runs the jobs with (it sets it over the preset's).
BACKEND = "loky"
#: ``joblib.Parallel``'s settings that the launcher does not use (it hands each job to a worker process of
#: its own, one job at a time, and passes no arrays), with the preset's value of each and what it does in
#: joblib: another value is refused (:meth:`CorralJoblibLauncher.check_config`).
UNUSED: dict[str, tuple[str | None, str]] = {
    "pre_dispatch": ("2*n_jobs", "how many jobs joblib queues ahead for its workers"),
    "batch_size": ("1", "how many jobs joblib hands a worker at once"),
    "temp_folder": (None, "where joblib memory-maps large numpy arguments"),
    "max_nbytes": (None, "the size above which joblib memory-maps a numpy argument"),
    "mmap_mode": ("r", "how joblib opens the numpy arguments it memory-mapped"),
}
#: Seconds between the sweep's looks at its running jobs (for ``hydra.launcher.timeout``); a job that
#: ends or dies is seen at once.
POLL_S = 1.0
#: The default of ``hydra.launcher.cancel_grace_s`` (as ``hydra/launcher=ray``'s): seconds a running job gets
#: to save its snapshot and summary and stop, after Ctrl-C (which a terminal sends the jobs too), after a
#: SIGTERM to the sweep's process (which the launcher passes on to them) and after the SIGTERM the launcher
#: sends a job past ``hydra.launcher.timeout``, before its process is killed (SLURM's KillWait default is the
#: same). A further Ctrl-C or SIGTERM to the sweep's process kills them at once (a scheduler's copy of the
#: same SIGTERM does not).
CANCEL_GRACE_S = 30.0


def _settings_schema() -> Any:
    """hydra-joblib-launcher's settings schema (``JobLibLauncherConf``) with this launcher's ``_target_`` and
    its own setting, ``cancel_grace_s`` (None without hydra-joblib-launcher)."""
    if not INSTALLED:
        return None
    from hydra_plugins.hydra_joblib_launcher.config import JobLibLauncherConf

    return extended(JobLibLauncherConf, "CorralJobLibLauncherConf", __name__,
                    [("_target_", str, f"{__name__}.CorralJoblibLauncher"), ("cancel_grace_s", float, CANCEL_GRACE_S)])


#: The schema Hydra merges ``hydra/launcher=joblib`` (corral/conf/hydra/launcher/joblib.yaml) with.
CorralJobLibLauncherConf = _settings_schema()
#: Stores :data:`CorralJobLibLauncherConf` over hydra-joblib-launcher's schema once Hydra has scanned its plugins.
JoblibSettingsSchema = storing_plugin("JoblibSettingsSchema", __name__, "joblib", CorralJobLibLauncherConf)


class CorralJoblibLauncher(JoblibLauncher):
    """``hydra/launcher=joblib``: each job in a loky worker process; a process that dies fails only its
    own job. :meth:`check_config` before the sweep."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._slots: list[Slot] = []

    @classmethod
    def check_config(cls, cfg: Any, overrides: Sequence[str] = ()) -> None:
        """Raise a one-line :class:`ConfigError` for a setting joblib would refuse once the jobs are
        launched, or one the launcher would ignore (``backend``, ``prefer``, ``require``, and a value of
        :data:`UNUSED`'s settings other than the preset's)."""
        if not INSTALLED:
            raise ConfigError("hydra/launcher=joblib needs hydra-joblib-launcher: pip install 'corral[sweep]'")
        n_jobs = cfg.get("n_jobs")
        if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0:
            raise ConfigError(f"hydra.launcher.n_jobs must be a whole number other than 0 (the jobs run at once; -1: "
                              f"one per CPU core), got {n_jobs!r}")
        fixed = {"backend": ((None, BACKEND), f"the launcher always runs the jobs in {BACKEND} worker processes, so "
                                              "it would not change how the sweep runs; leave it out"),
                 "prefer": (("processes",), f"joblib ignores prefer when the backend is given (the launcher gives "
                                            f"{BACKEND}), so it would not change how the sweep runs; leave it out"),
                 "require": ((None,), f"the launcher's {BACKEND} worker processes share no memory; leave it out")}
        for key, (allowed, why) in fixed.items():
            if key in cfg and cfg.get(key) not in allowed:
                raise ConfigError(f"hydra.launcher.{key}={cfg.get(key)}: {why}")
        check_minimums(cfg, "hydra.launcher", {"verbose": 0})
        timeout = cfg.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise ConfigError(f"hydra.launcher.timeout must be > 0 seconds or null (no limit), got {timeout!r}")
        grace = cfg.get("cancel_grace_s", CANCEL_GRACE_S)
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace < 0:
            raise ConfigError(f"hydra.launcher.cancel_grace_s must be >= 0 seconds (how long a job stopped by Ctrl-C, "
                              f"SIGTERM or its timeout gets to save before it is killed), got {grace!r}")
        for key, (preset, what) in UNUSED.items():
            value = cfg.get(key, preset)
            if (value is None) != (preset is None) or (value is not None and str(value) != preset):
                jobs = " (hydra.launcher.n_jobs sets how many jobs run at once)" if key in ("pre_dispatch",
                                                                                          "batch_size") else ""
                raise ConfigError(f"hydra.launcher.{key}={value}: the launcher runs each job in a worker process of its "
                                  f"own, handed one job at a time, and does not use joblib's {key} ({what}), so it "
                                  f"would not change how the sweep runs; leave it out{jobs}")

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[Any]:
        """Run the jobs, at most ``n_jobs`` at once, each in a worker process of its slot; return their
        ``JobReturn``s in job order (a job whose process died: a failed one, see :func:`died`)."""
        from hydra.core.singleton import Singleton
        from hydra.core.utils import JobReturn, configure_log, filter_overrides, setup_globals
        from joblib.externals.loky import FIRST_COMPLETED, wait

        from corral.framework.interrupts import Terminated, catch_stop_signals, hold_while_stopping, stopping_notice
        from corral.framework.sweep_jobs import note_sweep_dir
        from corral.launchers.job_processes import run_in_job_process
        from hydra_plugins.hydra_joblib_launcher._core import execute_job

        setup_globals()
        assert self.config is not None and self.task_function is not None and self.hydra_context is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        note_sweep_dir(self.config.hydra.sweep.dir, self.config.hydra.runtime.get("cwd"))  # Ctrl-C's line names it
        settings = dict(self.joblib)  # of which n_jobs, timeout and verbose are used (check_config: UNUSED)
        n_slots = max(1, min(workers(int(settings.get("n_jobs") or -1)), len(job_overrides)))
        # hydra-joblib-launcher's lines, as it logs them, with the settings that apply
        log.info("Joblib.Parallel(n_jobs=%s,timeout=%s) is launching %d jobs, each in a %s worker process of its "
                 "own", settings.get("n_jobs"), settings.get("timeout"), len(job_overrides), BACKEND)
        log.info("Launching jobs, sweep output dir : %s", sweep_dir)
        for idx, overrides in enumerate(job_overrides):
            log.info("\t#%d : %s", initial_job_idx + idx, " ".join(filter_overrides(overrides)))

        timeout = settings.get("timeout")
        grace_s = float(settings.get("cancel_grace_s", CANCEL_GRACE_S))
        verbose = int(settings.get("verbose") or 0)
        state = Singleton.get_state()
        queue = deque((initial_job_idx + i, [str(o) for o in overrides]) for i, overrides in enumerate(job_overrides))
        # The slots (and their worker processes) of an earlier launch of this sweep (a sweeper's earlier
        # batch, such as Optuna's) run this one's jobs too, as joblib's reusable pool did; loky shuts them
        # down when the sweep's process exits.
        env = worker_env(n_slots)
        for extra in self._slots[n_slots:]:
            extra.close()
        slots = self._slots = self._slots[:n_slots] + [Slot(env) for _ in range(n_slots - len(self._slots))]
        free = list(reversed(slots))
        running: dict[Any, Job] = {}
        results: dict[int, Any] = {}
        try:
            with catch_stop_signals():  # SIGTERM to this process: Terminated, Ctrl-C's path (module docstring)
                while queue or running:
                    while queue and free:
                        num, overrides = queue.popleft()
                        slot = free.pop()
                        future = slot.submit(run_in_job_process, execute_job, num, overrides, self.hydra_context,
                                             self.config, self.task_function, state)
                        running[future] = Job(num, overrides, slot, slot.process(), time.time(), time.monotonic())
                    done, _ = wait(list(running), timeout=POLL_S, return_when=FIRST_COMPLETED)
                    for future in done:
                        job = running.pop(future)
                        results[job.num] = self._result(future, job)
                        free.append(job.slot)
                        if verbose:
                            log.info("job #%d ended (%d of %d)", job.num, len(results), len(job_overrides))
                    for future, job in list(running.items()):
                        if not timeout or future.done():
                            continue
                        now = time.monotonic()
                        if job.timed_out is None and now - job.t0 > float(timeout):
                            job.timed_out = float(timeout)
                            job.stop_t0 = now
                            stop(job.process)  # the trainer stops as on a user's SIGTERM
                        if job.timed_out is not None and now - job.stop_t0 >= grace_s and not future.done():
                            job.slot.close(kill=True)  # still running after its grace: killed
                            running.pop(future)
                            results[job.num] = self._died(job, timeout=float(timeout), grace=grace_s)
                            free.append(job.slot)
        except BaseException as exc:
            left: list[Job] = []  # the jobs still running after their grace: killed, each said and recorded
            cut_short, grace = False, 0.0
            stop_by = ("the sweep's SIGTERM" if isinstance(exc, Terminated) else "the sweep's Ctrl-C"
                       if isinstance(exc, KeyboardInterrupt) else "the stop of the sweep (a job stopped by Ctrl-C or "
                       "SIGTERM)")
            if running and isinstance(exc, (KeyboardInterrupt, SystemExit)):
                terminated = isinstance(exc, Terminated)
                if terminated:  # sent to this process alone, or to all (then the trainer drops this copy)
                    for job in running.values():
                        stop(job.process)
                grace = grace_s
                cut_short = True
                with contextlib.suppress(KeyboardInterrupt), catch_stop_signals():  # again: kill them now
                    wait(list(running), timeout=grace)
                    cut_short = False
                left = [job for future, job in running.items() if not future.done()]
            with hold_while_stopping(stopping_notice):  # one more signal is said and dropped: loky's processes go
                for slot in slots:
                    slot.close(kill=True)
                for job in left:  # never silently: its line, and a summary.json that says it was killed
                    self._killed(job, stop_by, grace, cut_short)
            raise
        returns = [results[initial_job_idx + i] for i in range(len(job_overrides))]
        assert all(isinstance(ret, JobReturn) for ret in returns)
        return returns

    def _result(self, future: Any, job: Job) -> Any:
        """The ``JobReturn`` of a job whose future is done: its own; a failed one when its process died,
        or when Hydra's ``execute_job`` raised around the job. An interrupt (a job stopped by Ctrl-C or
        SIGTERM exits with SystemExit) is raised: it stops the sweep; unless the launcher sent the SIGTERM
        itself, past ``hydra.launcher.timeout``: then the job's line says so (:func:`died` with
        ``stopped``), and its process is replaced (with what it left ended)."""
        from hydra.core.utils import JobReturn, JobStatus
        from joblib.externals.loky import BrokenProcessPool
        from joblib.externals.loky.process_executor import TerminatedWorkerError

        try:
            result = future.result()
        except TerminatedWorkerError as exc:  # its process died: the slot gets a new one
            job.slot.close()
            job.said = str(exc)
            return self._died(job, timeout=job.timed_out)
        except (KeyboardInterrupt, SystemExit):
            if job.timed_out is None:
                raise
            job.slot.close(kill=True)  # the SIGTERM was the launcher's: only this job stopped
            return self._died(job, timeout=job.timed_out, stopped=True)
        except Exception as exc:  # noqa: BLE001 - any other error is this job's, as a failed job
            if isinstance(exc, BrokenProcessPool):  # its result could not be read back: a new process too
                job.slot.close()
            if job.timed_out is not None:
                job.slot.close(kill=True)
            return JobReturn(overrides=job.overrides, status=JobStatus.FAILED, _return_value=exc)
        if job.timed_out is not None:  # it ended on its own after the SIGTERM: its own result
            job.slot.close(kill=True)
        return result

    def _killed(self, job: Job, stop: str, grace: float, cut_short: bool) -> None:
        """Say and record a job whose process was killed because it had not stopped ``grace`` seconds after
        ``stop`` (what stopped the sweep, in words; ``cut_short``: a further signal ended the grace early), with
        :func:`corral.launchers.job_death.killed`; a failure to say it is a warning, never a traceback instead
        of the sweep's line."""
        from corral.launchers.job_death import job_config, killed

        assert self.config is not None and self.hydra_context is not None
        try:
            cfg = job_config(self.hydra_context, self.config, job.overrides, job.num)
            killed(cfg, overrides=job.overrides, started=job.started, pid=getattr(job.process, "pid", None),
                   stop=stop, grace=grace, cut_short=cut_short)
        except Exception as exc:  # noqa: BLE001 - the sweep's own line still comes
            print(f"corral: warning: job {job.num} ({' '.join(job.overrides)}) was killed with SIGKILL after the "
                  f"sweep was stopped, and could not be recorded ({type(exc).__name__}: {exc})", file=sys.stderr,
                  flush=True)

    def _died(self, job: Job, timeout: float | None = None, stopped: bool = False, grace: float | None = None) -> Any:
        """The failed ``JobReturn`` of a job whose process died (after the launcher's SIGTERM past
        ``timeout``; with ``stopped``: the job stopped on it, as on a user's SIGTERM; with ``grace``: killed
        ``grace`` seconds after it)."""
        from corral.launchers.job_death import failed_return, job_config

        assert self.config is not None and self.hydra_context is not None
        cfg = job_config(self.hydra_context, self.config, job.overrides, job.num)
        return failed_return(cfg, job.overrides, died(cfg, job, timeout, stopped=stopped, grace=grace))


def workers(n_jobs: int) -> int:
    """How many jobs run at once for ``hydra.launcher.n_jobs`` (joblib's reading: -1 one per CPU
    core, -2 all cores but one, ...)."""
    from joblib.externals.loky import cpu_count

    return n_jobs if n_jobs > 0 else max(cpu_count() + 1 + n_jobs, 1)


def stop(process: Any) -> None:
    """Send SIGTERM to a job's process (a ``multiprocessing`` process; nothing when it is gone)."""
    import os

    pid = getattr(process, "pid", None)
    if pid is not None and getattr(process, "exitcode", None) is None:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:  # gone meanwhile: its slot sees it
            pass


def worker_env(n_slots: int) -> dict[str, str]:
    """The environment variables joblib gives its loky workers: the thread pools of OpenMP, MKL,
    OpenBLAS, ... sized to share the CPU cores among ``n_slots`` jobs."""
    try:
        from joblib._parallel_backends import LokyBackend

        return {str(k): str(v) for k, v in LokyBackend()._prepare_worker_env(n_jobs=n_slots).items()}
    except Exception:  # noqa: BLE001 - another joblib: the libraries' own defaults
        return {}


class Slot:
    """One of the places a job runs in: a loky executor with a single worker process that runs one job
    after another. When the process dies, the executor is broken and replaced by a new one, so a death
    ends only the job that ran there (the executor of ``joblib.Parallel`` kills all its processes).
    Each executor's process has a mark of its own in its environment (``mark``), which the processes it
    starts inherit: what is left of them is ended when the slot is closed (:meth:`close`)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.executor: Any = None
        self.mark = ""
        self.pids: set[int] = set()  # the executor's processes that ran a job

    def submit(self, fn: Any, *args: Any) -> Any:
        """Start ``fn(*args)`` in this slot's process (a new one when it has none, or it died while idle)."""
        from joblib.externals.loky import BrokenProcessPool, ProcessPoolExecutor

        from corral.launchers.job_processes import MARK_VAR, new_mark

        for attempt in range(2):
            if self.executor is None:
                self.mark, self.pids = new_mark(), set()
                self.executor = ProcessPoolExecutor(max_workers=1, env={**self.env, MARK_VAR: self.mark})
            try:
                future = self.executor.submit(fn, *args)
                process = self.process()
                if process is not None and process.pid is not None:
                    self.pids.add(process.pid)
                return future
            except BrokenProcessPool:  # its process died between two jobs: no job was lost, a new one
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def process(self) -> Any:
        """The process running this slot's job now (a ``multiprocessing`` process; None if unknown)."""
        processes = getattr(self.executor, "_processes", None) or {}
        return next(iter(list(processes.values())), None)

    def close(self, kill: bool = False) -> None:
        """Shut the executor down (``kill``: its process with SIGKILL, a job in it too), then end what
        its process left running: the processes with its mark, and the ``/dev/shm`` segments of the
        processes that ran its jobs (:func:`~corral.launchers.job_processes.end_leftovers`). The next
        job gets a new executor."""
        from corral.launchers.job_processes import MARK_VAR, end_leftovers

        executor, self.executor = self.executor, None
        if executor is not None:
            pids = self.pids | {process.pid for process in list((getattr(executor, "_processes", None) or {}).values())
                                if process.pid is not None}
            executor.shutdown(wait=True, kill_workers=kill)
            end_leftovers({MARK_VAR: self.mark}, pids)


class Job:
    """A job running in a slot: its number, overrides and slot, the process it runs in, and when it started
    (``started``: epoch seconds; ``t0``: monotonic); ``said``: loky's message when its process died;
    ``timed_out``: the timeout it ran past (None: not past it), and ``stop_t0`` when it was sent SIGTERM. A
    plain class: Hydra's plugin scan loads this module without registering it, which ``@dataclass`` needs."""

    def __init__(self, num: int, overrides: list[str], slot: Slot, process: Any, started: float, t0: float) -> None:
        self.num, self.overrides, self.slot, self.process, self.started, self.t0 = (num, overrides, slot, process,
                                                                                    started, t0)
        self.said = ""
        self.timed_out: float | None = None
        self.stop_t0 = 0.0


def died(cfg: Any, job: Job, timeout: float | None = None, stopped: bool = False,
         grace: float | None = None) -> BaseException:
    """A job's process died (after the launcher's SIGTERM past ``timeout``; ``stopped``: the job stopped on
    it; ``grace``: killed ``grace`` seconds after it): its line, its failed ``summary.json`` (a stopped
    job's own one stays) and the error the sweep ends with (:func:`corral.launchers.job_death.died`), from
    how its loky process ended."""
    from corral.launchers.job_death import died as job_died

    code = None if stopped or grace is not None else exit_code(job.process, job.said)
    return job_died(cfg, overrides=job.overrides, started=job.started, code=code,
                    pid=getattr(job.process, "pid", "?"), timeout=timeout, stopped=stopped, grace=grace,
                    fewer="run fewer jobs at once (hydra.launcher.n_jobs)")


def exit_code(process: Any, said: str = "") -> int | None:
    """The exit code of a job's process once it has ended (negative: the signal that killed it); when
    the process cannot say (loky started another one for the job: a worker it restarts, with psutil,
    when its memory grew), the one in loky's message ``said`` (``... {SIGKILL(-9)} ...``)."""
    import re

    code = None
    deadline = time.monotonic() + 2.0
    while process is not None:
        code = process.exitcode  # None while another thread is still reaping it
        if code is not None or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if isinstance(code, int) and code != 0:
        return code
    found = re.search(r"\{\w+\((-?\d+)\)\}", said)
    return int(found.group(1)) if found else code if isinstance(code, int) else None


__all__ = ["BACKEND", "CANCEL_GRACE_S", "UNUSED", "CorralJobLibLauncherConf", "CorralJoblibLauncher", "JobProcessDied",
           "JoblibSettingsSchema", "Slot", "died", "exit_code", "stop", "workers"]
