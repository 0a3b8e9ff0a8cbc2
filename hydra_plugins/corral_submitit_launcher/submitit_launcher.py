"""Hydra's submitit launcher with CPU requests that follow each job's sampler (``hydra/launcher=submitit_slurm``,
``hydra/launcher=submitit_local``; settings in corral/conf/hydra/launcher/submitit_*.yaml).

hydra-submitit-launcher submits every job of a sweep with the same resources. corral's launchers
size each job from its own composed config instead, as ``hydra/launcher=ray`` does: with
``cpus_per_task: null`` a job asks for

- ``sampler=local``: 1 CPU (the trainer);
- ``sampler=ray``: 1 CPU for the trainer plus ``sampler.n_workers * sampler.num_cpus`` for the
  actors of the Ray runtime the job starts inside its allocation;
- any other sampler (``multiprocessing``, ``action_server``, ...): ``max(1, sampler.n_workers *
  sampler.num_cpus)`` CPUs, the worker processes sharing them with the trainer;
- with ``worker=vector worker.backend=async`` (which runs under ``sampler=local`` and ``sampler=ray``,
  whose workers may start processes): one more CPU per environment process, ``worker.n_envs`` per
  sampler worker (``1 + n_workers * n_envs`` under ``sampler=local``; 1 CPU had been asked for a job
  running 8 environment processes).

``tasks_per_node`` and ``nodes`` other than 1 are refused before any job: a corral job is one trainer
process, and submitit ran every further task as a twin of the job, in its directory (the twin failed,
the directory in use). ``submitit_local`` leaves ``CUDA_VISIBLE_DEVICES`` as it is unless
``gpus_per_node`` is given (the preset's ``gpus_per_node: 0`` had hidden every GPU from every job).

Memory follows the CPUs through SLURM's ``mem_per_cpu`` (the preset's ``2G``). Jobs that need the
same resources go to SLURM together as one job array; jobs needing different ones, as several.
A ``cpus_per_task`` given explicitly applies to every job.

Preemption and time limits: SLURM's warning signal (``signal_delay_s`` before the limit, or on
preemption) makes submitit requeue the job; corral's launcher requeues it with
``trainer.resume=<job dir>``, so the job continues from its latest snapshot, in place, as one run.

A job whose process dies (the out-of-memory killer's SIGKILL, a crash, SLURM's ``OUT_OF_MEMORY`` or
``NODE_FAIL``) leaves no result: submitit raised ``UncompletedJobError`` for it and the sweep ended
with its traceback, leaving the later jobs unattended. Now it fails alone
(:mod:`corral.launchers.job_death`): one ``[job N] corral: error:`` line, a ``summary.json`` with
``status: failed``, every other job waited for, and the sweep ends with corral's one line (exit 1).
Under ``submitit_local`` the processes the dead job started, which the kernel handed to init and which
ran on after the sweep when they did not watch their parent (a simulator server an environment
started, say), are ended first: every process whose environment carries the job's
``SUBMITIT_LOCAL_JOB_ID`` (:func:`corral.launchers.job_processes.end_leftovers`).

Ctrl-C under ``submitit_local``: submitit starts one job controller process per job (``python -m
submitit.local._local``), in the sweep's process group, so the terminal's SIGINT reached each controller
as well as its job; the controller died with a ``KeyboardInterrupt`` traceback printed after corral's
``corral: interrupted`` line, and on its way out sent its job a second SIGINT (which corral's trainer takes
as "stop now") and a SIGKILL a second later, whatever the job was still saving. corral has each
controller run :mod:`corral.launchers.submitit_controller` (:func:`quiet_controllers`): submitit's own
controller, with SIGINT left to the jobs, which got the same Ctrl-C; it waits for them to stop and save
as a job that ``train.py`` runs alone does, and ends with them, saying nothing. (submitit's ``LocalJob.cancel()``, a SIGINT to the controller alone, which
corral never calls, no longer reaches the job; ``kill`` (SIGTERM) on the controller still does.)

SIGTERM to a ``submitit_local`` sweep's process (``kill <pid>``) had ended it at once, silently, and left
its job controllers and jobs training on, unattended; sent to the whole process group (``kill -TERM
-<pgid>``), the jobs stopped and saved (the group's signal reached them, and each controller passed its own
on), and the sweep's process still ended without a line. Now, while the jobs run, SIGTERM stops the sweep
(:class:`~corral.launchers.sweep_sigterm.SweepSigterm`): the launcher passes SIGTERM on to each running job through its controller (which
sends it to the job, as submitit's does), waits up to ``hydra.launcher.cancel_grace_s`` seconds
(:data:`CANCEL_GRACE_S`, as under ``hydra/launcher=ray`` and ``joblib``) for the jobs to save and end, ends
what is left of them (:func:`end_local_leftovers`), and the sweep ends with corral's interrupted line (exit
143). A job still running after the grace is not lost in silence: it was ended with a warning in the log and
no ``summary.json``; now :func:`corral.launchers.job_death.killed` gives it its ``[job N] corral: error:``
line (the job, its directory, what its latest snapshot holds) and a ``summary.json`` with ``status: killed``. A job that gets SIGTERM twice (the group's and its controller's, moments
apart) takes them as one stop (corral's trainer drops a repeated SIGTERM).

Kept import-light: Hydra imports every module under ``hydra_plugins`` when it scans for plugins.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import signal
import subprocess
import time
import types
from pathlib import Path
from typing import Any, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from omegaconf import DictConfig, OmegaConf, open_dict

from corral.framework.checks import check_minimums
from corral.framework.errors import ConfigError
from corral.launchers.settings_schema import extended, storing_plugin

log = logging.getLogger(__name__)

#: CPUs of a job's trainer (the process that runs train.py's work for the job).
DRIVER_CPUS = 1
#: The least each whole-number setting may be: submitit passed a 0 or a negative on to the job, which
#: failed (``timeout_min=-1``) or ran with it (``cpus_per_task=0``).
SETTING_MINIMUMS = {"timeout_min": 1, "cpus_per_task": 1, "gpus_per_node": 0, "tasks_per_node": 1, "mem_gb": 1,
                    "nodes": 1, "max_num_timeout": 0, "signal_delay_s": 0, "array_parallelism": 1, "cpus_per_gpu": 1,
                    "gpus_per_task": 1}
#: The settings that may be null (submitit's or corral's default for them).
NULLABLE = ("cpus_per_task", "gpus_per_node", "mem_gb", "cpus_per_gpu", "gpus_per_task")
#: The default of ``submitit_local``'s ``hydra.launcher.cancel_grace_s``: seconds the running jobs of a sweep
#: stopped by SIGTERM get to save and end before they are killed (as ``hydra/launcher=ray``'s and ``joblib``'s).
CANCEL_GRACE_S = 30.0


def env_processes(job_cfg: DictConfig | dict) -> int:
    """The environment processes one sampler worker of a job starts: ``worker.n_envs`` under
    ``worker=vector worker.backend=async`` (one process per environment), else 0."""
    worker = OmegaConf.select(OmegaConf.create(job_cfg), "worker") or {}
    if str(worker.get("name", "")) != "vector" or str(worker.get("backend", "")) != "async":
        return 0
    return int(worker.get("n_envs", 1) or 1)


def job_cpus(job_cfg: DictConfig | dict) -> int:
    """The CPUs one job needs, from its composed config (see the module docstring)."""
    sampler = OmegaConf.select(OmegaConf.create(job_cfg), "sampler") or {}
    name = str(sampler.get("name", "local"))
    n_workers = int(sampler.get("n_workers", 1) or 1)
    per_worker = float(sampler.get("num_cpus") if sampler.get("num_cpus") is not None else 1.0)
    envs = env_processes(job_cfg)  # only samplers whose workers may start processes run async's
    if name == "local":
        return DRIVER_CPUS + n_workers * envs
    if name == "ray":
        return DRIVER_CPUS + math.ceil(n_workers * (per_worker + envs))
    return max(DRIVER_CPUS, math.ceil(n_workers * per_worker))


try:
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf, LocalQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
except ImportError:  # hydra-submitit-launcher not installed: the presets say what to install
    BaseQueueConf = LocalQueueConf = None  # type: ignore[assignment,misc]

    class BaseSubmititLauncher:  # type: ignore[no-redef]
        """Stand-in that explains what is missing."""

        def __init__(self, **params: Any) -> None:
            raise ImportError("hydra/launcher=submitit_* needs hydra-submitit-launcher: pip install 'corral[sweep]' "
                              "(or pip install hydra-submitit-launcher)")


def _local_settings_schema() -> Any:
    """hydra-submitit-launcher's ``LocalQueueConf`` with corral's ``_target_`` and ``cancel_grace_s`` (None
    without hydra-submitit-launcher)."""
    if LocalQueueConf is None:
        return None
    return extended(LocalQueueConf, "CorralLocalQueueConf", __name__,
                    [("_target_", str, f"{__name__}.CorralLocalLauncher"), ("cancel_grace_s", float, CANCEL_GRACE_S)])


#: The schema Hydra merges ``hydra/launcher=submitit_local`` (corral/conf/hydra/launcher/submitit_local.yaml) with.
CorralLocalQueueConf = _local_settings_schema()
#: Stores :data:`CorralLocalQueueConf` over hydra-submitit-launcher's schema once Hydra has scanned its plugins.
LocalSettingsSchema = storing_plugin("LocalSettingsSchema", __name__, "submitit_local", CorralLocalQueueConf)


class _SizedJobs(BaseSubmititLauncher):
    """Submits a sweep's jobs in groups of equal resource needs, one submitit job array per group."""

    _EXECUTOR = "abstract"

    @classmethod
    def check_config(cls, cfg: Any, overrides: Sequence[str] = ()) -> None:
        """Raise a one-line :class:`ConfigError` before the sweep starts when this launcher cannot
        launch here (``corral.framework.precheck.check_sweep_plugins`` calls it)."""
        option = f"hydra/launcher=submitit_{cls._EXECUTOR}"
        if BaseQueueConf is None:
            raise ConfigError(f"{option} needs hydra-submitit-launcher: pip install 'corral[sweep]'")
        if cls._EXECUTOR == "slurm" and shutil.which("srun") is None:
            raise ConfigError(f"{option} submits each job to SLURM, and this machine has no `srun` on PATH: run the "
                              "sweep on a SLURM login node, or rehearse it here with hydra/launcher=submitit_local")
        check_minimums(cfg, "hydra.launcher", SETTING_MINIMUMS, nullable=NULLABLE)
        grace = cfg.get("cancel_grace_s", CANCEL_GRACE_S)
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace < 0:
            raise ConfigError(f"hydra.launcher.cancel_grace_s must be >= 0 seconds (how long a job of a sweep stopped "
                              f"by SIGTERM gets to save before it is killed), got {grace!r}")
        for key in ("tasks_per_node", "nodes"):  # each task would run the whole job again, in its directory
            if cfg.get(key, 1) not in (1, None):
                raise ConfigError(f"hydra.launcher.{key}={cfg.get(key)}: a corral job is one trainer process, and "
                                  "every further task would run the same job in the same directory; keep it 1 and "
                                  "give a job more worker processes (e.g. sampler=multiprocessing sampler.n_workers=N) "
                                  "or run more jobs")

    def _executor(self, cpus: int | None) -> Any:
        """A submitit executor with this preset's parameters and ``cpus_per_task=cpus``."""
        import submitit

        params = dict(self.params)
        params.pop("cancel_grace_s", None)  # corral's own, not submitit's
        if cpus is not None:
            params["cpus_per_task"] = cpus
        if self._EXECUTOR == "local" and params.get("gpus_per_node") is None:
            params.pop("gpus_per_node", None)  # not asked for: the job sees this machine's GPUs
        init = {"folder": params.pop("submitit_folder")}
        if "max_num_timeout" in params:
            init[f"{self._EXECUTOR}_max_num_timeout"] = params.pop("max_num_timeout")
        executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init)
        shared = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in shared else f"{self._EXECUTOR}_{k}": v for k, v in params.items()})
        if self._EXECUTOR == "local":
            quiet_controllers(executor._executor)
        return executor

    def checkpoint(self, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_id: str,
                   singleton_state: Any) -> Any:
        """Preempted or at its time limit (SLURM's warning signal): requeue the job so that it resumes
        from its latest snapshot (``trainer.resume=<job dir>``, in place) instead of starting over."""
        import submitit

        assert self.config is not None and self.hydra_context is not None
        overrides = [o for o in sweep_overrides if o.partition("=")[0].lstrip("+~") != "trainer.resume"]
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(sweep_config.hydra.job):
            sweep_config.hydra.job.num = job_num
        job_dir = Path(str(sweep_config.hydra.sweep.dir)) / str(sweep_config.hydra.sweep.subdir)
        if (job_dir / "snapshots" / "latest").is_file():
            from corral.framework.shell_words import hydra_override

            overrides.append(hydra_override("trainer.resume", job_dir))  # quoted where Hydra needs it
            log.warning("job #%d requeued; it resumes from its latest snapshot in %s", job_num, job_dir)
        return submitit.helpers.DelayedSubmission(self, overrides, job_dir_key, job_num, job_id, singleton_state)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Submit every job (sized from its own config) and wait for their results, in job order."""
        from corral.framework.sweep_jobs import note_sweep_dir

        assert self.config is not None and self.hydra_context is not None
        fixed = self.params.get("cpus_per_task")
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        note_sweep_dir(self.config.hydra.sweep.dir, self.config.hydra.runtime.get("cwd"))  # Ctrl-C's line names it
        log.info("Submitit '%s' sweep output dir: %s", self._EXECUTOR, sweep_dir)
        groups: dict[int | None, list[int]] = {}
        args = []
        for i, overrides in enumerate(job_overrides):
            idx = initial_job_idx + i
            if fixed is None:
                job_cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
                cpus: int | None = job_cpus(job_cfg)
            else:
                cpus = int(fixed)
            log.info("\t#%d : %s (%s CPU(s))", idx, " ".join(filter_overrides(overrides)), cpus)
            groups.setdefault(cpus, []).append(i)
            args.append((list(overrides), "hydra.sweep.dir", idx, f"job_id_for_{idx}", Singleton.get_state()))
        submitted = []
        started = time.time()
        results: list[Any] = [None] * len(job_overrides)
        from corral.launchers.sweep_sigterm import SweepSigterm

        with SweepSigterm(enabled=self._EXECUTOR == "local", held=True) as sigterm:
            try:
                for cpus, members in groups.items():
                    jobs = self._executor(cpus).map_array(self, *zip(*(args[i] for i in members)))
                    submitted.append((members, jobs))
                sigterm.arm()  # a SIGTERM during the submission stops the sweep from here on
                for members, jobs in submitted:  # every job's result, a failed one too (the others are waited for)
                    for i, job in zip(members, jobs):
                        results[i] = self._result(job, list(job_overrides[i]), initial_job_idx + i, started)
            except KeyboardInterrupt:  # Ctrl-C reached the jobs too, and each stops on its own
                if sigterm.received:
                    self._stop_local_jobs([(initial_job_idx + i, list(job_overrides[i]), job)
                                           for members, jobs in submitted for i, job in zip(members, jobs)],
                                          started)
                raise
        return results

    def _stop_local_jobs(self, jobs: list[tuple[int, list[str], Any]], started: float) -> None:
        """SIGTERM stopped the sweep: send it to each running job of ``jobs`` (its number, overrides and
        submitit job, submitted at ``started``) through the job's controller, which passes it on to the job,
        wait up to ``hydra.launcher.cancel_grace_s`` seconds for them to end (a further SIGTERM or Ctrl-C: not
        longer), then end the processes of those still running, and of every job the processes it left
        (:func:`end_local_leftovers`), and their controllers. Each job that was still running is said and
        recorded as killed (:func:`corral.launchers.job_death.killed`)."""
        from corral.launchers.job_death import job_config

        assert self.config is not None and self.hydra_context is not None
        grace = float(self.params.get("cancel_grace_s", CANCEL_GRACE_S))
        controllers = {num: job._process for num, _, job in jobs if getattr(job, "_process", None) is not None}
        running = {num: proc for num, proc in controllers.items() if proc.poll() is None}
        if not running:
            return
        log.warning("Submitit 'local' launcher: SIGTERM; stopping %d running job(s) (up to %g s for snapshots)",
                    len(running), grace)
        for proc in running.values():
            proc.send_signal(signal.SIGTERM)  # nothing when it has ended meanwhile (Popen knows)
        deadline = time.monotonic() + grace
        cut_short = False
        try:
            while any(proc.poll() is None for proc in running.values()) and time.monotonic() < deadline:
                time.sleep(0.1)
        except KeyboardInterrupt:  # SIGTERM or Ctrl-C again: end them now
            cut_short = True
        for num, overrides, job in jobs:
            if num not in running:
                continue
            left = running[num].poll() is None
            cfg = job_config(self.hydra_context, self.config, overrides, num)
            end_local_leftovers(job, Path(str(cfg.hydra.sweep.dir), str(cfg.hydra.sweep.subdir)))
            try:
                running[num].wait(timeout=5.0)  # its job's processes are gone: it ends at once
            except subprocess.TimeoutExpired:
                running[num].kill()
                running[num].wait(timeout=5.0)
            if left:
                self._killed(cfg, overrides, started, grace, cut_short)

    def _killed(self, cfg: Any, overrides: list[str], started: float, grace: float, cut_short: bool) -> None:
        """Say and record a job whose processes were ended because it had not stopped ``grace`` seconds after
        the sweep's SIGTERM (``cut_short``: a further signal ended the grace early); a failure to say it is a
        warning, never a traceback instead of the sweep's line."""
        from corral.launchers.job_death import killed

        try:
            killed(cfg, overrides=overrides, started=started, pid=None, stop="the sweep's SIGTERM", grace=grace,
                   cut_short=cut_short)
        except Exception as exc:  # noqa: BLE001 - the sweep's own line still comes
            log.warning("job #%s (%s) was killed after the sweep's SIGTERM and could not be recorded (%s: %s)",
                        cfg.hydra.job.num, " ".join(overrides), type(exc).__name__, exc)

    def _result(self, job: Any, overrides: list[str], num: int, started: float) -> JobReturn:
        """The ``JobReturn`` of a submitit job once it has ended: its own; a failed one when its process
        died without a result (:mod:`corral.launchers.job_death`: the job's line and failed summary.json),
        or when submitit's own code around the job raised."""
        from hydra.core.utils import JobStatus
        from submitit.core.utils import UncompletedJobError

        from corral.launchers.job_death import died, failed_return, job_config

        assert self.config is not None and self.hydra_context is not None
        try:
            return job.results()[0]  # type: ignore[no-any-return]
        except UncompletedJobError:  # no result: its process died (killed, crashed, lost by SLURM)
            cfg = job_config(self.hydra_context, self.config, overrides, num)
            if self._EXECUTOR == "local":
                end_local_leftovers(job, Path(str(cfg.hydra.sweep.dir), str(cfg.hydra.sweep.subdir)))
            return failed_return(cfg, overrides, died(cfg, overrides=overrides, started=started,
                                                      unknown=job_state_words(job)))
        except Exception as exc:  # noqa: BLE001 - a FailedJobError: this job's, as a failed job
            return JobReturn(overrides=overrides, status=JobStatus.FAILED, _return_value=exc)


def end_local_leftovers(job: Any, run_dir: Path) -> set[int]:
    """End what a ``submitit_local`` job whose process died left running: the processes whose
    environment carries its ``SUBMITIT_LOCAL_JOB_ID`` (submitit gives it to the job's process, and they
    inherited it), and the ``/dev/shm`` segments of the job's process (its pid in ``run_dir``'s lock
    file). Returns the pids still running after that (bounded)."""
    from corral.launchers.job_death import lock_pid
    from corral.launchers.job_processes import end_leftovers

    pid = lock_pid(run_dir)
    return end_leftovers({"SUBMITIT_LOCAL_JOB_ID": str(job.job_id), "SUBMITIT_EXECUTOR": "local"},
                         [pid] if pid is not None else [])


#: The module each ``submitit_local`` job's controller runs instead of submitit's ``submitit.local._local``.
QUIET_CONTROLLER = "corral.launchers.submitit_controller"
#: What submitit's executor runs its controllers with (``python -m <it> <folder>``).
SUBMITIT_CONTROLLER = "submitit.local._local"


def quiet_controllers(executor: Any) -> None:
    """Make submitit's ``LocalExecutor`` ``executor`` start each job's controller as
    :data:`QUIET_CONTROLLER` (see the module docstring and :mod:`corral.launchers.submitit_controller`),
    and leave ``CUDA_VISIBLE_DEVICES`` as the sweep has it when ``gpus_per_node`` was not asked for.
    submitit still builds the controller's command and environment; only its process start is seen to."""
    submit = executor._submit_command

    def submit_quietly(command: str) -> Any:
        from submitit.local import local

        keep_gpus = executor.parameters.get("gpus_per_node") is None
        real = local.subprocess
        local.subprocess = types.SimpleNamespace(  # the name submitit's start_controller starts it through
            Popen=lambda cmd, **kwargs: real.Popen(_quiet_command(cmd), **_visible_gpus(kwargs, keep_gpus)))
        try:
            return submit(command)
        finally:
            local.subprocess = real

    executor._submit_command = submit_quietly


def _quiet_command(cmd: Any) -> Any:
    """submitit's controller command (a list, or a shell line after ``setup`` lines) with
    :data:`QUIET_CONTROLLER` in place of :data:`SUBMITIT_CONTROLLER`."""
    if isinstance(cmd, str):
        return cmd.replace(f" -m {SUBMITIT_CONTROLLER} ", f" -m {QUIET_CONTROLLER} ")
    return [QUIET_CONTROLLER if part == SUBMITIT_CONTROLLER else part for part in cmd]


def _visible_gpus(kwargs: dict[str, Any], keep: bool) -> dict[str, Any]:
    """``kwargs`` of the controller's start, its ``CUDA_VISIBLE_DEVICES`` the sweep's own when ``keep``
    (submitit sets it to the GPUs asked for: none, an empty list, when ``gpus_per_node`` is not given)."""
    if not keep or kwargs.get("env") is None:
        return kwargs
    env = dict(kwargs["env"])
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    else:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    return {**kwargs, "env": env}


def job_state_words(job: Any) -> str:
    """What submitit (and SLURM) say about a job that ended without a result: its state, and for
    SLURM's out-of-memory state what to ask for."""
    try:
        state = str(job.state)
    except Exception:  # noqa: BLE001 - the scheduler cannot be asked: say what is known
        state = "UNKNOWN"
    words = f"submitit: job state {state}, and the job left no result"
    if state.startswith("OUT_OF_MEMORY"):
        words += ("; SLURM ended it for using more memory than it asked for: ask for more (hydra.launcher.mem_gb "
                  "or hydra.launcher.mem_per_cpu)")
    return words


class CorralLocalLauncher(_SizedJobs):
    """``hydra/launcher=submitit_local``: the jobs as local processes through submitit (a SLURM rehearsal)."""

    _EXECUTOR = "local"


class CorralSlurmLauncher(_SizedJobs):
    """``hydra/launcher=submitit_slurm``: each job a SLURM job (array), CPUs and memory per job."""

    _EXECUTOR = "slurm"


__all__ = ["CANCEL_GRACE_S", "QUIET_CONTROLLER", "CorralLocalLauncher", "CorralLocalQueueConf", "CorralSlurmLauncher",
           "LocalSettingsSchema", "end_local_leftovers", "job_cpus", "job_state_words", "quiet_controllers"]
