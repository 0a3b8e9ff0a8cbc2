"""``logger=wandb`` for real, in offline mode (``WANDB_MODE=offline``, no network).

Each run is ``python train.py`` in a subprocess; what it wrote is read back from the offline run's
``.wandb`` transaction log with W&B's own reader (``wandb leet inspect --json``): the run record
(project, group, tags, config) and the history rows, compared with the run's ``progress.csv``.
"""

from __future__ import annotations

import csv
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

# Not imported here: W&B makes its staging directories (tmp…wandb-media, tmp…wandb-artifacts) in the
# temporary directory of the process that imports it, and a test session that is killed would leave them
# there. The tests that need it in this process import it with import_wandb(tmp_path).
pytestmark = pytest.mark.skipif(not __import__("importlib").util.find_spec("wandb"), reason="needs wandb")

ROOT = Path(__file__).resolve().parents[3]
TRAIN = ROOT / "train.py"


def wandb_temp_entries() -> set[str]:
    """What W&B makes in the temporary directory: its media and artifact staging directories and its
    service's socket directory (``wandb-<pid>-<pid>-<n>``)."""
    pattern = re.compile(r"^(tmp\w+wandb-(media|artifacts)|wandb-\d+-\d+-\d+)$")
    return {name for name in os.listdir(tempfile.gettempdir()) if pattern.match(name)}


@pytest.fixture(autouse=True)
def no_wandb_temp_left() -> Iterator[None]:
    """Every run of these tests leaves nothing of W&B's in the temporary directory (under the Ray
    launcher too, whose job processes are ended by Ray)."""
    before = wandb_temp_entries()
    yield
    deadline = time.monotonic() + 10
    while (left := wandb_temp_entries() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"left in {tempfile.gettempdir()}: {sorted(left)}"


#: Two epochs of ~500 steps, an evaluation every epoch.
TINY = ["trainer.max_env_steps=1000", "trainer.batch_size=500", "trainer.eval_every=1", "trainer.eval_episodes=1",
        "trainer.progress=false"]


def train(cwd: Path, *overrides: str, timeout: float = 240, **env: str) -> subprocess.CompletedProcess[str]:
    """``python train.py <overrides>`` with W&B offline and no key; never hangs."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    full_env.update({"WANDB_MODE": "offline", "WANDB_SILENT": "true", **env})
    return subprocess.run([sys.executable, str(TRAIN), *overrides], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"rc={proc.returncode}\n--- stdout:\n{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-5000:]}"


def progress(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def offline_runs(run_dir: Path) -> list[Path]:
    """The offline run directories W&B wrote under ``<run dir>/wandb``, oldest first."""
    return sorted((run_dir / "wandb").glob("offline-run-*"))


def records(offline_run: Path) -> list[dict[str, Any]]:
    """Every record of the offline run's ``run-<id>.wandb`` log, read by ``wandb leet inspect --json``."""
    (log,) = offline_run.glob("run-*.wandb")
    cli = Path(sys.executable).parent / "wandb"
    proc = subprocess.run([str(cli) if cli.exists() else "wandb", "leet", "inspect", "--json", str(log)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def run_record(recs: list[dict[str, Any]]) -> dict[str, Any]:
    (run,) = [r["run"] for r in recs if r["type"] == "run"]
    return run


def history(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The epochs' rows (a video is a row of its own)."""
    return [r["history"]["item"] for r in recs if r["type"] == "history" and "epoch" in r["history"]["item"]
            and "eval/video._type" not in r["history"]["item"]]


def check_run(offline_run: Path, run_dir: Path) -> dict[str, Any]:
    """The offline run holds the run's resolved config and progress.csv's rows; returns its run record."""
    recs = records(offline_run)
    run = run_record(recs)
    summary = json.loads((run_dir / "summary.json").read_text())
    config = run["config"]["update"]
    for key in ("algo", "env", "policy", "trainer", "seed"):
        assert config[key] == summary["config"][key], key
    rows = progress(run_dir)
    got = history(recs)
    assert [h["env_steps"] for h in got] == [int(float(r["env_steps"])) for r in rows]
    assert [h["epoch"] for h in got] == [0, 1]
    for h, r in zip(got, rows):
        assert h["train/return_mean"] == pytest.approx(float(r["train/return_mean"]))
        assert h["eval/return_mean"] == pytest.approx(float(r["eval/return_mean"]))
    assert [r["exit"].get("exit_code", 0) for r in recs if r["type"] == "exit"] == [0]
    assert json.loads((run_dir / "wandb_run.json").read_text())["run_id"] == run["run_id"]
    assert offline_run.name.endswith(run["run_id"])
    return run


def test_offline_run_files_hold_config_and_metrics(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = train(tmp_path, *TINY, "logger=[console,csv,wandb]", "logger.wandb.project=corral-test",
                 "logger.wandb.tags=[ppo,smoke]", "trainer.video_every=2", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, output(proc)
    assert "logger failed" not in proc.stderr, output(proc)
    (offline,) = offline_runs(run_dir)
    assert (offline / "logs" / "debug.log").exists()
    run = check_run(offline, run_dir)
    assert run["project"] == "corral-test" and run["tags"] == ["ppo", "smoke"]
    assert "run_group" not in run  # a single run has no group
    assert run["display_name"].startswith("corral ") and "trainer.batch_size=500" in run["display_name"]
    # trainer.video_every=2: the second evaluation's video is logged as eval/video at that step.
    (row,) = [r["history"]["item"] for r in records(offline) if r["type"] == "history"
              and "eval/video._type" in r["history"]["item"]]
    assert row["eval/video._type"] == "video-file" and row["epoch"] == 1 and row["env_steps"] > 1000
    (video,) = sorted((run_dir / "videos").glob("*.mp4"))
    media = offline / "files" / row["eval/video.path"]
    assert media.read_bytes() == video.read_bytes()


@pytest.mark.skipif(not __import__("importlib").util.find_spec("hydra_plugins.hydra_joblib_launcher"),
                    reason="needs hydra-joblib-launcher")
def test_multirun_with_joblib_gives_two_offline_runs_in_one_group(tmp_path: Path) -> None:
    sweep = tmp_path / "sweeps" / "seeds"
    proc = train(tmp_path, "-m", "seed=1,2", "logger=[console,csv,wandb]", "hydra/launcher=joblib",
                 "hydra.launcher.n_jobs=2", *TINY, f"hydra.sweep.dir={sweep}", timeout=400)
    assert proc.returncode == 0, output(proc)
    runs = {}
    for job in ("0", "1"):
        (offline,) = offline_runs(sweep / job)
        runs[job] = check_run(offline, sweep / job)
    assert {r["config"]["update"]["seed"] for r in runs.values()} == {1, 2}
    assert runs["0"]["run_id"] != runs["1"]["run_id"]
    assert runs["0"]["run_group"] == runs["1"]["run_group"] == "sweeps/seeds"  # grouped by sweep
    assert runs["1"]["display_name"].startswith("corral#1 ")


def three_epochs(tmp_path: Path, name: str) -> None:
    """A run of three epochs logging to W&B (offline), in ``tmp_path/name`` (snapshots of epochs 1-3)."""
    first = train(tmp_path, *TINY, "trainer.max_env_steps=1500", "trainer.eval_every=0", "logger=[csv,wandb]",
                  f"hydra.run.dir={tmp_path / name}")
    assert first.returncode == 0, output(first)


def test_resume_continues_the_same_wandb_run_without_logging_an_epoch_twice(tmp_path: Path) -> None:
    """In place, from an older snapshot: the epochs after it run again (exactly), and the W&B run holds
    them already; before, they were logged again as rows of their own."""
    three_epochs(tmp_path, "a")
    second = train(tmp_path, "trainer.max_env_steps=2000", f"trainer.resume={tmp_path / 'a/snapshots/epoch_000001.pt'}",
                   f"hydra.run.dir={tmp_path / 'a'}")
    assert second.returncode == 0, output(second)
    earlier, later = offline_runs(tmp_path / "a")
    first_run, second_run = run_record(records(earlier)), run_record(records(later))
    assert second_run["run_id"] == first_run["run_id"]
    assert [h["epoch"] for h in history(records(earlier))] == [0, 1, 2]
    assert [h["epoch"] for h in history(records(later))] == [3]  # the curve goes on, each epoch once
    assert json.loads((tmp_path / "a" / "wandb_run.json").read_text())["run_id"] == first_run["run_id"]


def test_a_branch_is_a_wandb_run_of_its_own_and_leaves_the_originals_as_it_was(tmp_path: Path) -> None:
    """``trainer.resume=<run> hydra.run.dir=<new>``: before, the branch continued the original's W&B run
    (its record was copied with the history), and its wandb/ held a copy of the original's offline run."""
    three_epochs(tmp_path, "a")
    branch = train(tmp_path, "trainer.max_env_steps=2500", f"trainer.resume={tmp_path / 'a/snapshots/epoch_000002.pt'}",
                   f"hydra.run.dir={tmp_path / 'b'}")
    assert branch.returncode == 0, output(branch)
    (a,) = offline_runs(tmp_path / "a")
    (b,) = offline_runs(tmp_path / "b")  # the original's offline run is not copied into the branch
    original, mine = run_record(records(a)), run_record(records(b))
    assert mine["run_id"] != original["run_id"]
    assert mine["config"]["update"]["corral_branched_from"] == original["run_id"]
    assert [h["epoch"] for h in history(records(a))] == [0, 1, 2]
    assert [h["epoch"] for h in history(records(b))] == [2, 3, 4]
    assert json.loads((tmp_path / "b" / "wandb_run.json").read_text())["run_id"] == mine["run_id"]


def test_an_unreachable_wandb_server_warns_once_and_training_goes_on(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once this socket is closed
    run_dir = tmp_path / "run"
    started = time.monotonic()
    proc = train(tmp_path, *TINY, "logger=[csv,wandb]", "logger.wandb.mode=online", "logger.wandb.init_timeout_s=15",
                 f"hydra.run.dir={run_dir}", WANDB_BASE_URL=f"http://127.0.0.1:{port}", WANDB_API_KEY="x" * 40,
                 timeout=300)
    assert proc.returncode == 0, output(proc)
    (line,) = [line for line in proc.stderr.splitlines() if "logger failed" in line]
    assert line.startswith("corral: warning: wandb logger failed while starting a run ("), output(proc)
    assert line.endswith("training goes on without wandb; check the network and WANDB_API_KEY, or use "
                         "logger.wandb.mode=offline and `wandb sync` the run later"), output(proc)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["epochs"] == 2
    assert len(progress(run_dir)) == 2
    assert time.monotonic() - started < 200


@pytest.mark.skipif(not __import__("importlib").util.find_spec("ray"), reason="needs ray")
def test_multirun_with_the_ray_launcher_gives_two_offline_runs(tmp_path: Path) -> None:
    sweep = tmp_path / "multirun"
    proc = train(tmp_path, "-m", "seed=1,2", "logger=[csv,wandb]", "hydra/launcher=ray", "hydra.launcher.num_cpus=2",
                 *TINY, f"hydra.sweep.dir={sweep}", timeout=500)
    assert proc.returncode == 0, output(proc)
    runs = [check_run(offline_runs(sweep / job)[0], sweep / job) for job in ("0", "1")]
    assert sorted(r["config"]["update"]["seed"] for r in runs) == [1, 2]
    assert runs[0]["run_group"] == runs[1]["run_group"] == f"{tmp_path.name}/multirun"


def test_an_unknown_mode_is_one_line_before_the_run_starts() -> None:
    """``logger.wandb.mode`` is checked with the other values, before a run directory exists (it was
    checked only when the logger was built, inside the run)."""
    from corral.framework.entry import prepare
    from corral.framework.errors import ConfigError
    from corral.framework.precheck import precheck

    prepare([])
    with pytest.raises(ConfigError) as info:
        precheck(["logger=[console,wandb]", "logger.wandb.mode=abc"])
    assert str(info.value) == "logger.wandb.mode must be one of 'online', 'offline', 'disabled', 'shared', got 'abc'"
    with pytest.raises(ConfigError) as info:  # before: accepted, and handed to wandb.init as project ''
        precheck(["logger=[console,wandb]", "logger.wandb.project=''"])
    assert str(info.value) == "logger.wandb.project must be a project name, got ''"
    precheck(["logger=[console,wandb]", "logger.wandb.mode=null"])
    precheck(["logger=[console,wandb]", "logger.wandb.mode=shared"])


def test_a_project_name_wandb_refuses_is_one_line_before_the_run_starts(tmp_path: Path) -> None:
    """``logger.wandb.project=a/b`` passed the check and failed in ``wandb.init``: one warning, whose
    advice (the network, the key, offline mode) did not fit an offline run, and a run without W&B
    (rc 0). Now it is one line before the run directory exists."""
    run_dir = tmp_path / "r1"
    proc = train(tmp_path, "logger=[console,wandb]", "logger.wandb.mode=offline", "logger.wandb.project=a/b",
                 "trainer.n_epochs=1", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "corral: error: logger.wandb.project must be a W&B project name, without any of / \\ # ? % :, got 'a/b'; "
        "give logger.wandb.entity=a logger.wandb.project=b for project 'b' of entity 'a'"], output(proc)
    assert not run_dir.exists()


def test_the_project_names_refused_are_the_ones_wandb_refuses(tmp_path: Path) -> None:
    """The rule mirrors W&B's own (``wandb.Settings``' project validator): each name is refused by
    corral exactly when W&B refuses it."""
    from corral.framework.entry import prepare
    from corral.framework.errors import ConfigError
    from corral.framework.precheck import precheck
    from corral.plugins.loggers.wandb import WandbLogger, WandbLoggerConfig, check_project, import_wandb

    wandb = import_wandb(tmp_path)

    names = ["corral", "my-project_2", "with space", "ünïcode", "a.b", "x" * 128, "x" * 129, "a/b", "a\\b",
             "a#b", "a?b", "a%b", "a:b", "/", "team/proj/x"]
    for name in names:
        try:
            wandb.Settings(project=name)
            wandb_refuses = False
        except Exception:
            wandb_refuses = True
        try:
            check_project(name)
            corral_refuses = False
        except ConfigError:
            corral_refuses = True
        assert corral_refuses == wandb_refuses, name
    with pytest.raises(ConfigError) as info:
        check_project("x" * 129)
    assert str(info.value) == ("logger.wandb.project must be a W&B project name of at most 128 characters, got one "
                               "of 129; give a shorter name")
    with pytest.raises(ConfigError, match=r"^logger\.wandb\.project must be a W&B project name, without any of .*, "
                                          r"got 'x:y'; give a name without them$"):
        WandbLogger(WandbLoggerConfig(project="x:y"))  # built in Python: the same line
    prepare([])
    with pytest.raises(ConfigError, match=r"got 'team/proj/x'; give a name without them$"):
        precheck(["logger=[console,wandb]", "logger.wandb.project=team/proj/x"])
    precheck(["logger=[console,wandb]", "logger.wandb.project=proj", "logger.wandb.entity=team"])


def test_an_offline_run_that_fails_is_not_told_to_go_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The warning's advice fits the mode: online, the network, the key and offline mode; offline
    (``logger.wandb.mode`` or ``WANDB_MODE``), the settings and the run directory."""
    import warnings

    from corral.plugins.loggers._tracking import TrackerWarning
    from corral.plugins.loggers.wandb import WandbLogger, WandbLoggerConfig, import_wandb

    wandb = import_wandb(tmp_path)

    def refuse(**_: Any) -> None:
        raise RuntimeError("refused")

    monkeypatch.setattr(wandb, "init", refuse)
    monkeypatch.delenv("WANDB_MODE", raising=False)

    def warning(config: WandbLoggerConfig) -> str:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            WandbLogger(config).start(None)
        (line,) = [str(w.message) for w in caught if issubclass(w.category, TrackerWarning)]
        return line

    offline = warning(WandbLoggerConfig(mode="offline"))
    assert offline == ("wandb logger failed while starting a run (RuntimeError: refused); training goes on without "
                       "wandb; W&B is in offline mode, with no network or key: check the logger.wandb settings and "
                       "that the run directory is writable (disk space, permissions)")
    assert warning(WandbLoggerConfig()).endswith(
        "check the network and WANDB_API_KEY, or use logger.wandb.mode=offline and `wandb sync` the run later")
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert warning(WandbLoggerConfig()) == offline
    assert "mode=offline" in warning(WandbLoggerConfig(mode="online"))  # the config's mode wins
