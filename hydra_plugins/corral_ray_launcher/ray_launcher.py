"""The Hydra ``Launcher`` behind ``hydra/launcher=ray`` (settings in corral/conf/hydra/launcher/ray.yaml).

A job whose worker process died (Ray's ``WorkerCrashedError``: the out-of-memory killer's SIGKILL, a
crash; ``OutOfMemoryError``: Ray's memory monitor; a node lost) was a plain ``RuntimeError`` failed job:
Hydra's report, no line for the job, no ``summary.json``. :func:`process_died` makes it what every
corral launcher makes of a dead job (:mod:`corral.launchers.job_death`): one ``[job N] corral: error:``
line, a failed ``summary.json``, and corral's one line at the end of the sweep.

Kept import-light: Hydra imports every module under ``hydra_plugins`` when it scans for plugins,
so Ray is imported only when a sweep is launched.
"""

from __future__ import annotations

import re
import time
from typing import Any, Optional, Sequence

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

#: Ray's errors for a task whose worker process (or node) died while the job ran, as
#: corral.launchers.ray records them in a failed job's error (``job N (...) ended with <name>: <message>``).
DEATHS = ("WorkerCrashedError", "OutOfMemoryError", "NodeDiedError", "LocalRayletDiedError", "ActorDiedError",
          "OwnerDiedError")


class CorralRayLauncher(Launcher):
    """Runs each job of a multirun as a Ray task in a placement group sized from the job's own config."""

    def __init__(
        self,
        address: str = "",
        num_cpus: Optional[float] = None,
        object_store_memory: Optional[int] = None,
        driver_cpus: float = 1.0,
        driver_gpus: float = 0.0,
        job_cpus: Optional[float] = None,
        max_concurrent_jobs: Optional[int] = None,
        cancel_grace_s: float = 30.0,
        poll_s: float = 1.0,
        runtime_env: Optional[Any] = None,
        **ignored: Any,
    ) -> None:
        from corral.launchers.ray import RayLauncherSettings

        self.settings = RayLauncherSettings(
            address=address, num_cpus=num_cpus, object_store_memory=object_store_memory, driver_cpus=driver_cpus,
            driver_gpus=driver_gpus, job_cpus=job_cpus, max_concurrent_jobs=max_concurrent_jobs,
            cancel_grace_s=cancel_grace_s, poll_s=poll_s, runtime_env=runtime_env,
        )
        self.settings.validate()
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    @classmethod
    def check_config(cls, cfg: Any, overrides: Sequence[str] = ()) -> None:
        """Raise a one-line ConfigError before the sweep starts for a setting out of range, or a
        cluster address where no Ray cluster answers (``check_sweep_plugins`` calls it)."""
        from corral.parallel.ray_runtime import check_cluster_address

        launcher = cls(**{str(k): cfg[k] for k in cfg if k != "_target_"})  # its __init__ validates the settings
        if launcher.settings.address:
            check_cluster_address(launcher.settings.address, "hydra.launcher.address")

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        """Remember what the jobs need."""
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Run every job on Ray; return their results in job order."""
        from corral.framework.sweep_jobs import note_sweep_dir
        from corral.launchers.ray import launch

        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        note_sweep_dir(self.config.hydra.sweep.dir, self.config.hydra.runtime.get("cwd"))  # Ctrl-C's line names it
        started = time.time()
        returns = launch(self.settings, self.hydra_context, self.task_function, self.config, job_overrides,
                         initial_job_idx)
        return [process_died(ret, started) for ret in returns]


def process_died(ret: JobReturn, started: float) -> JobReturn:
    """``ret`` itself, or when it is the failed result of a job whose worker process died (one of
    :data:`DEATHS`), the failed ``JobReturn`` of :mod:`corral.launchers.job_death`: the job's
    ``[job N] corral: error:`` line is printed and its failed ``summary.json`` written (the pid is the
    one the job wrote in its run directory's lock file). ``started``: when the sweep's jobs started."""
    from hydra.core.utils import JobStatus

    error = getattr(ret, "_return_value", None)
    cause = getattr(error, "__cause__", None) if ret.status == JobStatus.FAILED else None
    if cause is None or type(cause).__name__ not in DEATHS or ret.cfg is None:
        return ret
    from corral.launchers.job_death import died, failed_return

    name, message = type(cause).__name__, str(cause).strip()
    first = re.split(r"(?<=\.)\s|\n", message, maxsplit=1)[0].rstrip(".") if message else ""
    words = f"Ray: {name}{f': {first}' if first else ''}"
    if name == "OutOfMemoryError":
        words += "; Ray's memory monitor killed it: run fewer jobs at once (hydra.launcher.max_concurrent_jobs)"
    overrides = list(ret.overrides or [])
    return failed_return(ret.cfg, overrides, died(ret.cfg, overrides=overrides, started=started, unknown=words))
