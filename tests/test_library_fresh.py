"""corral as a library, in a fresh interpreter with nothing imported first: what ``train.py`` and
``corral eval`` set up before anything else (the plugin manager, and with it the modules that register
snapshot dataclasses) is loaded by whatever needs it. Was: ``snapshot_config`` on an RL2 or PEARL run
raised "the snapshot holds a corral.meta.tasks.TaskSchedule that no loaded module registered" unless
the caller had loaded the plugins first; ``entry.run(cfg)`` resuming a run dropped the caller's
``trainer.n_epochs`` in silence (and then said to resume with the value it had been given).

The library example of docs/getting-started.md runs here too, as a user would paste it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from corral.framework.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 300


def fresh(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a new interpreter (bounded), as a library user runs it."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT, env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture
def runs(tiny_meta_runs: Path) -> Path:
    """An RL2 bandit run and a PEARL point-robot run, one tiny epoch each (``tests/conftest.py``): their
    snapshots hold task schedules, dataclasses that corral.meta.tasks registers for snapshots."""
    return tiny_meta_runs


@pytest.mark.parametrize(("run", "algo"), [("rl2", "rl2_ppo"), ("pearl", "pearl")])
def test_a_meta_rl_snapshot_reads_in_a_fresh_interpreter(runs: Path, run: str, algo: str) -> None:
    proc = fresh(f"""
        from corral.framework.resume import snapshot_config
        from corral.framework.snapshot import load_snapshot
        from corral.framework.trainer import find_snapshot
        print(snapshot_config({str(runs / run)!r}).algo.name)
        state = load_snapshot(find_snapshot({str(runs / run)!r}))
        print(state["epoch"], type(state["sampler"]).__name__)
    """, runs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[:2] == [algo, "1 dict"], proc.stdout


def test_a_snapshot_dataclass_no_plugin_registers_is_one_line_naming_the_file(tmp_path: Path) -> None:
    import torch

    from corral.framework.errors import SnapshotError
    from corral.framework.snapshot import DATACLASS_KEY, load_snapshot

    path = tmp_path / "epoch_000001.pt"
    torch.save({"epoch": 1, "tasks": {DATACLASS_KEY: "corral_gone.tasks.Schedule", "fields": {"n": 1}}}, path)
    with pytest.raises(SnapshotError) as caught:
        load_snapshot(path)
    assert str(caught.value) == (
        f"cannot read snapshot {path}: the snapshot holds a corral_gone.tasks.Schedule, a dataclass that no loaded "
        "plugin registers with register_snapshot_dataclass; install the plugin that wrote the snapshot (`corral "
        "plugins` lists what is installed, and whether CORRAL_PLUGINS or CORRAL_DISABLE_PLUGINS leaves one out)")


def test_a_library_resume_takes_the_callers_trainer_settings(runs: Path, tmp_path: Path) -> None:
    from corral.framework.entry import run
    from corral.framework.resume import snapshot_config

    cfg = snapshot_config(runs / "rl2")
    assert cfg is not None
    cfg.trainer.resume = str(runs / "rl2")
    cfg.trainer.n_epochs = 2  # was dropped: the run "already finished" at its own n_epochs=1
    branch = tmp_path / "branch"
    run(cfg, log_dir=branch)
    rows = (branch / "progress.csv").read_text().splitlines()
    assert [r.split(",", 1)[0] for r in rows[1:]] == ["0", "1"], rows


def test_a_library_resume_refuses_a_change_to_the_run(runs: Path, tmp_path: Path) -> None:
    from corral.framework.entry import run
    from corral.framework.resume import snapshot_config

    cfg = snapshot_config(runs / "pearl")
    assert cfg is not None
    cfg.trainer.resume = str(runs / "pearl")
    cfg.trainer.n_epochs = 2
    cfg.algo.learning_rate = 0.5
    with pytest.raises(ConfigError) as caught:
        run(cfg, log_dir=tmp_path / "refused")
    assert str(caught.value).startswith(
        "trainer.resume continues a run with the config it was started with, and these overrides would change it: "
        "algo.learning_rate=0.5 (the run has algo.learning_rate=0.0003). "), str(caught.value)
    assert not (tmp_path / "refused" / "progress.csv").exists()


def library_example() -> str:
    """The Python block of docs/getting-started.md's "Library use" section."""
    page = (REPO / "docs" / "getting-started.md").read_text()
    section = page.split("## Library use", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, blocks
    return blocks[0]


def test_the_getting_started_library_example_runs_as_written(tmp_path: Path) -> None:
    code = library_example()
    long_run = "trainer.train(n_epochs=40, batch_size=2048)"
    assert long_run in code, code  # the one change made here, to keep the test short: say if the page changed it
    code = code.replace(long_run, "trainer.train(n_epochs=2, batch_size=256)")
    proc = fresh(code + "\nprint('epochs', trainer.epoch, 'steps', trainer.total_env_steps)\n", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    epochs, steps = re.fullmatch(r"epochs (\d+) steps (\d+)", proc.stdout.splitlines()[-1]).groups()  # type: ignore[union-attr]
    assert int(epochs) == 2 and int(steps) >= 512, proc.stdout
    assert (tmp_path / "runs" / "ppo" / "snapshots" / "latest").is_file()
    # corral eval rebuilds a run from its config, which a run trained from Python does not keep: one line
    # that says how such a run is evaluated instead
    proc = subprocess.run([sys.executable, "-m", "corral.framework.cli", "eval", str(tmp_path / "runs" / "ppo"), "--episodes", "1"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "does not exist, so corral eval cannot rebuild the run (corral eval takes runs made by train.py); a run "
        "trained from Python is evaluated where it was built: trainer.restore(<run dir>), then trainer.evaluate()"), \
        proc.stderr
