"""``logger=mlflow`` for real: a file store read back with ``mlflow.search_runs``, a two-job joblib sweep,
a resumed run, a local ``mlflow server`` started by the test, and an unreachable server that only warns.

Every run is ``python train.py`` in a subprocess, as a user runs it.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

mlflow = pytest.importorskip("mlflow")

ROOT = Path(__file__).resolve().parents[3]
TRAIN = ROOT / "train.py"
#: Two epochs of ~500 steps, an evaluation every epoch.
TINY = ["trainer.max_env_steps=1000", "trainer.batch_size=500", "trainer.eval_every=1", "trainer.eval_episodes=1",
        "trainer.progress=false"]


def train(cwd: Path, *overrides: str, timeout: float = 240, **env: str) -> subprocess.CompletedProcess[str]:
    """``python train.py <overrides>`` in ``cwd``; never hangs."""
    full_env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "MLFLOW_ALLOW_FILE_STORE": "true",
                **env}  # the default store unless a test sets MLFLOW_TRACKING_URI
    proc = subprocess.run([sys.executable, str(TRAIN), *overrides], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)
    return proc


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"rc={proc.returncode}\n--- stdout:\n{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-5000:]}"


def progress(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def client(uri: str):
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def runs_of(uri: str, experiment: str = "corral") -> list:
    """Every run of ``experiment`` at ``uri``, through ``mlflow.search_runs``, oldest first."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(uri)
    try:
        runs = mlflow.search_runs(experiment_names=[experiment], output_format="list")
    finally:
        mlflow.set_tracking_uri(None)
    return sorted(runs, key=lambda r: r.info.start_time)


def check_run(c, run, run_dir: Path) -> None:
    """The run holds the run directory's config as params and progress.csv's rows as metrics."""
    summary = json.loads((run_dir / "summary.json").read_text())
    params = run.data.params
    assert params["algo.name"] == "ppo" and params["env.id"] == "CartPole-v1"
    assert params["seed"] == str(summary["config"]["seed"])
    assert params["trainer.batch_size"] == "500" and params["policy.hidden_sizes"] == "[64, 64]"
    rows = progress(run_dir)
    history = c.get_metric_history(run.info.run_id, "train/return_mean")
    assert [(m.step, m.value) for m in history] == [
        (int(float(r["env_steps"])), pytest.approx(float(r["train/return_mean"]))) for r in rows]
    assert [m.value for m in c.get_metric_history(run.info.run_id, "eval/return_mean")] == [
        pytest.approx(float(r["eval/return_mean"])) for r in rows]
    assert run.info.status == "FINISHED"
    assert run.data.tags["corral.run_dir"] == str(run_dir.resolve())
    assert json.loads((run_dir / "mlflow_run.json").read_text())["run_id"] == run.info.run_id


def test_file_store_run_with_params_metrics_and_artifacts(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = train(tmp_path, *TINY, "logger=[console,csv,mlflow]", "logger.mlflow.log_snapshot=true",
                 "logger.mlflow.tags={team: rl}", "trainer.video_every=2", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, output(proc)
    assert "logger failed" not in proc.stderr, output(proc)
    uri = f"file:{tmp_path / 'mlruns'}"  # the default file:./mlruns, from the run's working directory
    (run,) = runs_of(uri)
    c = client(uri)
    check_run(c, run, run_dir)
    # The run name comes from the Hydra job: its name and overrides.
    assert run.info.run_name.startswith("corral ") and "trainer.batch_size=500" in run.info.run_name
    assert run.data.tags["team"] == "rl"
    artifacts = {a.path for a in c.list_artifacts(run.info.run_id)}
    assert artifacts == {"summary.json", "snapshots", "videos"}
    assert [a.path for a in c.list_artifacts(run.info.run_id, "snapshots")] == ["snapshots/epoch_000002.pt"]
    # trainer.video_every=2: the second evaluation's video, as the run directory has it.
    (video,) = sorted((run_dir / "videos").glob("*.mp4"))
    assert [(a.path, a.file_size) for a in c.list_artifacts(run.info.run_id, "videos")] == [
        (f"videos/{video.name}", video.stat().st_size)]
    local = Path(c.download_artifacts(run.info.run_id, "summary.json", str(tmp_path / "dl")))
    assert json.loads(local.read_text()) == json.loads((run_dir / "summary.json").read_text())


def test_mlflow_tracking_uri_from_the_environment_when_the_config_gives_none(tmp_path: Path) -> None:
    """``MLFLOW_TRACKING_URI``, as MLflow's own clients read it, is used when ``logger.mlflow.tracking_uri``
    is null (it was ignored: the config's file:./mlruns won); the config's URI wins over it; an empty
    one is one line before the run starts."""
    store, other = f"file:{tmp_path / 'from_env'}", f"file:{tmp_path / 'from_config'}"
    proc = train(tmp_path, *TINY, "logger=[csv,mlflow]", f"hydra.run.dir={tmp_path / 'a'}", MLFLOW_TRACKING_URI=store)
    assert proc.returncode == 0 and "logger failed" not in proc.stderr, output(proc)
    assert len(runs_of(store)) == 1 and not (tmp_path / "mlruns").exists()
    proc = train(tmp_path, *TINY, "logger=[csv,mlflow]", f"logger.mlflow.tracking_uri={other}",
                 f"hydra.run.dir={tmp_path / 'b'}", MLFLOW_TRACKING_URI=store)
    assert proc.returncode == 0, output(proc)
    assert len(runs_of(other)) == 1 and len(runs_of(store)) == 1
    proc = train(tmp_path, *TINY, "logger=[csv,mlflow]", "logger.mlflow.tracking_uri=''", f"hydra.run.dir={tmp_path / 'c'}")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "corral: error: logger.mlflow.tracking_uri must be an MLflow tracking URI (or null), got ''"], output(proc)
    assert not (tmp_path / "c").exists()


def test_an_empty_experiment_name_is_one_line_before_the_run_starts() -> None:
    from corral.framework.entry import prepare
    from corral.framework.errors import ConfigError
    from corral.framework.precheck import precheck

    prepare([])
    with pytest.raises(ConfigError) as info:  # before: a warning inside the run, which went on without MLflow
        precheck(["logger=[console,mlflow]", "logger.mlflow.experiment=''"])
    assert str(info.value) == "logger.mlflow.experiment must be an experiment name, got ''"
    precheck(["logger=[console,mlflow]", "logger.mlflow.experiment='two words'"])


def test_a_server_address_without_its_scheme_is_refused_before_the_run_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``127.0.0.1:5000`` (no ``http://``) was a local directory of that name, where the runs went in
    silence; ``localhost:5000`` an unknown scheme, a warning, and a run without MLflow."""
    from corral.framework.entry import prepare
    from corral.framework.errors import ConfigError
    from corral.framework.precheck import precheck
    from corral.plugins.loggers.mlflow import MLflowLogger, MLflowLoggerConfig

    prepare([])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        precheck(["logger=[console,mlflow]", "logger.mlflow.tracking_uri=127.0.0.1:5000"])
    assert str(info.value) == (
        "logger.mlflow.tracking_uri=127.0.0.1:5000 is a server address without its scheme: MLflow would write its "
        "runs to a local directory named '127.0.0.1:5000', in silence; give http://127.0.0.1:5000 (or "
        "file:./127.0.0.1:5000 for a directory of that name)")
    with pytest.raises(ConfigError, match=r"^logger.mlflow.tracking_uri=localhost:5000 is a server address without "
                                          r"its scheme: MLflow would read 'localhost' as its scheme; give http://"):
        MLflowLogger(MLflowLoggerConfig(tracking_uri="localhost:5000"))  # built in Python: the same line
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "tracking.lab:5000")
    with pytest.raises(ConfigError, match=r"^MLFLOW_TRACKING_URI=tracking.lab:5000 is a server address"):
        precheck(["logger=[console,mlflow]"])
    for uri in ("http://127.0.0.1:5000", "file:./mlruns", "sqlite:///m.db", "mlruns", str(tmp_path / "store")):
        precheck(["logger=[console,mlflow]", f"logger.mlflow.tracking_uri={uri}"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not __import__("importlib").util.find_spec("hydra_plugins.hydra_joblib_launcher"),
                    reason="needs hydra-joblib-launcher")
def test_multirun_with_joblib_gives_one_mlflow_run_per_job(tmp_path: Path) -> None:
    sweep = tmp_path / "multirun"
    uri = f"file:{tmp_path / 'store'}"
    proc = train(tmp_path, "-m", "seed=1,2", "logger=[console,csv,mlflow]", f"logger.mlflow.tracking_uri={uri}",
                 "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *TINY, f"hydra.sweep.dir={sweep}", timeout=400)
    assert proc.returncode == 0, output(proc)
    runs = runs_of(uri)
    assert len(runs) == 2
    c = client(uri)
    by_seed = {r.data.params["seed"]: r for r in runs}
    assert set(by_seed) == {"1", "2"}
    for seed, run in by_seed.items():
        job = json.loads((sweep / str(int(seed) - 1) / "summary.json").read_text())["job"]["num"]
        check_run(c, run, sweep / str(job))
        assert run.info.run_name.startswith(f"corral#{job} ") and f"seed={seed}" in run.info.run_name
        assert run.data.tags["corral.sweep_dir"] == str(sweep) and run.data.tags["corral.job_num"] == str(job)


FIND_OR_CREATE = """
import os, sys
os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
from mlflow.tracking import MlflowClient
from corral.plugins.loggers.mlflow import _experiment_id
uri = sys.argv[1]
print("finding", flush=True)
print(_experiment_id(MlflowClient(tracking_uri=uri), "corral", uri), flush=True)
"""


def test_sweep_jobs_share_one_experiment_in_a_file_store(tmp_path: Path) -> None:
    """MLflow's file store lets two processes that both miss an experiment both create one of the same
    name (a joblib sweep once split its runs over two "corral" experiments that way). corral finds or
    creates the experiment under a lock in the store: a job that comes while another holds it waits,
    then finds that job's experiment."""
    from mlflow.tracking import MlflowClient

    from corral.plugins.loggers.mlflow import _experiment_id, experiment_lock

    uri = f"file:{tmp_path / 'store'}"
    with experiment_lock(uri):
        job = subprocess.Popen([sys.executable, "-c", FIND_OR_CREATE, uri], stdout=subprocess.PIPE, text=True,
                               cwd=tmp_path)
        try:
            assert job.stdout is not None and job.stdout.readline().strip() == "finding"
            time.sleep(1.0)  # time enough to find or create the experiment, had it not waited
            assert job.poll() is None, "the second job did not wait for the lock"
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            client = MlflowClient(tracking_uri=uri)
            assert client.get_experiment_by_name("corral") is None
            mine = str(client.create_experiment("corral"))
        except BaseException:
            job.kill()
            job.wait(timeout=30)
            raise
    out, _ = job.communicate(timeout=120)
    assert job.returncode == 0
    assert out.strip() == mine
    assert _experiment_id(client, "corral", uri) == mine
    assert [e.experiment_id for e in client.search_experiments() if e.name == "corral"] == [mine]


def three_epochs(tmp_path: Path, name: str) -> None:
    """A run of three epochs logging to MLflow, in ``tmp_path/name`` (snapshots of epochs 1-3)."""
    first = train(tmp_path, *TINY, "trainer.max_env_steps=1500", "trainer.eval_every=0", "logger=[csv,mlflow]",
                  f"hydra.run.dir={tmp_path / name}")
    assert first.returncode == 0, output(first)


def test_resume_continues_the_same_mlflow_run_without_logging_an_epoch_twice(tmp_path: Path) -> None:
    """In place, from an older snapshot: the epochs after it run again (exactly), and the MLflow run
    already holds them; before, each of their metrics had two values at the same step."""
    uri = f"file:{tmp_path / 'mlruns'}"
    three_epochs(tmp_path, "a")
    (run,) = runs_of(uri)
    before = [(m.step, m.value) for m in client(uri).get_metric_history(run.info.run_id, "train/return_mean")]
    assert len(before) == 3
    second = train(tmp_path, "trainer.max_env_steps=2000", f"trainer.resume={tmp_path / 'a/snapshots/epoch_000001.pt'}",
                   f"hydra.run.dir={tmp_path / 'a'}")
    assert second.returncode == 0, output(second)
    (run,) = runs_of(uri)
    assert json.loads((tmp_path / "a" / "mlflow_run.json").read_text())["run_id"] == run.info.run_id
    history = [(m.step, m.value) for m in client(uri).get_metric_history(run.info.run_id, "train/return_mean")]
    assert history[:3] == before and len(history) == 4 and history[3][0] > 1500  # the curve goes on, once
    assert run.info.status == "FINISHED"


def test_a_branch_is_an_mlflow_run_of_its_own_and_leaves_the_originals_as_it_was(tmp_path: Path) -> None:
    """``trainer.resume=<run> hydra.run.dir=<new>`` from an older snapshot: before, the branch copied
    the original's mlflow_run.json and wrote its epochs into the original's MLflow run (one epoch twice,
    then the branch's own, under the original's run directory tag)."""
    uri = f"file:{tmp_path / 'mlruns'}"
    three_epochs(tmp_path, "a")
    (original,) = runs_of(uri)
    before = [(m.step, m.value) for m in client(uri).get_metric_history(original.info.run_id, "train/return_mean")]
    branch = train(tmp_path, "trainer.max_env_steps=2500", f"trainer.resume={tmp_path / 'a/snapshots/epoch_000002.pt'}",
                   f"hydra.run.dir={tmp_path / 'b'}")
    assert branch.returncode == 0, output(branch)
    runs = {r.info.run_id: r for r in runs_of(uri)}
    mine = json.loads((tmp_path / "b" / "mlflow_run.json").read_text())["run_id"]
    assert set(runs) == {original.info.run_id, mine}
    assert [(m.step, m.value) for m in client(uri).get_metric_history(original.info.run_id, "train/return_mean")] \
        == before
    assert runs[mine].data.tags["corral.branched_from"] == original.info.run_id
    assert runs[mine].data.tags["corral.run_dir"] == str((tmp_path / "b").resolve())
    steps = [m.step for m in client(uri).get_metric_history(mine, "train/return_mean")]
    assert steps == sorted(steps) and len(steps) == 3 and steps[-1] > 2000  # epochs 2, 3, 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, then SIGKILL after 20 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


@dataclass
class Server:
    """A running ``mlflow server``: its URL and process."""

    url: str
    proc: subprocess.Popen


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A real ``mlflow server`` on 127.0.0.1 (SQLite backend, served artifacts); stopped after the test."""
    port = free_port()
    mlflow_cli = Path(sys.executable).parent / "mlflow"
    cmd = [str(mlflow_cli) if mlflow_cli.exists() else "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
           "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
           "--artifacts-destination", str(tmp_path / "server-artifacts"), "--workers", "1"]
    log = open(tmp_path / "server.log", "w")
    # Job execution off: a tracking server needs none, and with it on, `mlflow server` makes a temporary
    # directory in /dev/shm (its job queue) that it never removes.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"mlflow server exited with {proc.returncode}:\n{(tmp_path / 'server.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"mlflow server not up after 120 s:\n{(tmp_path / 'server.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield Server(url, proc)
    finally:
        _stop(proc)
        log.close()


@pytest.fixture
def mlflow_server(server: Server) -> str:
    """The URL of a real local ``mlflow server``."""
    return server.url


def test_a_real_mlflow_server(tmp_path: Path, mlflow_server: str) -> None:
    run_dir = tmp_path / "run"
    proc = train(tmp_path, *TINY, "logger=[csv,mlflow]", f"logger.mlflow.tracking_uri={mlflow_server}",
                 "logger.mlflow.experiment=served", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, output(proc)
    assert "logger failed" not in proc.stderr, output(proc)
    (run,) = runs_of(mlflow_server, "served")
    c = client(mlflow_server)
    check_run(c, run, run_dir)
    assert {a.path for a in c.list_artifacts(run.info.run_id)} == {"summary.json"}
    # The artifact went through the server into its artifact store.
    assert list((tmp_path / "server-artifacts").rglob("summary.json"))


def test_an_unreachable_server_warns_once_and_training_goes_on(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there once the probe socket is closed
    run_dir = tmp_path / "run"
    started = time.monotonic()
    proc = train(tmp_path, *TINY, "logger=[csv,mlflow]", f"logger.mlflow.tracking_uri=http://127.0.0.1:{port}",
                 f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, output(proc)
    # One line: the tracker, what it was doing, the root cause and what to check; no source line and
    # none of the HTTP client's retry warnings.
    assert [line for line in proc.stderr.splitlines() if "logger failed" in line] == [
        f"corral: warning: mlflow logger failed while starting a run at http://127.0.0.1:{port} "
        "(ConnectionRefusedError: Connection refused); training goes on without mlflow; check "
        "logger.mlflow.tracking_uri (an http:// one needs its `mlflow server` running)"], output(proc)
    assert "Retrying" not in proc.stderr and "TrackerWarning" not in proc.stderr, output(proc)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["epochs"] == 2
    assert len(progress(run_dir)) == 2
    assert not (run_dir / "mlflow_run.json").exists()
    assert time.monotonic() - started < 120  # bounded retries, not MLflow's minutes of backoff


@pytest.mark.skipif(not __import__("importlib").util.find_spec("ray"), reason="needs ray")
def test_multirun_with_the_ray_launcher_gives_one_mlflow_run_per_job(tmp_path: Path) -> None:
    sweep = tmp_path / "multirun"
    uri = f"file:{tmp_path / 'store'}"
    proc = train(tmp_path, "-m", "seed=1,2", "logger=[csv,mlflow]", f"logger.mlflow.tracking_uri={uri}",
                 "hydra/launcher=ray", "hydra.launcher.num_cpus=2", *TINY, f"hydra.sweep.dir={sweep}", timeout=500)
    assert proc.returncode == 0, output(proc)
    runs = runs_of(uri)
    assert sorted(r.data.params["seed"] for r in runs) == ["1", "2"]
    c = client(uri)
    for run in runs:
        job = int(run.data.tags["corral.job_num"])
        check_run(c, run, sweep / str(job))
        assert json.loads((sweep / str(job) / "summary.json").read_text())["pid"] != os.getpid()


def test_a_server_that_dies_mid_run_warns_once_and_training_goes_on(tmp_path: Path, server: Server) -> None:
    run_dir = tmp_path / "run"
    cmd = [sys.executable, str(TRAIN), "trainer.n_epochs=60", "trainer.max_env_steps=1000000", "trainer.batch_size=200",
           "trainer.eval_every=0", "trainer.progress=false", "logger=[csv,mlflow]",
           f"logger.mlflow.tracking_uri={server.url}", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true"})
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if (run_dir / "mlflow_run.json").exists() and (run_dir / "progress.csv").exists() and \
                    (run_dir / "progress.csv").read_text().count("\n") >= 3:
                break
            time.sleep(0.1)
        _stop(server.proc)  # the tracking server goes away while the run trains
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-4000:]
    (line,) = [line for line in err.splitlines() if "logger failed" in line]
    assert line.startswith("corral: warning: mlflow logger failed while ") and "tracking_uri" in line, err[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["epochs"] == 60
    assert [int(float(r["epoch"])) for r in progress(run_dir)] == list(range(60))


def test_a_tracking_uri_of_a_scheme_mlflow_has_no_store_for_is_refused_before_the_run_starts(tmp_path: Path) -> None:
    """``foo://bar`` passed the check (a non-empty string) and failed when the run started: one warning,
    and the run trained on without MLflow (rc 0). Now it is one line before the run directory exists."""
    run_dir = tmp_path / "r1"
    proc = train(tmp_path, "logger=[console,mlflow]", "logger.mlflow.tracking_uri=foo://bar", "trainer.n_epochs=1",
                 f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "corral: error: logger.mlflow.tracking_uri=foo://bar has a scheme MLflow has no tracking store for ('foo'); "
        "give a URI of scheme file, databricks, http, https, postgresql, mysql, sqlite, mssql (e.g. file:./mlruns, "
        "sqlite:///mlflow.db, http://host:5000) or a local directory"], output(proc)
    assert not run_dir.exists() and not (tmp_path / "mlruns").exists()


def test_the_tracking_uri_schemes_are_mlflows_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What is refused is what MLflow's tracking store registry has no store for (plugins' stores
    included), asked of MLflow itself; Unity Catalog, registered but refused by MLflow's client, too."""
    from mlflow.tracking._tracking_service import utils

    from corral.framework.entry import prepare
    from corral.framework.errors import ConfigError
    from corral.framework.precheck import precheck
    from corral.plugins.loggers.mlflow import MLflowLogger, MLflowLoggerConfig, check_tracking_scheme, tracking_schemes

    registry = utils._tracking_store_registry
    assert set(tracking_schemes()) == set(registry._registry) - {"", "databricks-uc", "uc"}
    accepted = ["file:./mlruns", "mlruns", str(tmp_path / "store"), "sqlite:///m.db", "postgresql+psycopg2://u@h/db",
                "mysql://u@h/db", "mssql+pyodbc://u@h/db", "http://127.0.0.1:5000", "https://mlflow.lab",
                "databricks", "databricks://profile"]
    refused = ["foo://bar", "s3://bucket/runs", "gs://bucket", "ftp://host/x", "databricks-uc", "uc:http://h:8080"]
    for uri in accepted:
        registry.get_store_builder(uri)  # MLflow has a store for each ...
        check_tracking_scheme(MLflowLoggerConfig(tracking_uri=uri))  # ... and corral takes it
    for uri in refused:
        if uri not in ("databricks-uc", "uc:http://h:8080"):
            with pytest.raises(Exception, match="Supported URI schemes"):
                registry.get_store_builder(uri)
        with pytest.raises(ConfigError, match=rf"^logger\.mlflow\.tracking_uri={re.escape(uri)} "):
            check_tracking_scheme(MLflowLoggerConfig(tracking_uri=uri))
    with pytest.raises(ConfigError, match=r"^logger\.mlflow\.tracking_uri=databricks-uc is a Unity Catalog URI"):
        MLflowLogger(MLflowLoggerConfig(tracking_uri="databricks-uc"))  # built in Python: the same line
    # A store that a plugin registers is taken.
    monkeypatch.setitem(registry._registry, "myplugin", registry._registry["file"])
    check_tracking_scheme(MLflowLoggerConfig(tracking_uri="myplugin://x"))
    monkeypatch.delitem(registry._registry, "myplugin")

    prepare([])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"^logger\.mlflow\.tracking_uri=s3://bucket/runs has a scheme MLflow has "
                                          r"no tracking store for \('s3'\); give a URI of scheme file, "):
        precheck(["logger=[console,mlflow]", "logger.mlflow.tracking_uri=s3://bucket/runs"])
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "foo://bar")
    with pytest.raises(ConfigError, match=r"^MLFLOW_TRACKING_URI=foo://bar has a scheme MLflow has no tracking store"):
        precheck(["logger=[console,mlflow]"])
    precheck(["logger=[console,mlflow]", "logger.mlflow.tracking_uri=sqlite:///m.db"])  # the config's URI wins
    assert list(tmp_path.iterdir()) == []
