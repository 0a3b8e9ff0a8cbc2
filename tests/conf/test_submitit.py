"""``hydra/launcher=submitit_local`` and ``submitit_slurm``: corral's presets of Hydra's submitit launcher.

- ``submitit_local`` for real: a sweep's jobs run as processes submitit starts, one job array per
  resource size, each job sized from its own sampler;
- ``submitit_slurm`` without a cluster: the ``sbatch`` script submitit writes for a job asks for the
  job's CPUs and memory per CPU (a stand-in ``srun`` on PATH only lets submitit's SLURM executor be
  built; nothing is submitted).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
pytest.importorskip("submitit")

from corral.testing import compose_config  # noqa: E402
from hydra_plugins.corral_submitit_launcher.submitit_launcher import (  # noqa: E402
    CorralSlurmLauncher,
    job_cpus,
)

ROOT = Path(__file__).resolve().parents[2]
PRESETS = ROOT / "corral" / "conf" / "hydra" / "launcher"
TINY = ["trainer.max_env_steps=1000", "trainer.batch_size=500", "trainer.eval_episodes=1", "logger=[csv]",
        "trainer.progress=false"]


def test_submitit_local_runs_each_job_as_a_submitit_process_sized_by_its_sampler(tmp_path: Path) -> None:
    sweep = tmp_path / "multirun"
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=submitit_local", "seed=1",
           "sampler=local,multiprocessing", "sampler.n_workers=2", *TINY, f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=400)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "validated against ConfigStore schema" not in out  # corral's preset, no deprecation noise
    summaries = {int(p.parent.name): json.loads(p.read_text()) for p in sweep.glob("*/summary.json")}
    assert sorted(summaries) == [0, 1]
    assert all(s["status"] == "completed" and s["job"]["mode"] == "MULTIRUN" for s in summaries.values())
    assert [summaries[i]["config"]["sampler"]["name"] for i in (0, 1)] == ["local", "multiprocessing"]
    # Each job sized from its own config: the trainer alone, then two worker processes.
    assert "sampler=local sampler.n_workers=2" in out and "(1 CPU(s))" in out and "(2 CPU(s))" in out
    # Jobs ran in processes submitit started (its job ids are their pids), one array per size.
    job_dirs = [p for p in (sweep / ".submitit").iterdir() if p.name != "%j"]
    assert len(job_dirs) == 2
    ids = {p.name for p in job_dirs}
    logs = [p for d in job_dirs for p in d.glob("*_log.out")]
    assert len(logs) == 2
    assert {str(s["job"]["id"]) for s in summaries.values()} == ids
    assert len({s["pid"] for s in summaries.values()} | {os.getpid()}) == 3


@pytest.mark.parametrize(("setting", "line"), [
    ("hydra.launcher.timeout_min=-1", "hydra.launcher.timeout_min must be a whole number >= 1, got -1"),
    ("hydra.launcher.cpus_per_task=0", "hydra.launcher.cpus_per_task must be a whole number >= 1 or null, got 0"),
])
def test_a_setting_out_of_range_is_one_line_before_any_job(tmp_path: Path, setting: str, line: str) -> None:
    """``timeout_min=-1`` made every job fail with submitit's 'No error stream produced' lines;
    ``cpus_per_task=0`` was passed on to each job."""
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "seed=1", "hydra/launcher=submitit_local",
                           setting, *TINY, f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [f"corral: error: {line}"], proc.stderr[-3000:]
    assert not (tmp_path / "sweep").exists()


def test_job_cpus_follow_the_sampler() -> None:
    assert job_cpus(compose_config(["sampler=local"])) == 1
    assert job_cpus(compose_config(["sampler=multiprocessing", "sampler.n_workers=4"])) == 4
    assert job_cpus(compose_config(["sampler=ray", "sampler.n_workers=3", "sampler.num_cpus=2"])) == 7  # 1 + 3 x 2


def test_the_slurm_preset_asks_sbatch_for_the_jobs_cpus_and_memory(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from hydra_plugins.hydra_submitit_launcher.config import SlurmQueueConf

    # The preset as Hydra composes it: corral's YAML over the launcher's own schema.
    preset = OmegaConf.merge(OmegaConf.structured(SlurmQueueConf), OmegaConf.load(PRESETS / "submitit_slurm.yaml"),
                             {"submitit_folder": str(tmp_path / "%j"), "name": "corral", "partition": "cpu"})
    params = {k: v for k, v in OmegaConf.to_container(preset).items() if k != "_target_"}
    assert preset._target_.endswith("CorralSlurmLauncher") and params["cpus_per_task"] is None
    srun = tmp_path / "bin" / "srun"  # submitit's SLURM executor insists on finding srun; never run
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{srun.parent}{os.pathsep}{os.environ['PATH']}")
    launcher = CorralSlurmLauncher(**params)
    cpus = job_cpus(compose_config(["sampler=multiprocessing", "sampler.n_workers=6"]))
    script = launcher._executor(cpus)._executor._make_submission_file_text("python -m submitit.core._submit", "u")
    lines = set(script.splitlines())
    assert {"#SBATCH --cpus-per-task=6", "#SBATCH --mem-per-cpu=2G", "#SBATCH --partition=cpu",
            "#SBATCH --time=60", "#SBATCH --job-name=corral"} <= lines, script
    assert not any(line.startswith("#SBATCH --mem=") for line in lines)


def _session_processes(session: int, needle: str) -> list[int]:
    """Live processes of ``session`` whose command line contains ``needle``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z" and needle in cmdline:
            found.append(int(entry.name))
    return found


def test_a_preempted_submitit_job_is_requeued_and_resumes_from_its_snapshot(tmp_path: Path) -> None:
    import signal
    import time

    sweep = tmp_path / "multirun"
    job_dir = sweep / "0"
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=submitit_local", "seed=1",
           "trainer.n_epochs=60", "trainer.max_env_steps=1000000", "trainer.batch_size=200", "trainer.eval_every=0",
           "logger=[csv]", "trainer.progress=false", f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            rows = (job_dir / "progress.csv").read_text().count("\n") - 1 if (job_dir / "progress.csv").exists() else 0
            if rows >= 5 and (job_dir / "snapshots" / "latest").exists():
                break
            time.sleep(0.2)
        (task,) = _session_processes(proc.pid, "submitit.core._submit")
        os.kill(task, signal.SIGUSR2)  # what SLURM sends on preemption (and before the time limit)
        out, _ = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 0, out[-4000:]
    summary = json.loads((job_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["epochs"] == 60
    assert len(summary["resumes"]) == 1  # one run, resumed once, in place
    with open(job_dir / "progress.csv") as f:
        epochs = [int(float(line.split(",")[0])) for line in list(f)[1:]]
    assert epochs == list(range(60))  # one curve: every epoch exactly once
    logs = "".join(p.read_text() for p in (sweep / ".submitit").rglob("*_log.*"))  # the job's own logs
    assert "this job is preempted" in logs and "Requeued job" in logs
    assert "job #0 requeued; it resumes from its latest snapshot" in logs
    assert summary["resumes"][0]["in_place"] and summary["resumes"][0]["from_epoch"] >= 1  # not from scratch
