"""``logger=wandb``: each run is one Weights & Biases run, the jobs of a sweep grouped together.

    python train.py logger=[console,csv,wandb] logger.wandb.project=cartpole logger.wandb.entity=my-lab
    python train.py -m seed=1,2,3 logger=[console,wandb]          # three runs in one group (the sweep)
    WANDB_MODE=offline python train.py logger=[console,wandb]     # no network; `wandb sync` later

Needs ``pip install 'corral[wandb]'``. Project, entity, group, tags and mode come from the config
(``mode: null`` leaves it to ``WANDB_MODE`` / ``wandb login``). The resolved config is the run's
config; every epoch's statistics are logged against ``env_steps`` (or ``epoch``); the videos of
``trainer.video_every`` are logged as ``eval/video``. The run's files go to ``<run dir>/wandb/``. The
staging directories W&B makes when it is imported (``tmp…wandb-media``, ``tmp…wandb-artifacts``, which it
removes when the process exits) are made in ``<run dir>/wandb/`` too, not in the system's temporary
directory, so even a run that is killed (``kill -9``, the out-of-memory killer) leaves nothing outside
its run directory. The W&B run id is kept in ``<run dir>/wandb_run.json``, so ``trainer.resume=<run dir>`` continues the same
W&B run (without logging again the epochs it holds); a branch (``trainer.resume=<run>
hydra.run.dir=<new>``) is a W&B run of its own, whose config names the original's run id as
``corral_branched_from``, and the original's run is left as it was. A tracker failure never stops training: it is reported in one ``TrackerWarning`` and the
logger goes quiet for the rest of the run.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping, Optional

from corral import hookimpl
from corral.framework.checks import check
from corral.framework.errors import ConfigError
from corral.framework.logger import Logger
from corral.plugins.loggers._tracking import (
    Guard,
    hydra_job,
    previous_run,
    resolved_config,
    write_run_record,
)

#: Where a run directory keeps its W&B run id.
RUN_FILE = "wandb_run.json"
MODES = ("online", "offline", "disabled", "shared")
#: What W&B refuses in a project name, in ``wandb.init`` (``wandb.Settings.validate_project``):
#: any of these characters, and more than ``PROJECT_MAX_LEN`` characters. (It checks no entity name.)
PROJECT_FORBIDDEN = "/\\#?%:"
PROJECT_MAX_LEN = 128


@dataclass
class WandbLoggerConfig:
    """Settings of the Weights & Biases logger."""

    project: str = field(default="corral", metadata=check(pattern=r"\S.*", describe="a project name", help="W&B project"))
    entity: Optional[str] = field(default=None, metadata={"help": "W&B entity (user or team; null: your default)"})
    group: Optional[str] = field(default=None, metadata={
        "help": "run group (null: the sweep directory for multirun jobs, none for a single run)"})
    tags: list[str] = field(default_factory=list, metadata={"help": "run tags, e.g. [ppo,baseline]"})
    mode: Optional[str] = field(default=None, metadata=check(
        choices=MODES, help="online, offline, disabled or shared (null: WANDB_MODE, else online)"))
    run_name: Optional[str] = field(default=None, metadata={
        "help": "run name (null: from the Hydra job, e.g. 'corral#3 algo=ppo,seed=2')"})
    job_type: Optional[str] = field(default=None, metadata={"help": "W&B job type (e.g. train, sweep)"})
    x_axis: str = field(default="env_steps", metadata=check(choices=("env_steps", "epoch"), help="the metrics' x axis: env_steps or epoch"))
    log_videos: bool = field(default=True, metadata={"help": "log trainer.video_every's videos as wandb.Video"})
    init_timeout_s: float = field(default=60.0, metadata=check(gt=0, help="seconds wandb.init may take before giving up"))


def import_wandb(log_dir: Path | None) -> ModuleType:
    """``import wandb``, with the staging directories W&B makes on import (``tempfile.TemporaryDirectory``
    objects of its own, ``tmp…wandb-media`` and ``tmp…wandb-artifacts``, removed only when the process
    exits normally) made in ``<log_dir>/wandb/`` rather than in the system's temporary directory: a
    process that is killed leaves them in its run directory, not in /tmp. The first import in a
    process decides where they are (in a sweep run in one process, the first job's run directory);
    without ``log_dir``, or when it cannot be made, W&B's default. Raises ImportError without wandb."""
    if "wandb" in sys.modules or log_dir is None:
        import wandb

        return wandb
    staging = log_dir / "wandb"
    try:
        staging.mkdir(parents=True, exist_ok=True)
    except OSError:  # the logger says so (the guard's warning) when wandb.init cannot write there
        import wandb

        return wandb
    previous = tempfile.tempdir
    tempfile.tempdir = str(staging)  # what tempfile.gettempdir() gives while wandb's modules are imported
    try:
        import wandb
    finally:
        tempfile.tempdir = previous
    return wandb


def check_project(project: str) -> None:
    """Refuse a project name that ``wandb.init`` refuses (``a/b``, ``x:y``, over 128 characters): W&B
    says so only when the run starts, and training goes on without it. ``entity/project`` is split
    into the two settings it means."""
    found = [c for c in PROJECT_FORBIDDEN if c in project]
    if found:
        entity, _, name = project.partition("/")
        if found == ["/"] and project.count("/") == 1 and entity.strip() and name.strip():
            what = f"give logger.wandb.entity={entity} logger.wandb.project={name} for project {name!r} of entity {entity!r}"
        else:
            what = "give a name without them"
        raise ConfigError(f"logger.wandb.project must be a W&B project name, without any of "
                          f"{' '.join(PROJECT_FORBIDDEN)}, got {project!r}; {what}")
    if len(project) > PROJECT_MAX_LEN:
        raise ConfigError(f"logger.wandb.project must be a W&B project name of at most {PROJECT_MAX_LEN} characters, "
                          f"got one of {len(project)}; give a shorter name")


def effective_mode(config: WandbLoggerConfig) -> str:
    """The mode W&B runs in: ``logger.wandb.mode``, else ``WANDB_MODE``, else online (``dryrun``, W&B's
    old name of offline, is offline)."""
    mode = (config.mode or os.environ.get("WANDB_MODE") or "online").strip().lower()
    return "offline" if mode == "dryrun" else mode


def failure_hint(config: WandbLoggerConfig) -> str:
    """What to check when W&B fails: the network and the key online; offline (no network, no key), the
    settings and the run directory's disk, and never the advice to go offline."""
    mode = effective_mode(config)
    if mode in ("offline", "disabled"):
        return (f"W&B is in {mode} mode, with no network or key: check the logger.wandb settings and that the run "
                "directory is writable (disk space, permissions)")
    return "check the network and WANDB_API_KEY, or use logger.wandb.mode=offline and `wandb sync` the run later"


class WandbLogger(Logger):
    """Logs one corral run to one W&B run (``reinit='create_new'``: several runs in one process,
    as under Hydra's basic launcher, never mix)."""

    def __init__(self, config: WandbLoggerConfig | None = None, log_dir: Path | None = None) -> None:
        self.config = config or WandbLoggerConfig()
        if self.config.mode is not None and self.config.mode not in MODES:
            raise ConfigError(f"logger.wandb.mode must be one of {', '.join(MODES)} or null, got {self.config.mode!r}")
        if self.config.x_axis not in ("env_steps", "epoch"):
            raise ConfigError(f"logger.wandb.x_axis must be 'env_steps' or 'epoch', got {self.config.x_axis!r}")
        check_project(self.config.project)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.guard = Guard("wandb", hint=failure_hint(self.config))
        self.run: Any = None
        self.exit_code = 0
        self.resumed = False
        self._closed = False
        self._record: dict[str, Any] = {}
        #: The last epoch the W&B run already holds (a run resumed in place re-runs it exactly).
        self.logged_through: int | None = None

    @property
    def run_id(self) -> str | None:
        """The W&B run id (None before the run started or after a failed start)."""
        return self.run.id if self.run is not None else None

    def start(self, cfg: Any = None) -> None:
        """Start (or, after ``trainer.resume``, continue) the W&B run with the resolved config."""
        if self.run is not None or self.guard.failed:
            return
        with self.guard("starting a run"):
            wandb = import_wandb(self.log_dir)

            job = hydra_job()
            previous = previous_run(self.log_dir, RUN_FILE)
            if previous.record and previous.record.get("project") == self.config.project:
                run_id, self.resumed = str(previous.record["run_id"]), True
                self.logged_through = previous.logged_through
            else:
                from wandb.sdk.lib.runid import generate_id

                run_id = generate_id()
            if previous.branched_from:
                self._drop_copied_run_files(previous.branched_from)
            # Kept before wandb.init, so a run that dies during its first epoch still resumes into it.
            self._record = {"project": self.config.project, "entity": self.config.entity, "run_id": run_id}
            if self.logged_through is not None:
                self._record["logged_through"] = self.logged_through
            write_run_record(self.log_dir, RUN_FILE, self._record)
            config = resolved_config(cfg)
            if previous.branched_from:
                config["corral_branched_from"] = previous.branched_from
            if job.num is not None:
                config.setdefault("hydra_job", {"name": job.name, "num": job.num, "overrides": job.override_dirname,
                                                "sweep_dir": job.sweep_dir})
            run = wandb.init(
                project=self.config.project,
                entity=self.config.entity,
                group=self.config.group or job.sweep_group(),
                tags=list(self.config.tags or []) or None,
                mode=self.config.mode,  # type: ignore[arg-type]
                name=self.config.run_name or job.run_name(),
                job_type=self.config.job_type,
                id=run_id,
                resume="allow",
                dir=str(self.log_dir) if self.log_dir is not None else None,
                config=config,
                reinit="create_new",
                settings=wandb.Settings(init_timeout=self.config.init_timeout_s),
            )
            step = self.config.x_axis
            run.define_metric(step)
            run.define_metric("*", step_metric=step)
            self.run = run

    def log(self, epoch: int, stats: Mapping[str, float]) -> None:
        """Log the epoch's statistics as one W&B history row."""
        if self.run is None:
            self.start(None)
        if self.run is None or self.guard.failed or self._logged_before(epoch):
            return
        with self.guard("logging metrics"):
            row: dict[str, Any] = {k: v for k, v in stats.items() if isinstance(v, (int, float))}
            row["epoch"] = int(epoch)
            row["env_steps"] = int(stats.get("env_steps", 0))
            self.run.log(row)
            self._record["logged_through"] = int(epoch)
            write_run_record(self.log_dir, RUN_FILE, self._record)

    def _logged_before(self, epoch: int) -> bool:
        """Whether the W&B run holds ``epoch`` already: a run resumed in place runs again the epochs
        after its snapshot, exactly, and W&B would keep both rows."""
        return self.logged_through is not None and epoch <= self.logged_through

    def _drop_copied_run_files(self, run_id: str) -> None:
        """Remove the original's offline run files that a branch copied into ``<run dir>/wandb/``: a
        ``wandb sync`` of the branch would send them again, as the branch's."""
        if self.log_dir is None:
            return
        import shutil

        for path in (self.log_dir / "wandb").glob(f"*run-*-{run_id}"):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
        latest = self.log_dir / "wandb" / "latest-run"
        if latest.is_symlink() and not latest.exists():
            latest.unlink()

    def log_video(self, epoch: int, path: Path, stats: Mapping[str, float]) -> None:
        """Log the evaluation video (``trainer.video_every``) as ``eval/video`` at the epoch's step."""
        if not self.config.log_videos or self.run is None or self.guard.failed or self._logged_before(epoch):
            return
        with self.guard("logging a video"):
            import wandb

            self.run.log({"eval/video": wandb.Video(str(path), format="mp4"), "epoch": int(epoch),
                          "env_steps": int(stats.get("env_steps", 0))})

    def end_status(self, error: BaseException | None) -> None:
        """Remember how training ended: exit code 0, or 1 after an error or interrupt."""
        self.exit_code = 0 if error is None else 1

    def close(self) -> None:
        """Finish the W&B run (offline: its files are complete in ``<run dir>/wandb/``)."""
        if self._closed:
            return
        self._closed = True
        if self.run is None or self.guard.failed:
            return
        with self.guard("finishing the run"):
            self.run.finish(exit_code=self.exit_code)
            import wandb

            if wandb.run is None:  # no run of anyone else's left in this process
                # Stop W&B's service process now, while this process can wait for it: a process that
                # is ended from outside (a Ray launcher's job) would leave the service's socket
                # directory in /tmp behind. The next wandb.init starts a new service.
                wandb.teardown()


def build_wandb_logger(config: WandbLoggerConfig | None, *, log_dir: Path | None = None) -> WandbLogger:
    """Build the W&B logger; says which extra to install when wandb is missing."""
    try:
        import_wandb(Path(log_dir) if log_dir is not None else None)
    except ImportError:
        raise ConfigError("logger=wandb needs wandb: pip install 'corral[wandb]' (or pip install wandb)") from None
    return WandbLogger(config, log_dir=log_dir)


def _mine(trainer: Any) -> list[WandbLogger]:
    return [lg for lg in getattr(trainer, "loggers", ()) if isinstance(lg, WandbLogger)]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``logger=wandb``."""
    register("logger", "wandb", build_wandb_logger, config=WandbLoggerConfig,
             help="Weights & Biases run per job, grouped by sweep (pip install 'corral[wandb]')")


@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """A project name that W&B refuses fails before the run starts."""
    node = (cfg.get("logger") or {}).get("wandb")
    if node is not None and node.get("project") is not None:
        check_project(str(node.get("project")))


@hookimpl
def corral_run_start(trainer: Any, cfg: Any) -> None:
    """Start the W&B run with the run's resolved config."""
    for logger in _mine(trainer):
        logger.start(cfg)


@hookimpl
def corral_run_end(trainer: Any, error: BaseException | None) -> None:
    """Remember how training ended (the run is finished when the logger closes)."""
    for logger in _mine(trainer):
        logger.end_status(error)


__all__ = ["WandbLogger", "WandbLoggerConfig", "build_wandb_logger", "import_wandb"]
