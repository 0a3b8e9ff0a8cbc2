"""``logger=mlflow`` on ``trainer.resume`` with new MLflow settings, for real: ``python train.py`` in a
subprocess, a file store and a real local ``mlflow server`` read back with ``MlflowClient``.

The resumed run continues the same MLflow run: a new ``run_name`` and new ``tags`` are set on it, a
param that changed (``trainer.n_epochs``) keeps its first value and the resumed one goes into the tag
``corral.resumed.<param>``, and a different ``logger.mlflow.experiment`` (a run cannot move) is one
warning line while ``mlflow_run.json`` keeps the experiment the run is really in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

from tests.plugins.loggers.test_mlflow import Server, client, output, server  # noqa: E402,F401  (fixture)

ROOT = Path(__file__).resolve().parents[3]
TRAIN = ROOT / "train.py"
#: One epoch of 500 steps, no evaluation.
TINY = ["trainer.batch_size=500", "trainer.eval_every=0", "trainer.progress=false"]


def train(cwd: Path, *overrides: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``python train.py <overrides>`` in ``cwd``; never hangs."""
    env = {**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}, "MLFLOW_ALLOW_FILE_STORE": "true"}
    return subprocess.run([sys.executable, str(TRAIN), *overrides], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def first_then_resume(tmp_path: Path, uri: str, *resume_overrides: str) -> subprocess.CompletedProcess[str]:
    """One epoch into experiment ``expA``, then ``trainer.resume`` of that run directory for a second epoch."""
    run_dir = tmp_path / "mr"
    first = train(tmp_path, *TINY, "trainer.n_epochs=1", "logger=[console,mlflow]", f"logger.mlflow.tracking_uri={uri}",
                  "logger.mlflow.experiment=expA", f"hydra.run.dir={run_dir}")
    assert first.returncode == 0, output(first)
    second = train(tmp_path, f"trainer.resume={run_dir}", "trainer.n_epochs=2", "logger=[console,mlflow]",
                   f"logger.mlflow.tracking_uri={uri}", *resume_overrides)
    assert second.returncode == 0, output(second)
    return second


def check_continued(uri: str, run_dir: Path) -> None:
    """One MLflow run, in ``expA``, now named ``newname`` with tag ``t: new``, two epochs of metrics, its
    first-run params unchanged and the resumed ``trainer.n_epochs`` in a tag; the record says ``expA``."""
    c = client(uri)
    experiments = {e.name: e.experiment_id for e in c.search_experiments()}
    runs = c.search_runs(list(experiments.values()))
    assert len(runs) == 1, [(r.info.run_id, r.info.experiment_id) for r in runs]
    (run,) = runs
    assert run.info.experiment_id == experiments["expA"]
    record = json.loads((run_dir / "mlflow_run.json").read_text())
    assert record["run_id"] == run.info.run_id
    assert record["experiment"] == "expA", record
    assert run.info.run_name == "newname" and run.data.tags["mlflow.runName"] == "newname"
    assert run.data.tags["t"] == "new"
    assert run.data.params["trainer.n_epochs"] == "1"
    assert run.data.tags["corral.resumed.trainer.n_epochs"] == "2"
    assert run.data.tags["corral.resumed.trainer.resume"] == str(run_dir)
    assert "corral.resumed.logger.mlflow.experiment" not in run.data.tags  # the run is not in expB
    assert len(c.get_metric_history(run.info.run_id, "train/return_mean")) == 2
    assert run.info.status == "FINISHED"


def test_resume_with_another_experiment_warns_once_and_applies_the_new_name_and_tags(tmp_path: Path) -> None:
    """Before: no warning, the run kept its old name and no tag ``t``, and mlflow_run.json said ``expB``."""
    uri = f"file:{tmp_path / 'mlr'}"
    second = first_then_resume(tmp_path, uri, "logger.mlflow.experiment=expB", "logger.mlflow.run_name=newname",
                               "logger.mlflow.tags={t: new}")
    check_continued(uri, tmp_path / "mr")
    warned = [line for line in second.stderr.splitlines() if "logger.mlflow.experiment" in line]
    assert len(warned) == 1, output(second)
    assert warned[0].startswith("corral: warning: logger.mlflow.experiment=expB is ignored: the resumed MLflow run ")
    assert "is in experiment 'expA'" in warned[0] and "drop the override" in warned[0] \
        and "start a new run" in warned[0], warned[0]
    assert "Traceback" not in second.stderr and "mlflow logger failed" not in second.stderr, output(second)
    # Resumed again without naming the experiment (its default is `corral`): no warning, still expA.
    third = train(tmp_path, f"trainer.resume={tmp_path / 'mr'}", "trainer.n_epochs=3", "logger=[console,mlflow]",
                  f"logger.mlflow.tracking_uri={uri}")
    assert third.returncode == 0 and "warning" not in third.stderr, output(third)
    c = client(uri)
    (run,) = c.search_runs([e.experiment_id for e in c.search_experiments()])
    assert json.loads((tmp_path / "mr" / "mlflow_run.json").read_text())["experiment"] == "expA"
    assert run.info.run_name == "newname" and run.data.params["trainer.n_epochs"] == "1"
    assert run.data.tags["corral.resumed.trainer.n_epochs"] == "3"
    assert len(c.get_metric_history(run.info.run_id, "train/return_mean")) == 3


def test_resume_against_a_real_mlflow_server_applies_the_new_name_tags_and_params(
        tmp_path: Path, server: Server) -> None:  # noqa: F811
    """The same through a real ``mlflow server``, resuming in the same experiment: no warning at all."""
    second = first_then_resume(tmp_path, server.url, "logger.mlflow.experiment=expA", "logger.mlflow.run_name=newname",
                               "logger.mlflow.tags={t: new}")
    check_continued(server.url, tmp_path / "mr")
    assert "warning" not in second.stderr, output(second)
