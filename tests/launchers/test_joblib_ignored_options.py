"""``hydra/launcher=joblib`` with a ``joblib.Parallel`` setting the launcher does not use, end to end with
``train.py`` as a user runs it.

Before: ``hydra.launcher.batch_size=4``, ``pre_dispatch=1``, ``temp_folder=/nonexistent``,
``max_nbytes=1K`` or ``mmap_mode=r+`` were taken, printed in the launch line
(``Joblib.Parallel(n_jobs=-1,backend=loky,...,pre_dispatch=1,batch_size=4,...)``) as if used, and
ignored: the launcher hands each job to a worker process of its own and reads only ``n_jobs``,
``timeout`` and ``verbose``. Now a value other than the preset's is one line before any job (exit
status 2, no sweep directory), as ``backend``/``prefer``/``require`` were
(tests/conf/test_launchers.py), and the launch line shows only what applies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"
PRESET = ROOT / "corral" / "conf" / "hydra" / "launcher" / "joblib.yaml"
#: A tiny run: two epochs of ~500 steps, one evaluation episode at the end, CSV only.
TINY = ["trainer.max_env_steps=1000", "trainer.batch_size=500", "trainer.eval_episodes=1", "logger=[csv]",
        "trainer.progress=false"]
JOBS = " (hydra.launcher.n_jobs sets how many jobs run at once)"


def refusal(setting: str, what: str, hint: str = "") -> str:
    """The line a refused setting gets."""
    key = setting.split("=", 1)[0].rsplit(".", 1)[1]
    return (f"corral: error: {setting}: the launcher runs each job in a worker process of its own, handed one job at "
            f"a time, and does not use joblib's {key} ({what}), so it would not change how the sweep runs; leave it "
            f"out{hint}")


def sweep(tmp_path: Path, *settings: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``train.py -m hydra/launcher=joblib <settings> seed=1,2`` (tiny), into ``tmp_path/sweep``."""
    return subprocess.run([sys.executable, str(TRAIN), "-m", "seed=1,2", "hydra/launcher=joblib", *settings, *TINY,
                           f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.mark.parametrize(("setting", "what", "hint"), [
    ("hydra.launcher.batch_size=4", "how many jobs joblib hands a worker at once", JOBS),
    ("hydra.launcher.batch_size=auto", "how many jobs joblib hands a worker at once", JOBS),  # joblib's default
    ("hydra.launcher.pre_dispatch=1", "how many jobs joblib queues ahead for its workers", JOBS),
    ("hydra.launcher.temp_folder=/nonexistent", "where joblib memory-maps large numpy arguments", ""),
    ("hydra.launcher.max_nbytes=1K", "the size above which joblib memory-maps a numpy argument", ""),
    ("hydra.launcher.mmap_mode=r+", "how joblib opens the numpy arguments it memory-mapped", ""),
], ids=["batch_size", "batch_size_auto", "pre_dispatch", "temp_folder", "max_nbytes", "mmap_mode"])
def test_an_unused_joblib_setting_is_one_line_before_any_job(tmp_path: Path, setting: str, what: str,
                                                            hint: str) -> None:
    proc = sweep(tmp_path, "hydra.launcher.n_jobs=2", setting)
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    assert proc.stderr.strip().splitlines() == [refusal(setting, what, hint)], proc.stderr[-3000:]
    assert not (tmp_path / "sweep").exists()


def test_the_preset_values_run_and_the_launch_line_shows_what_applies(tmp_path: Path) -> None:
    """The preset's values, given on the command line too, are not refused; the sweep runs both jobs, and
    its launch line names n_jobs and timeout, not the settings the launcher does not use."""
    proc = sweep(tmp_path, "hydra.launcher.n_jobs=2", "hydra.launcher.timeout=300", "hydra.launcher.batch_size=1",
                 "hydra.launcher.pre_dispatch=2*n_jobs", "hydra.launcher.mmap_mode=r",
                 "hydra.launcher.temp_folder=null", "hydra.launcher.max_nbytes=null", timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    jobs = sorted(p for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0", "1"]
    assert [json.loads((p / "summary.json").read_text())["status"] for p in jobs] == ["completed", "completed"]
    launch = [line for line in out.splitlines() if "is launching" in line]
    assert len(launch) == 1, out[-3000:]
    assert launch[0].endswith("] Joblib.Parallel(n_jobs=2,timeout=300.0) is launching 2 jobs, each in a loky worker "
                              "process of its own"), launch


def test_the_preset_holds_the_values_that_are_not_refused() -> None:
    """The preset's (and so the default sweep's) values of the unused settings are the ones
    ``check_config`` lets through."""
    from hydra_plugins.corral_joblib_launcher.joblib_launcher import UNUSED

    preset = yaml.safe_load(PRESET.read_text())
    assert {key: (None if preset[key] is None else str(preset[key])) for key in UNUSED} == {
        key: value for key, (value, _) in UNUSED.items()}
