"""Hydra's joblib launcher, with its settings checked before the sweep starts and each job in a worker
process of its own (``hydra/launcher=joblib``; settings in corral/conf/hydra/launcher/joblib.yaml).

Settings: hydra-joblib-launcher hands them to ``joblib.Parallel`` once the jobs are launched, and
always with ``backend=loky``: ``n_jobs=0`` was joblib's traceback, and ``backend=threading`` or
``prefer=threads`` ran the jobs in loky processes without a word. :meth:`CorralJoblibLauncher.check_config`
refuses such a setting in one line before any job (``corral.framework.precheck.check_sweep_plugins``
calls it).

Launch: ``joblib.Parallel`` runs the jobs in one pool of loky worker processes, and a pool whose
process dies (the out-of-memory killer's SIGKILL, a crash in native code, an ``os._exit()``) is
broken: loky kills the pool's other processes, so the jobs running beside the dead one stopped
mid-training too, the jobs not started never ran, and the sweep ended with joblib's
``TerminatedWorkerError`` traceback. With ``n_jobs=1`` joblib ran the jobs in the sweep's own
process, where such a death ended the sweep. :meth:`CorralJoblibLauncher.launch` runs each job
with Hydra's ``execute_job`` (as hydra-joblib-launcher does) in one of ``n_jobs`` *slots*: a loky
executor with a single worker process, that runs one job after another and is replaced when its
process dies. A death ends only the job that ran there (:func:`died`): its ``[job N] corral: error:``
line says how the process ended and what to do, its directory gets a ``summary.json`` with
``status: failed``, and the sweep goes on with the other jobs and ends as a sweep with a failed job
does (:class:`~corral.framework.entry.SweepJobFailed`'s line, exit status 1). ``hydra.launcher.timeout``
is per job the same way: a job past it is killed and failed, the others go on.

Ctrl-C (and a job stopped by Ctrl-C or SIGTERM) stops the whole sweep, as it did: the running jobs,
which a terminal's Ctrl-C reaches too, get :data:`STOP_GRACE_S` seconds to write their snapshot and
summary, then their processes are killed.

Kept import-light: Hydra imports every module under ``hydra_plugins`` when it scans for plugins
(loky, Hydra's launch helpers and corral's framework are imported when a sweep is launched).
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Iterator, Sequence

from corral.framework.checks import check_minimums
from corral.framework.errors import ConfigError

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
#: Seconds between the sweep's looks at its running jobs (for ``hydra.launcher.timeout``); a job that
#: ends or dies is seen at once.
POLL_S = 1.0
#: Seconds the running jobs get after Ctrl-C (which a terminal sends them too) to write their snapshot
#: and summary before their processes are killed; Ctrl-C again kills them at once.
STOP_GRACE_S = 3.0
#: Signals that mean a crash in native code (an environment's or a library's), not a kill from outside.
CRASH_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE")


class JobProcessDied(RuntimeError):
    """A job whose process ended before the job returned: killed by a signal, ended by ``os._exit()``,
    or killed by the launcher past ``hydra.launcher.timeout``. Its message is the job's one line."""


class CorralJoblibLauncher(JoblibLauncher):
    """``hydra/launcher=joblib``: each job in a loky worker process; a process that dies fails only its
    own job. :meth:`check_config` before the sweep."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._slots: list[Slot] = []

    @classmethod
    def check_config(cls, cfg: Any, overrides: Sequence[str] = ()) -> None:
        """Raise a one-line :class:`ConfigError` for a setting joblib would refuse once the jobs are
        launched, or one the launcher would ignore (``backend``, ``prefer``, ``require``)."""
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
        batch = str(cfg.get("batch_size"))  # a string in the launcher's schema: "auto" or a number
        if batch != "auto" and not (batch.isdigit() and int(batch) >= 1):
            raise ConfigError(f"hydra.launcher.batch_size must be a whole number >= 1 or auto, got {batch!r}")

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[Any]:
        """Run the jobs, at most ``n_jobs`` at once, each in a worker process of its slot; return their
        ``JobReturn``s in job order (a job whose process died: a failed one, see :func:`died`)."""
        from hydra.core.singleton import Singleton
        from hydra.core.utils import JobReturn, configure_log, filter_overrides, setup_globals
        from joblib.externals.loky import FIRST_COMPLETED, wait

        from hydra_plugins.hydra_joblib_launcher._core import execute_job, process_joblib_cfg

        setup_globals()
        assert self.config is not None and self.task_function is not None and self.hydra_context is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        settings = dict(self.joblib)
        settings["backend"] = BACKEND
        process_joblib_cfg(settings)
        n_slots = max(1, min(workers(int(settings.get("n_jobs") or -1)), len(job_overrides)))
        # hydra-joblib-launcher's lines, as it logs them (the same settings)
        log.info("Joblib.Parallel(%s) is launching %d jobs", ",".join(f"{k}={v}" for k, v in settings.items()),
                 len(job_overrides))
        log.info("Launching jobs, sweep output dir : %s", sweep_dir)
        for idx, overrides in enumerate(job_overrides):
            log.info("\t#%d : %s", initial_job_idx + idx, " ".join(filter_overrides(overrides)))

        timeout = settings.get("timeout")
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
            while queue or running:
                while queue and free:
                    num, overrides = queue.popleft()
                    slot = free.pop()
                    future = slot.submit(execute_job, num, overrides, self.hydra_context, self.config,
                                         self.task_function, state)
                    running[future] = Job(num, overrides, slot, slot.process(), time.time(), time.monotonic())
                done, _ = wait(list(running), timeout=POLL_S, return_when=FIRST_COMPLETED)
                for future in done:
                    job = running.pop(future)
                    results[job.num] = self._result(future, job)
                    free.append(job.slot)
                    if verbose:
                        log.info("job #%d ended (%d of %d)", job.num, len(results), len(job_overrides))
                for future, job in list(running.items()):
                    if timeout and time.monotonic() - job.t0 > float(timeout) and not future.done():
                        job.slot.close(kill=True)
                        running.pop(future)
                        results[job.num] = self._died(job, timeout=float(timeout))
                        free.append(job.slot)
        except BaseException as exc:
            if running and isinstance(exc, (KeyboardInterrupt, SystemExit)):
                with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C again: kill them now
                    wait(list(running), timeout=STOP_GRACE_S)
            for slot in slots:
                slot.close(kill=True)
            raise
        returns = [results[initial_job_idx + i] for i in range(len(job_overrides))]
        assert all(isinstance(ret, JobReturn) for ret in returns)
        return returns

    def _result(self, future: Any, job: Job) -> Any:
        """The ``JobReturn`` of a job whose future is done: its own; a failed one when its process died,
        or when Hydra's ``execute_job`` raised around the job. An interrupt (a job stopped by Ctrl-C or
        SIGTERM exits with SystemExit) is raised: it stops the sweep."""
        from hydra.core.utils import JobReturn, JobStatus
        from joblib.externals.loky import BrokenProcessPool
        from joblib.externals.loky.process_executor import TerminatedWorkerError

        try:
            return future.result()
        except TerminatedWorkerError as exc:  # its process died: the slot gets a new one
            job.slot.close()
            job.said = str(exc)
            return self._died(job)
        except Exception as exc:  # noqa: BLE001 - any other error is this job's, as a failed job
            if isinstance(exc, BrokenProcessPool):  # its result could not be read back: a new process too
                job.slot.close()
            return JobReturn(overrides=job.overrides, status=JobStatus.FAILED, _return_value=exc)

    def _died(self, job: Job, timeout: float | None = None) -> Any:
        """The failed ``JobReturn`` of a job whose process died (or was killed past ``timeout``)."""
        from hydra.core.utils import JobReturn, JobStatus
        from omegaconf import open_dict

        assert self.config is not None and self.hydra_context is not None
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(job.overrides))
        with open_dict(cfg):  # as Hydra's execute_job sets them in the job's process
            cfg.hydra.job.id = f"{cfg.hydra.job.name}_{job.num}"
            cfg.hydra.job.num = job.num
        return JobReturn(overrides=job.overrides, cfg=cfg, hydra_cfg=cfg, status=JobStatus.FAILED,
                         _return_value=died(cfg, job, timeout))


def workers(n_jobs: int) -> int:
    """How many jobs run at once for ``hydra.launcher.n_jobs`` (joblib's reading: -1 one per CPU
    core, -2 all cores but one, ...)."""
    from joblib.externals.loky import cpu_count

    return n_jobs if n_jobs > 0 else max(cpu_count() + 1 + n_jobs, 1)


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
    ends only the job that ran there (the executor of ``joblib.Parallel`` kills all its processes)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.executor: Any = None

    def submit(self, fn: Any, *args: Any) -> Any:
        """Start ``fn(*args)`` in this slot's process (a new one when it has none, or it died while idle)."""
        from joblib.externals.loky import BrokenProcessPool, ProcessPoolExecutor

        for attempt in range(2):
            if self.executor is None:
                self.executor = ProcessPoolExecutor(max_workers=1, env=self.env)
            try:
                return self.executor.submit(fn, *args)
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
        """Shut the executor down (``kill``: its process with SIGKILL, a job in it too); the next job
        gets a new one."""
        executor, self.executor = self.executor, None
        if executor is not None:
            executor.shutdown(wait=True, kill_workers=kill)


class Job:
    """A job running in a slot: its number, overrides and slot, the process it runs in, and when it started
    (``started``: epoch seconds; ``t0``: monotonic); ``said``: loky's message when its process died. A
    plain class: Hydra's plugin scan loads this module without registering it, which ``@dataclass`` needs."""

    def __init__(self, num: int, overrides: list[str], slot: Slot, process: Any, started: float, t0: float) -> None:
        self.num, self.overrides, self.slot, self.process, self.started, self.t0 = (num, overrides, slot, process,
                                                                                    started, t0)
        self.said = ""


@contextlib.contextmanager
def job_hydra_config(cfg: Any) -> Iterator[Path]:
    """Hydra's config is the job's ``cfg`` inside the block, with its output directory (what the block
    gets) as Hydra's ``run_job`` sets it in the job's own process; the sweep's again after."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict, read_write

    instance = HydraConfig.instance()
    previous = instance.cfg
    try:
        instance.set_config(cfg)
        run_dir = Path(str(cfg.hydra.sweep.dir), str(cfg.hydra.sweep.subdir)).absolute()
        with read_write(cfg.hydra.runtime), open_dict(cfg.hydra.runtime):
            cfg.hydra.runtime.output_dir = str(run_dir)
        instance.set_config(cfg)
        yield run_dir
    finally:
        instance.cfg = previous


def died(cfg: Any, job: Job, timeout: float | None = None) -> BaseException:
    """A job's process died: print the job's ``[job N] corral: error:`` line (how its process ended and
    what to do), write its ``summary.json`` (``status: failed``) and return the error the sweep ends
    with (:class:`~corral.framework.entry.SweepJobFailed`, as for a job that failed with a corral error)."""
    from corral.framework.entry import SweepJobFailed
    from corral.framework.logger import job_prefix

    with job_hydra_config(cfg) as run_dir:
        error = JobProcessDied(death_reason(job, run_dir, timeout))
        print(f"{job_prefix()}corral: error: {error}", file=sys.stderr, flush=True)
        try:
            write_failed_summary(run_dir, cfg, job, error)
        except Exception as exc:  # noqa: BLE001 - the error line is said; the summary is one more record
            print(f"{job_prefix()}corral: warning: could not write {run_dir / 'summary.json'} ({exc}); `corral "
                  "results` will list the job as unfinished", file=sys.stderr, flush=True)
        return SweepJobFailed.of(error)


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


def death_reason(job: Job, run_dir: Path, timeout: float | None = None) -> str:
    """The job's line: how its process ended, and what to do (resume from its snapshot, or run it again)."""
    who = f"the job's process (pid {getattr(job.process, 'pid', '?')})"
    code = exit_code(job.process, job.said)
    if timeout is not None:
        how = f"the job ran past hydra.launcher.timeout={timeout:g} s, so {who} was killed"
    elif code is not None and code < 0:
        name = _signal_name(-code)
        how = f"{who} was killed by {name} while the job ran"
        if name == "SIGKILL":
            how += (", as the out-of-memory killer does when the machine runs out of memory (`dmesg` says whether "
                    "it did): run fewer jobs at once (hydra.launcher.n_jobs) or give them less to hold")
        elif name in CRASH_SIGNALS:
            how += " (a crash in native code: an environment's or a library's)"
    elif code is not None:
        how = (f"{who} exited with code {code} while the job ran (code that ends its process at once: os._exit() "
               "or a library's exit)")
    else:
        how = f"{who} ended while the job ran"
    try:
        from corral.framework.trainer import find_snapshot

        snapshot = find_snapshot(run_dir)
    except Exception:  # noqa: BLE001 - no snapshot (or none readable): the job starts again
        return f"{how}; it saved no snapshot, so run it again with its overrides"
    return f"{how}; trainer.resume={run_dir} continues it from its latest snapshot ({snapshot.name})"


def _signal_name(signum: int) -> str:
    """``SIGKILL`` for 9; ``signal 64`` for a number without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def write_failed_summary(run_dir: Path, cfg: Any, job: Job, error: BaseException) -> None:
    """The ``summary.json`` of a job whose process died (it could not write one): ``status: failed``
    and why, with the job's overrides, number and config. A summary the process wrote itself before
    it ended stays as it is; one from an earlier session of a run resumed in place is kept, marked failed."""
    import datetime as dt

    from omegaconf import OmegaConf, open_dict

    from corral.results.summary import SUMMARY_FILE, write_summary

    pid = getattr(job.process, "pid", None)
    try:
        existing = json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        existing = None
    if not isinstance(existing, dict):
        existing = None
    elif pid is not None and existing.get("pid") == pid:
        return  # the job's own record: its process wrote it, then ended
    now = time.time()

    def utc(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="seconds")

    summary: dict[str, Any] = existing or {
        "final_eval_return": None, "best_eval_return": None, "final_train_return": None, "env_steps": None,
        "epochs": None, "train_time_s": None, "started_at": job.started, "started_utc": utc(job.started),
        "wall_time_s": now - job.started, "overrides": list(job.overrides),
        "job": {"name": cfg.hydra.job.name, "num": job.num, "id": cfg.hydra.job.id, "mode": "MULTIRUN"},
    }
    summary.update({"status": "failed", "error": f"{type(error).__name__}: {error}", "stop_reason": None,
                    "finished_at": now, "finished_utc": utc(now), "host": socket.gethostname(), "pid": pid})
    if existing is None:
        try:
            task: Any = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
            with open_dict(task):
                del task["hydra"]
            summary["config"] = OmegaConf.to_container(task, resolve=True)
        except Exception:  # noqa: BLE001 - a value only the job's process can resolve: no config recorded
            pass
    write_summary(run_dir, summary)


__all__ = ["BACKEND", "CorralJoblibLauncher", "JobProcessDied", "Slot", "death_reason", "died", "workers"]
