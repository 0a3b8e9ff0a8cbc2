"""``logger=mlflow``: each run is one MLflow run: the resolved config as params, metrics every epoch,
``summary.json``, videos and (if asked) the final snapshot as artifacts.

    python train.py logger=[console,csv,mlflow]                       # ./mlruns (file store)
    python train.py logger=[console,mlflow] logger.mlflow.tracking_uri=http://127.0.0.1:5000
    python train.py -m seed=1,2 logger=[console,csv,mlflow]            # two MLflow runs
    mlflow ui --backend-store-uri ./mlruns                             # look at them

Needs ``pip install 'corral[mlflow]'``. The run name comes from the Hydra job (``corral#3
algo=ppo,seed=2`` for job 3 of a sweep); tags record the run directory, the job number and the sweep
directory. The MLflow run id is kept in ``<run dir>/mlflow_run.json``, so ``trainer.resume=<run dir>``
continues the same MLflow run (without logging again the epochs it holds); a branch
(``trainer.resume=<run> hydra.run.dir=<new>``) is an MLflow run of its own, tagged
``corral.branched_from`` with the original's run id, whose run is left as it was. A resume may
give the run a new ``run_name`` and new ``tags`` (set on it); MLflow params cannot change, so a
param the resume changed (``trainer.n_epochs``) keeps its first value and the new one is the tag
``corral.resumed.<param>``; a run cannot move to another experiment, so a new
``logger.mlflow.experiment`` is one warning and the run goes on where it is (which
``mlflow_run.json`` records). A tracker failure (server down, disk full) never stops training: it
is reported in one ``TrackerWarning`` and the logger goes quiet for the rest of the run.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import urllib.parse
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

from corral import hookimpl
from corral.framework.checks import check
from corral.framework.errors import ConfigError, CorralWarning
from corral.framework.logger import Logger
from corral.plugins.loggers._tracking import (
    Guard,
    flatten,
    hydra_job,
    previous_run,
    resolved_config,
    write_run_record,
)

#: Where a run directory keeps its MLflow run id.
RUN_FILE = "mlflow_run.json"
#: MLflow limits: params per batch, length of a param value.
_PARAM_BATCH, _PARAM_MAX_LEN = 100, 6000
#: The tag that keeps a param's value on resume (``corral.resumed.trainer.n_epochs``): MLflow params cannot change.
RESUMED_TAG = "corral.resumed."


class ResumeExperimentWarning(CorralWarning):
    """A resume asked for another MLflow experiment; the run goes on in the one it is in."""


def _given_on_command_line(key: str) -> bool:
    """Whether this Hydra job's overrides set ``key`` (outside Hydra, library use: the config is the caller's, so yes)."""
    from corral.framework.override_keys import job_given_keys

    given = job_given_keys()
    return given is None or key in given


@dataclass
class MLflowLoggerConfig:
    """Settings of the MLflow logger."""

    tracking_uri: Optional[str] = field(default=None, metadata=check(
        pattern=r"\S.*", describe="an MLflow tracking URI (or null)",
        help="MLflow tracking URI: file:./mlruns, sqlite:///mlflow.db, http://host:5000, databricks "
             "(null: MLFLOW_TRACKING_URI, else file:./mlruns)"))
    experiment: str = field(default="corral", metadata=check(
        pattern=r"\S.*", describe="an experiment name", help="MLflow experiment name (created if missing)"))
    run_name: Optional[str] = field(default=None, metadata={
        "help": "run name (null: from the Hydra job, e.g. 'corral#3 algo=ppo,seed=2')"})
    tags: dict[str, str] = field(default_factory=dict, metadata={"help": "extra run tags"})
    x_axis: str = field(default="env_steps", metadata=check(choices=("env_steps", "epoch"), help="the metrics' step: env_steps or epoch"))
    log_snapshot: bool = field(default=False, metadata={"help": "upload the final snapshot as an artifact"})
    log_videos: bool = field(default=True, metadata={"help": "upload trainer.video_every's videos as artifacts"})
    http_retries: int = field(default=2, metadata=check(ge=0, help="retries of a failed request to a tracking server (MLFLOW_HTTP_REQUEST_MAX_RETRIES wins)"))
    http_timeout_s: int = field(default=10, metadata=check(gt=0, help="seconds per request to a tracking server (MLFLOW_HTTP_REQUEST_TIMEOUT wins)"))


#: Open loggers by run directory, for the summary that is written after the loggers are closed.
_BY_RUN_DIR: "weakref.WeakValueDictionary[str, MLflowLogger]" = weakref.WeakValueDictionary()


#: Where runs go when neither logger.mlflow.tracking_uri nor MLFLOW_TRACKING_URI says.
DEFAULT_TRACKING_URI = "file:./mlruns"


def tracking_uri(config: MLflowLoggerConfig) -> str:
    """The store runs go to: ``logger.mlflow.tracking_uri``, else the environment's
    ``MLFLOW_TRACKING_URI`` (as MLflow's own clients read it), else ``file:./mlruns``."""
    return config.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


#: ``host:port`` (``127.0.0.1:5000``, ``tracking.lab:5000/x``): a server address without its scheme.
_SERVER_WITHOUT_SCHEME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*:\d+(/.*)?")


def check_tracking_uri(config: MLflowLoggerConfig) -> None:
    """Refuse a tracking URI that names a server without ``http://``: MLflow takes ``127.0.0.1:5000``
    for a local directory of that name (runs land there in silence) and ``localhost:5000`` for an
    unknown scheme."""
    uri = tracking_uri(config)
    if "://" in uri or not _SERVER_WITHOUT_SCHEME.fullmatch(uri):
        return
    source = "logger.mlflow.tracking_uri" if config.tracking_uri else "MLFLOW_TRACKING_URI"
    scheme = urllib.parse.urlparse(uri).scheme
    taken = (f"would read {scheme!r} as its scheme" if scheme else
             f"would write its runs to a local directory named {uri!r}, in silence")
    raise ConfigError(f"{source}={uri} is a server address without its scheme: MLflow {taken}; give "
                      f"http://{uri} (or file:./{uri} for a directory of that name)")


#: The tracking-store schemes of MLflow itself, for when its registry cannot be read (an MLflow
#: that moved it): a local path or ``file:``, a database through SQLAlchemy, a server, Databricks.
DOCUMENTED_SCHEMES = ("file", "databricks", "http", "https", "postgresql", "mysql", "sqlite", "mssql")
#: Database schemes (``sqlite:///mlflow.db``, ``postgresql+psycopg2://...``): MLflow registers them only with SQLAlchemy.
_DATABASE_SCHEMES = ("postgresql", "mysql", "sqlite", "mssql")
#: Unity Catalog URIs: registered, but refused as a tracking store by MLflow's client.
_UNITY_CATALOG = ("databricks-uc", "uc")
#: Schemes MLflow always registers, whatever else is installed.
_ALWAYS_REGISTERED = ("file", "databricks", "http", "https")


def tracking_schemes() -> tuple[str, ...]:
    """The schemes MLflow can open a tracking store for, asked of MLflow's own tracking store
    registry (its built-in stores, SQLAlchemy's databases where installed, and the stores that
    plugins register): ``file``, ``http``, ``sqlite``, ...; the empty scheme (a local path) and
    Unity Catalog (which MLflow's client refuses as a tracking store) are left out. Reading it
    imports MLflow and opens nothing; without MLflow, or where it moved, :data:`DOCUMENTED_SCHEMES`."""
    try:
        from mlflow.tracking._tracking_service import utils

        registered = list(utils._tracking_store_registry._registry)
        unity = {getattr(utils, "_DATABRICKS_UNITY_CATALOG_SCHEME", "databricks-uc"),
                 getattr(utils, "_OSS_UNITY_CATALOG_SCHEME", "uc"), *_UNITY_CATALOG}
    except Exception:  # noqa: BLE001 - ImportError, or a private name MLflow moved: the documented list
        return DOCUMENTED_SCHEMES
    return tuple(s for s in registered if isinstance(s, str) and s and s not in unity)


def uri_scheme(uri: str) -> str:
    """The scheme MLflow picks a tracking store by: ``''`` for a local path, ``sqlite`` for
    ``sqlite:///m.db``, ``postgresql`` for ``postgresql+psycopg2://...``, ``databricks`` for
    ``databricks`` and ``databricks://profile`` (as ``mlflow.utils.uri.get_uri_scheme`` reads them)."""
    if uri in ("databricks", *_UNITY_CATALOG):
        return uri
    scheme = urllib.parse.urlparse(uri).scheme.lower()
    for database in _DATABASE_SCHEMES:
        if scheme.startswith(database):
            return database
    return "" if len(scheme) == 1 and scheme.isalpha() else scheme  # C:\runs: a Windows path


def check_tracking_scheme(config: MLflowLoggerConfig) -> None:
    """Refuse a tracking URI whose scheme MLflow has no tracking store for (``foo://bar``,
    ``s3://bucket``: an artifact store, not a tracking store): MLflow refuses it only when the run
    starts, and training goes on without MLflow. The supported schemes are MLflow's own
    (:func:`tracking_schemes`)."""
    uri = tracking_uri(config)
    scheme = uri_scheme(uri)
    if scheme in ("", *_ALWAYS_REGISTERED):  # the common cases, without importing MLflow
        return
    supported = tracking_schemes()
    if scheme in supported:
        return
    source = "logger.mlflow.tracking_uri" if config.tracking_uri else "MLFLOW_TRACKING_URI"
    if scheme in _UNITY_CATALOG:
        why = "is a Unity Catalog URI, which MLflow's client refuses as a tracking store"
    elif scheme in _DATABASE_SCHEMES:
        why = f"is a {scheme} database, which MLflow opens only with SQLAlchemy (pip install sqlalchemy)"
    else:
        why = f"has a scheme MLflow has no tracking store for ({scheme!r})"
    raise ConfigError(f"{source}={uri} {why}; give a URI of scheme {', '.join(supported)} "
                      f"(e.g. file:./mlruns, sqlite:///mlflow.db, http://host:5000) or a local directory")


class MLflowLogger(Logger):
    """Logs one corral run to one MLflow run through ``MlflowClient`` (no global active run, so
    several runs in one process, as under Hydra's basic launcher, never mix)."""

    def __init__(self, config: MLflowLoggerConfig | None = None, log_dir: Path | None = None) -> None:
        self.config = config or MLflowLoggerConfig()
        if self.config.x_axis not in ("env_steps", "epoch"):
            raise ConfigError(f"logger.mlflow.x_axis must be 'env_steps' or 'epoch', got {self.config.x_axis!r}")
        check_tracking_uri(self.config)
        check_tracking_scheme(self.config)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.guard = Guard("mlflow", hint="check logger.mlflow.tracking_uri (an http:// one needs its `mlflow server` running)")
        self.client: Any = None
        self.run_id: str | None = None
        self.status = "FINISHED"
        self.resumed = False
        self._closed = False
        self._record: dict[str, Any] = {}
        #: The last epoch the MLflow run already holds (a run resumed in place re-runs it exactly).
        self.logged_through: int | None = None
        if self.log_dir is not None:
            _BY_RUN_DIR[str(self.log_dir.resolve())] = self

    # ------------------------------------------------------------------ start
    def start(self, cfg: Any = None) -> None:
        """Open (or, after ``trainer.resume``, reopen) the MLflow run and log the config as params."""
        if self.run_id is not None or self.guard.failed:
            return
        uri = tracking_uri(self.config)
        with self.guard(f"starting a run at {uri}"):
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient

            if uri.startswith("file:") or "://" not in uri:
                # MLflow 3 keeps its file store in maintenance mode behind this switch; the file
                # store is what `mlflow ui` reads and what concurrent sweep jobs share safely.
                os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(self.config.http_retries))
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(self.config.http_timeout_s))
            client = MlflowClient(tracking_uri=uri)
            job = hydra_job()
            previous = previous_run(self.log_dir, RUN_FILE)
            record = previous.record
            run_id = None
            experiment = self.config.experiment
            if record and record.get("tracking_uri") == uri:
                try:
                    client.update_run(record["run_id"], status="RUNNING")
                    run_id, self.resumed = record["run_id"], True
                    self.logged_through = previous.logged_through
                except Exception:  # the old run is gone (another store): start a new one
                    run_id = None
            if run_id is not None:
                experiment = self._continue(client, run_id, cfg)
            else:
                tags = {"corral.run_dir": str(self.log_dir.resolve()) if self.log_dir else "",
                        "corral.job_name": job.name, "corral.overrides": job.override_dirname}
                if job.num is not None:
                    tags["corral.job_num"] = str(job.num)
                if job.sweep_dir:
                    tags["corral.sweep_dir"] = job.sweep_dir
                if previous.branched_from:
                    tags["corral.branched_from"] = previous.branched_from
                tags.update({str(k): str(v) for k, v in (self.config.tags or {}).items()})
                run = client.create_run(_experiment_id(client, self.config.experiment, uri),
                                        run_name=self.config.run_name or job.run_name(), tags=tags)
                run_id = run.info.run_id
                params = [Param(k, _param_value(v)) for k, v in flatten(resolved_config(cfg)).items()]
                for i in range(0, len(params), _PARAM_BATCH):
                    client.log_batch(run_id, params=params[i:i + _PARAM_BATCH])
            self.client, self.run_id = client, run_id
            self._record = {"tracking_uri": uri, "experiment": experiment, "run_id": run_id}
            if self.logged_through is not None:
                self._record["logged_through"] = self.logged_through
            write_run_record(self.log_dir, RUN_FILE, self._record)

    def _continue(self, client: Any, run_id: str, cfg: Any) -> str:
        """Bring the continued MLflow run up to this resume's settings; return the experiment it is in.

        A run cannot move to another experiment: a different ``logger.mlflow.experiment`` given on the
        command line is one :class:`ResumeExperimentWarning`. A new ``run_name`` and ``tags`` are set on
        the run. MLflow params cannot change: the resumed value of a changed param goes into the tag
        ``corral.resumed.<param>`` (the param keeps the first run's value; ``logger.mlflow.experiment``
        excepted, since the run stays where it is); a param the run lacks is logged."""
        from mlflow.entities import Param, RunTag

        run = client.get_run(run_id)
        experiment = str(client.get_experiment(run.info.experiment_id).name)
        if self.config.experiment != experiment and _given_on_command_line("logger.mlflow.experiment"):
            warnings.warn(ResumeExperimentWarning(
                f"logger.mlflow.experiment={self.config.experiment} is ignored: the resumed MLflow run {run_id} "
                f"is in experiment {experiment!r} and MLflow cannot move a run to another experiment; drop the "
                f"override to go on there, or start a new run (a new hydra.run.dir, without trainer.resume) "
                f"to log to {self.config.experiment!r}"), stacklevel=2)
        if self.config.run_name and self.config.run_name != run.info.run_name:
            client.update_run(run_id, name=self.config.run_name)
        have = dict(run.data.tags)
        tags = {str(k): str(v) for k, v in (self.config.tags or {}).items()}
        params: list[Param] = []
        logged = dict(run.data.params)
        for key, value in flatten(resolved_config(cfg)).items():
            text = _param_value(value)
            if key == "logger.mlflow.experiment":
                continue  # the run stays in its experiment (warned above); a tag would say otherwise
            if key not in logged:
                params.append(Param(key, text))
            elif text != logged[key] or RESUMED_TAG + key in have:
                tags[RESUMED_TAG + key] = text
        changed = [RunTag(k, v) for k, v in tags.items() if have.get(k) != v]
        for i in range(0, len(changed), _PARAM_BATCH):
            client.log_batch(run_id, tags=changed[i:i + _PARAM_BATCH])
        for i in range(0, len(params), _PARAM_BATCH):
            client.log_batch(run_id, params=params[i:i + _PARAM_BATCH])
        return experiment

    # ------------------------------------------------------------------ per epoch
    def log(self, epoch: int, stats: Mapping[str, float]) -> None:
        """Log the epoch's statistics as metrics."""
        if self.run_id is None:
            self.start(None)
        if self.guard.failed or self.run_id is None or self._logged_before(epoch):
            return
        with self.guard("logging metrics"):
            from mlflow.entities import Metric

            step = int(stats.get("env_steps", epoch)) if self.config.x_axis == "env_steps" else int(epoch)
            now = int(time.time() * 1000)
            metrics = [Metric(_metric_key(k), float(v), now, step) for k, v in stats.items()
                       if isinstance(v, (int, float))]
            for i in range(0, len(metrics), 1000):
                self.client.log_batch(self.run_id, metrics=metrics[i:i + 1000])
            self._record["logged_through"] = int(epoch)
            write_run_record(self.log_dir, RUN_FILE, self._record)

    def _logged_before(self, epoch: int) -> bool:
        """Whether the MLflow run holds ``epoch`` already: a run resumed in place runs again the epochs
        after its snapshot, exactly, and MLflow would keep both values of each metric at that step."""
        return self.logged_through is not None and epoch <= self.logged_through

    def log_video(self, epoch: int, path: Path, stats: Mapping[str, float]) -> None:
        """Upload the evaluation video (``trainer.video_every``) as an artifact under ``videos/``."""
        if not self.config.log_videos or self.guard.failed or self.run_id is None or self._logged_before(epoch):
            return
        with self.guard("uploading a video"):
            self.client.log_artifact(self.run_id, str(path), artifact_path="videos")

    # ------------------------------------------------------------------ end
    def end_status(self, error: BaseException | None) -> None:
        """Remember how training ended: FINISHED, KILLED (Ctrl-C, SIGTERM) or FAILED."""
        if error is None:
            self.status = "FINISHED"
        else:
            self.status = "KILLED" if isinstance(error, KeyboardInterrupt) or type(error).__name__ in (
                "TrainingInterrupted", "Terminated") else "FAILED"

    def close(self) -> None:
        """Upload the final snapshot (if asked) and end the MLflow run."""
        if self._closed:
            return
        self._closed = True
        if self.run_id is None or self.guard.failed:
            return
        if self.config.log_snapshot and self.log_dir is not None:
            with self.guard("uploading the final snapshot"):
                snapshot = _latest_snapshot(self.log_dir)
                if snapshot is not None:
                    self.client.log_artifact(self.run_id, str(snapshot), artifact_path="snapshots")
        with self.guard("ending the run"):
            self.client.set_terminated(self.run_id, status=self.status)

    def log_summary(self, path: Path) -> None:
        """Upload the run's ``summary.json`` (written after the loggers are closed)."""
        if self.run_id is None or self.guard.failed or not path.is_file():
            return
        with self.guard("uploading summary.json"):
            self.client.log_artifact(self.run_id, str(path))


#: The lock file, in a local file store's root, that makes finding or creating an experiment one step.
EXPERIMENT_LOCK = ".corral-experiment.lock"


def local_store_root(uri: str) -> Path | None:
    """The directory of a local file store (``file:`` URI or a plain path); None for a server or database."""
    if uri.startswith("file:"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path))
    if "://" in uri or ":" in uri or uri.split("/", 1)[0] == "databricks":
        return None
    return Path(uri)


@contextlib.contextmanager
def experiment_lock(uri: str) -> Iterator[None]:
    """Hold an exclusive lock on a local file store while an experiment is found or created.

    A server (or a database) refuses a second experiment of the same name, so the loser of a race
    finds the winner's. MLflow's file store does not: two sweep jobs that both miss the experiment
    both create one, and their runs land in two experiments of the same name. Elsewhere this does
    nothing."""
    root = local_store_root(uri)
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        fcntl = None  # type: ignore[assignment]
    if root is None or fcntl is None:
        yield
        return
    root.mkdir(parents=True, exist_ok=True)
    with open(root / EXPERIMENT_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _experiment_id(client: Any, name: str, uri: str) -> str:
    """The id of experiment ``name``, created if missing (sweep jobs may race to create it)."""
    with experiment_lock(uri):
        found = client.get_experiment_by_name(name)
        if found is not None:
            return str(found.experiment_id)
        try:
            return str(client.create_experiment(name))
        except Exception:
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
            return str(found.experiment_id)


def _param_value(value: Any) -> str:
    text = "None" if value is None else str(value)
    return text if len(text) <= _PARAM_MAX_LEN else text[:_PARAM_MAX_LEN - 3] + "..."


def _metric_key(key: str) -> str:
    """MLflow metric names allow letters, digits, ``_ - . space : /``; anything else becomes ``_``."""
    return "".join(c if c.isalnum() or c in "_-. :/" else "_" for c in key)


def _latest_snapshot(log_dir: Path) -> Path | None:
    directory = log_dir / "snapshots"
    latest = directory / "latest"
    if latest.is_file():
        path = directory / latest.read_text().strip()
        if path.is_file():
            return path
    found = sorted(directory.glob("epoch_*.pt"))
    return found[-1] if found else None


def build_mlflow_logger(config: MLflowLoggerConfig | None, *, log_dir: Path | None = None) -> MLflowLogger:
    """Build the MLflow logger; says which extra to install when MLflow is missing."""
    try:
        import mlflow  # noqa: F401
    except ImportError:
        raise ConfigError("logger=mlflow needs MLflow: pip install 'corral[mlflow]' (or pip install mlflow)") from None
    return MLflowLogger(config, log_dir=log_dir)


def _mine(trainer: Any) -> list[MLflowLogger]:
    return [lg for lg in getattr(trainer, "loggers", ()) if isinstance(lg, MLflowLogger)]


@hookimpl
def corral_register(register: Any) -> None:
    """Register ``logger=mlflow``."""
    register("logger", "mlflow", build_mlflow_logger, config=MLflowLoggerConfig,
             help="MLflow run per job: config as params, metrics per epoch, artifacts (pip install 'corral[mlflow]')")


@hookimpl
def corral_validate_config(cfg: Any) -> None:
    """A tracking URI that would not reach its server, or that MLflow has no tracking store for,
    fails before the run starts."""
    node = (cfg.get("logger") or {}).get("mlflow")
    if node is not None:
        config = MLflowLoggerConfig(tracking_uri=node.get("tracking_uri"))
        check_tracking_uri(config)
        check_tracking_scheme(config)


@hookimpl
def corral_run_start(trainer: Any, cfg: Any) -> None:
    """Open the MLflow run with the run's resolved config."""
    for logger in _mine(trainer):
        logger.start(cfg)


@hookimpl
def corral_run_end(trainer: Any, error: BaseException | None) -> None:
    """Remember how training ended (the run is ended when the logger closes)."""
    for logger in _mine(trainer):
        logger.end_status(error)


@hookimpl
def corral_run_summary(log_dir: Path, summary: dict[str, Any]) -> None:
    """Upload ``summary.json`` to the run's MLflow run."""
    logger = _BY_RUN_DIR.pop(str(Path(log_dir).resolve()), None)
    if logger is not None:
        logger.log_summary(Path(log_dir) / "summary.json")


__all__ = ["MLflowLogger", "MLflowLoggerConfig", "build_mlflow_logger"]
