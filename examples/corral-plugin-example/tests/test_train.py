"""End to end: training runs that use this plugin's options, in-process and as a user runs them."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from corral_plugin_example.jsonl import JSONLinesLogger

TINY = ["trainer.n_epochs=2", "trainer.batch_size=128", "trainer.eval_every=0"]


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_jsonl_logger_writes_strict_json(tmp_path: Path) -> None:
    logger = JSONLinesLogger(tmp_path / "p.jsonl")
    logger.log(0, {"a": 1.5, "b": math.nan})
    logger.log(1, {"a": 2.0})
    logger.close()
    logger.close()
    assert read_lines(tmp_path / "p.jsonl") == [{"epoch": 0, "a": 1.5, "b": None}, {"epoch": 1, "a": 2.0}]


def test_run_built_in_process(corral_build) -> None:
    """``corral_build`` composes and builds like ``train.py``, and closes the run afterwards."""
    run = corral_build("env=goal_chain", "worker=noisy_obs", "worker.n_envs=2", "logger=[jsonl]", *TINY)
    run.train()
    lines = read_lines(run.trainer.log_dir / "progress.jsonl")
    assert [line["epoch"] for line in lines] == [0, 1]
    assert all(line["env_steps"] >= 128 * (line["epoch"] + 1) for line in lines)


def test_corral_train_with_the_preset(tmp_path: Path) -> None:
    """``corral train experiment=example_quick`` (the same as ``python train.py ...``)."""
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "corral.framework.cli", "train", "experiment=example_quick", "trainer.batch_size=128",
         f"hydra.run.dir={run_dir}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = read_lines(run_dir / "progress.jsonl")
    assert [line["epoch"] for line in lines] == [0, 1]
    config = json.loads((run_dir / "summary.json").read_text())["config"]
    assert config["env"]["name"] == "goal_chain" and config["worker"]["name"] == "noisy_obs"
    assert sorted(config["logger"]) == ["console", "jsonl"]
