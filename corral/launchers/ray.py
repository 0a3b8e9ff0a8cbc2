"""Running a Hydra sweep's jobs on Ray: one task per job inside a placement group sized for the job.

A job's placement group holds one bundle for its trainer (``driver_cpus`` / ``driver_gpus``) and,
with ``sampler=ray``, one bundle per sampler actor (``sampler.num_cpus`` / ``sampler.num_gpus``).
The job's task runs in the first bundle with ``placement_group_capture_child_tasks``, so the
actors its Ray sampler creates (the sampler finds Ray already initialised inside the task and
never starts or stops a runtime) land in the other bundles. A job starts only when all of its
resources are free at once, so jobs never hold a CPU while waiting for their actors' CPUs (the
deadlock of nested Ray use on a small cluster). Other samplers reserve
``max(driver_cpus, n_workers * num_cpus)`` CPUs in a single bundle (worker processes run on the
job's node); ``sampler=local`` reserves ``driver_cpus``.

``hydra.launcher.runtime_env`` (``working_dir``, ``py_modules``, ``pip``, ``env_vars``) is Ray's
runtime environment for the jobs and, inherited, for the actors their samplers start: a script's
own modules reach every node without being installed there.

The jobs' output reaches the sweep's through Ray (its log monitor tails each job's worker process and
forwards its lines), some time after the job wrote it: the launcher waits, after the last job ended,
until no line has come for :data:`LOG_QUIET_S` seconds (at most :data:`LOG_DRAIN_MAX_S`) before it
disconnects, so the last lines of the last jobs (a job's one ``[job N] corral:`` line) are printed
too; they were lost when the launcher disconnected at once (in 6 of 17 runs of a 2-job sweep here).

Ctrl-C cancels the running jobs gently (a KeyboardInterrupt inside each, so the trainer writes a
snapshot and a summary with ``status: interrupted``), waits ``cancel_grace_s``, then kills what
is left; a local runtime the launcher started is shut down, a joined cluster is left running.

The launcher disconnects from a cluster it joined when its jobs have ended (only a runtime that was
running in this process before it is left connected), as it shuts down a runtime it started: Ray
holds back lines that repeat one another across processes (its deduplication of the workers' output)
and prints them when the driver disconnects, which for a joined cluster was at the interpreter's
exit, after the sweep's last line (``corral: interrupted by SIGTERM; ...`` followed by a job's
``[job 1] corral: interrupted after 1 epoch ... [repeated 2x across cluster]``).

SIGTERM to the sweep's process (``kill <pid>``, or ``kill -TERM -<pgid>`` to its whole process group)
takes the same path (:class:`~corral.launchers.sweep_sigterm.SweepSigterm`). It had killed the sweep with Ray's
``*** SIGTERM received`` stack dump and no line of corral's, and the local runtime's processes with
it, so the jobs died without a ``summary.json``; sent to the process group it also reached the
runtime's raylet, whose end killed the jobs (Ray starts each job's worker process in a process group
of its own, so the jobs themselves never got it). The processes of a local runtime the launcher
starts now have a process group of their own too (:func:`runtime_in_own_process_group`), as Ray
gives them on Windows: they end with the sweep's process all the same (Ray's kernel fate-sharing), and a
signal to the sweep's process group reaches only the sweep's process, which stops the jobs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from corral.framework.errors import ConfigError
from corral.framework.interrupts import Terminated
from corral.launchers.sweep_sigterm import SweepSigterm
from corral.parallel.ray_runtime import check_runtime_env, join_cluster, start_local_runtime

log = logging.getLogger(__name__)

#: Seconds without a forwarded line of the jobs' output (Ray's log monitor forwards new lines every
#: 0.1 s) after the last job ended, after which the launcher takes it that their last lines have arrived.
LOG_QUIET_S = 1.0
#: The most seconds the launcher waits for the jobs' last lines after the last job ended.
LOG_DRAIN_MAX_S = 5.0


@dataclass
class RayLauncherSettings:
    """The settings of ``hydra/launcher=ray`` (documented in corral/conf/hydra/launcher/ray.yaml)."""

    address: str = ""
    num_cpus: float | None = None
    object_store_memory: int | None = None
    driver_cpus: float = 1.0
    driver_gpus: float = 0.0
    job_cpus: float | None = None
    max_concurrent_jobs: int | None = None
    cancel_grace_s: float = 30.0
    poll_s: float = 1.0
    runtime_env: dict[str, Any] | None = None

    def validate(self) -> None:
        """Raise ``ConfigError`` for values that cannot work (``runtime_env``: local paths made absolute)."""
        self.runtime_env = check_runtime_env(self.runtime_env, "hydra.launcher.runtime_env") or None
        if self.driver_cpus <= 0:
            raise ConfigError("hydra.launcher.driver_cpus must be > 0 (a job's trainer needs a CPU), "
                              f"got {self.driver_cpus}")
        if self.driver_gpus < 0:
            raise ConfigError(f"hydra.launcher.driver_gpus must be >= 0, got {self.driver_gpus}")
        if self.job_cpus is not None and self.job_cpus <= 0:
            raise ConfigError(f"hydra.launcher.job_cpus must be > 0 or null, got {self.job_cpus}")
        if self.max_concurrent_jobs is not None and self.max_concurrent_jobs < 1:
            raise ConfigError("hydra.launcher.max_concurrent_jobs must be >= 1 or null, "
                              f"got {self.max_concurrent_jobs}")
        if self.cancel_grace_s < 0 or self.poll_s <= 0:
            raise ConfigError("hydra.launcher.cancel_grace_s must be >= 0 and hydra.launcher.poll_s > 0")


def _bundle(cpus: float, gpus: float = 0.0) -> dict[str, float]:
    out = {"CPU": float(cpus)}
    if gpus:
        out["GPU"] = float(gpus)
    return out


def job_bundles(job_cfg: DictConfig | dict, settings: RayLauncherSettings) -> list[dict[str, float]]:
    """The placement-group bundles of one job, from its composed config; bundle 0 is the trainer's.

    ``sampler=ray``: the trainer's bundle plus one ``{CPU: sampler.num_cpus, GPU: sampler.num_gpus}``
    per actor (bundles without resources are left out). Other samplers: one bundle of
    ``max(driver_cpus, n_workers * num_cpus)`` CPUs (``driver_cpus`` for ``sampler=local``), or
    ``job_cpus`` when it is set.
    """
    sampler = OmegaConf.select(OmegaConf.create(job_cfg), "sampler") or {}
    name = str(sampler.get("name", "local"))
    n_workers = int(sampler.get("n_workers", 1) or 1)
    per_worker = float(sampler.get("num_cpus", 1.0) if sampler.get("num_cpus") is not None else 1.0)
    driver = _bundle(settings.driver_cpus, settings.driver_gpus)
    if settings.job_cpus is not None:
        return [_bundle(settings.job_cpus, settings.driver_gpus)]
    if name == "ray":
        gpus = float(sampler.get("num_gpus", 0.0) or 0.0)
        actors = [_bundle(per_worker, gpus) for _ in range(n_workers)]
        return [driver] + [b for b in actors if any(v > 0 for v in b.values())]
    if name == "local":
        return [driver]
    return [_bundle(max(settings.driver_cpus, n_workers * per_worker), settings.driver_gpus)]


def _run_job_on_ray(hydra_context: HydraContext, task_function: TaskFunction, sweep_config: DictConfig,
                    singleton_state: dict[Any, Any]) -> JobReturn:
    """The Ray task of one job: Hydra's ``run_job`` in the sweep's working directory."""
    setup_globals()
    Singleton.set_state(singleton_state)
    old_cwd = os.getcwd()
    cwd = str(sweep_config.hydra.runtime.cwd)
    if os.path.isdir(cwd):  # the same relative paths as a local launcher, where the filesystem is shared
        os.chdir(cwd)
    try:
        return run_job(hydra_context=hydra_context, task_function=task_function, config=sweep_config,
                       job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    except BaseException as exc:  # SystemExit (corral's errors, Ctrl-C) or KeyboardInterrupt: a failed job
        code = getattr(exc, "code", None)
        return _failed(sweep_config, f"{type(exc).__name__}{f' (exit code {code})' if code is not None else ''}")
    finally:
        os.chdir(old_cwd)


def _failed(sweep_config: DictConfig, what: str, cause: BaseException | None = None) -> JobReturn:
    """A ``JobReturn`` for a job that did not return; Hydra's sweeper raises its error after the batch.
    ``cause``: the Ray error it ended with (its ``__cause__``: the launcher tells a dead process by it)."""
    overrides = list(sweep_config.hydra.overrides.task)
    ret = JobReturn(overrides=overrides, cfg=sweep_config, hydra_cfg=sweep_config, status=JobStatus.FAILED)
    error = RuntimeError(f"job {sweep_config.hydra.job.num} ({' '.join(overrides)}) ended with {what}")
    error.__cause__ = cause
    ret.return_value = error
    ret.status = JobStatus.FAILED
    return ret


def _connect(ray: Any, settings: RayLauncherSettings) -> bool:
    """Join or start a Ray runtime; True when this call started it."""
    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    extra: dict[str, Any] = {"runtime_env": settings.runtime_env} if settings.runtime_env else {}
    if settings.address:
        join_cluster(ray, settings.address, "hydra.launcher.address", log_to_driver=True, configure_logging=False,
                     **extra)
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True, "configure_logging": False, **extra}
    if settings.num_cpus is not None:
        kwargs["num_cpus"] = settings.num_cpus
    if settings.object_store_memory is not None:
        kwargs["object_store_memory"] = int(settings.object_store_memory)
    with runtime_in_own_process_group():
        start_local_runtime(ray, "hydra/launcher=ray", **kwargs)
    return True


@contextlib.contextmanager
def runtime_in_own_process_group() -> Iterator[None]:
    """Inside the block, the processes a local Ray runtime starts from this process (its GCS, raylet,
    dashboard, log monitor; the raylet starts the workers) go into a process group of their own, as Ray
    starts them on Windows, so that a signal to the sweep's process group (``kill -TERM -<pgid>``) reaches
    the sweep's process only, which stops the jobs, and not the raylet, whose end would kill them. Only
    where Ray's kernel fate-sharing holds (Linux), so the runtime still ends with this process; elsewhere,
    or where Ray has no such class to start them with, nothing changes."""
    try:
        from ray._private import services as ray_services
        from ray._private import utils
    except ImportError:  # another Ray's layout: its processes stay in the sweep's group
        yield
        return
    services: Any = ray_services  # the class start_ray_process starts them with is swapped for the block
    popen = getattr(services, "ConsolePopen", None)
    if popen is None or os.name != "posix" or not utils.detect_fate_sharing_support():
        yield
        return

    class OwnGroupPopen(popen):  # type: ignore[misc,valid-type]
        """Ray's process start, the process in a new process group before Ray's own ``preexec_fn`` runs."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            rays = kwargs.get("preexec_fn")

            def own_group_first() -> None:
                os.setpgid(0, 0)
                if rays is not None:
                    rays()

            kwargs["preexec_fn"] = own_group_first
            super().__init__(*args, **kwargs)

    services.ConsolePopen = OwnGroupPopen
    try:
        yield
    finally:
        services.ConsolePopen = popen


class OutputWatch:
    """When Ray last forwarded a line of the jobs' output to this process (a handler on Ray's dispatcher
    of the workers' output, between :meth:`start` and :meth:`stop`), so the launcher can wait for the
    jobs' last lines before it disconnects (:meth:`drain`). Where Ray has no such dispatcher,
    :meth:`drain` waits :data:`LOG_QUIET_S`."""

    NAME = "corral_launcher_output_watch"

    def __init__(self) -> None:
        self.last = float("-inf")
        self._dispatcher: Any = None

    def start(self) -> None:
        """Watch Ray's forwarding of the jobs' output."""
        try:
            from ray._private.ray_logging import global_worker_stdstream_dispatcher

            global_worker_stdstream_dispatcher.add_handler(self.NAME, self._seen)
            self._dispatcher = global_worker_stdstream_dispatcher
        except Exception:  # noqa: BLE001 - another Ray: drain() waits LOG_QUIET_S
            pass

    def stop(self) -> None:
        """Stop watching (idempotent)."""
        if self._dispatcher is not None:
            self._dispatcher.remove_handler(self.NAME)
            self._dispatcher = None

    def _seen(self, data: Any) -> None:
        self.last = time.monotonic()

    def drain(self, since: float) -> None:
        """Wait until no line has come for :data:`LOG_QUIET_S` seconds after ``since`` (``time.monotonic()``
        when the last job ended), at most until :data:`LOG_DRAIN_MAX_S` after it."""
        deadline = since + LOG_DRAIN_MAX_S
        while True:
            now = time.monotonic()
            quiet_until = max(since, self.last) + LOG_QUIET_S
            if now >= min(quiet_until, deadline):
                return
            time.sleep(min(0.05, min(quiet_until, deadline) - now))


def _check_feasible(ray: Any, idx: int, bundles: list[dict[str, float]]) -> None:
    """A job that needs more than the whole cluster would wait forever: say so before launching."""
    total = ray.cluster_resources()
    for resource in ("CPU", "GPU"):
        need = sum(b.get(resource, 0.0) for b in bundles)
        have = float(total.get(resource, 0.0))
        if need > have + 1e-9:
            raise ConfigError(
                f"ray launcher: job #{idx} needs {need:g} {resource}(s) ({len(bundles)} bundle(s): trainer + sampler) "
                f"but the cluster has {have:g}; lower sampler.n_workers / sampler.num_cpus / "
                f"hydra.launcher.driver_cpus, or add nodes"
            )


def launch(settings: RayLauncherSettings, hydra_context: HydraContext, task_function: TaskFunction,
           config: DictConfig, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    """Run the jobs on Ray and return their ``JobReturn``s in job order."""
    try:
        import ray
    except ImportError:
        raise ConfigError("hydra/launcher=ray needs Ray: pip install 'corral[sweep]' (or pip install ray)") from None
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
    sweep_dir.mkdir(parents=True, exist_ok=True)

    jobs: list[tuple[int, DictConfig, list[dict[str, float]]]] = []
    for i, overrides in enumerate(job_overrides):
        idx = initial_job_idx + i
        sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
            sweep_config.hydra.job.num = idx
            # Absolute, so a job writes where the sweep is, whatever its worker process's cwd.
            sweep_config.hydra.sweep.dir = str(Path(str(sweep_config.hydra.sweep.dir)).absolute())
        jobs.append((idx, sweep_config, job_bundles(sweep_config, settings)))

    configs = {idx: cfg for idx, cfg, _ in jobs}
    was_running = ray.is_initialized()
    started = _connect(ray, settings)  # False for a cluster it joined, which ray.shutdown() only disconnects from
    # max_calls=1: each job in a fresh worker process that exits when the job ends, so nothing a job
    # changed in its process (threads, seeds, registries) reaches the next one, and what the job's
    # libraries clean up at exit (W&B's temporary directories, for one) is cleaned up.
    remote_job = ray.remote(max_calls=1)(_run_job_on_ray)
    if was_running and settings.runtime_env:  # a runtime started by someone else: the jobs carry it
        remote_job = remote_job.options(runtime_env=settings.runtime_env)
    singleton_ref = ray.put(Singleton.get_state())
    context_ref = ray.put(hydra_context)
    task_ref = ray.put(task_function)
    results: dict[int, JobReturn] = {}
    running: dict[Any, tuple[int, Any]] = {}
    output = OutputWatch()
    output.start()
    ended = time.monotonic()
    sigterm = SweepSigterm()
    sigterm.start()  # `kill`: Ctrl-C's path below, not Ray's handler's sudden end
    try:
        for idx, _, bundles in jobs:
            _check_feasible(ray, idx, bundles)
        where = "a local Ray runtime" if started else f"the Ray cluster at {settings.address or 'the current runtime'}"
        log.info("Ray launcher: %d job(s) on %s, sweep output dir: %s", len(jobs), where, sweep_dir)
        queue = list(jobs)
        limit = settings.max_concurrent_jobs or len(jobs)
        while queue or running:
            while queue and len(running) < limit:
                idx, sweep_config, bundles = queue.pop(0)
                pg = placement_group(bundles, strategy="PACK")
                strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0,
                                                            placement_group_capture_child_tasks=True)
                ref = remote_job.options(num_cpus=bundles[0].get("CPU", 0.0), num_gpus=bundles[0].get("GPU", 0.0),
                                         max_retries=0, scheduling_strategy=strategy
                                         ).remote(context_ref, task_ref, sweep_config, singleton_ref)
                running[ref] = (idx, pg)
                log.info("\t#%d : %s  [%s]", idx, " ".join(filter_overrides(sweep_config.hydra.overrides.task)),
                         " + ".join(",".join(f"{k}={v:g}" for k, v in b.items()) for b in bundles))
            ready, _ = ray.wait(list(running), num_returns=1, timeout=settings.poll_s)
            for ref in ready:
                idx, pg = running.pop(ref)
                try:
                    results[idx] = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - the job's process died (OOM kill, node lost)
                    results[idx] = _failed(configs[idx], f"{type(exc).__name__}: {exc}", exc)
                finally:
                    remove_placement_group(pg)
                ended = time.monotonic()
        if results:
            output.drain(since=ended)  # the jobs' last lines, before this driver stops listening
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM
        _cancel(ray, running, settings.cancel_grace_s, by_sigterm=sigterm.received)
        output.drain(since=time.monotonic())  # the stopped jobs' last lines ("[job N] corral: interrupted ...")
        if sigterm.received:  # Ray hands back a plain KeyboardInterrupt: the sweep says SIGTERM, exits 143
            raise Terminated() from None
        raise
    finally:
        output.stop()
        for _, pg in running.values():
            try:
                remove_placement_group(pg)
            except Exception:  # noqa: BLE001 - the runtime may already be gone
                pass
        if not was_running:  # connected here: a runtime it started stops, a joined cluster keeps running
            ray.shutdown()
        sigterm.stop()
    return [results[idx] for idx, _, _ in jobs]


def _cancel(ray: Any, running: dict[Any, tuple[int, Any]], grace_s: float, by_sigterm: bool = False) -> None:
    """Cancel ``running`` jobs: a KeyboardInterrupt in each, then, after ``grace_s``, a kill. ``by_sigterm``:
    SIGTERM stopped the sweep, which reached no job's process (each is a process group of its own)."""
    if not running:
        return
    log.warning("Ray launcher: %s; stopping %d running job(s) (up to %.0f s for snapshots)",
                "SIGTERM" if by_sigterm else "interrupted", len(running), grace_s)
    deadline = time.monotonic() + grace_s
    # On this machine a terminal's Ctrl-C may already have reached the jobs' processes: give them
    # a moment to save their snapshot before a second interrupt could cut the write short.
    settle_s = 0.0 if by_sigterm else min(3.0, grace_s)
    _, pending = ray.wait(list(running), num_returns=len(running), timeout=settle_s)
    for ref in pending:
        ray.cancel(ref, force=False)
    while pending and time.monotonic() < deadline:
        wait_s = min(1.0, max(deadline - time.monotonic(), 0.01))
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=wait_s)
    for ref in pending:
        ray.cancel(ref, force=True)


__all__ = ["LOG_DRAIN_MAX_S", "LOG_QUIET_S", "OutputWatch", "RayLauncherSettings", "job_bundles",
           "launch", "runtime_in_own_process_group"]
