"""What a ``hydra/launcher=submitit_*`` job is given: CPUs that count ``worker.backend=async``'s
environment processes, the machine's GPUs unless ``gpus_per_node`` is asked for, and one task.

Each test runs the real ``train.py -m hydra/launcher=submitit_local`` (tiny runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
pytest.importorskip("submitit")

from corral.testing import compose_config  # noqa: E402
from hydra_plugins.corral_submitit_launcher.submitit_launcher import job_cpus  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = ["trainer.max_env_steps=1000", "trainer.batch_size=500", "trainer.eval_episodes=1", "logger=[csv]",
        "trainer.progress=false"]
ASYNC = ["worker=vector", "worker.backend=async"]

#: A CartPole whose module, imported by each process that makes the env, writes that process's
#: ``CUDA_VISIBLE_DEVICES`` (``repr``: ``None`` when unset) to ``$CUDA_PROBE_OUT/<pid>.txt``.
PROBE = '''
import os
import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
with open(os.path.join(os.environ["CUDA_PROBE_OUT"], f"{os.getpid()}.txt"), "w") as f:
    f.write(repr(os.environ.get("CUDA_VISIBLE_DEVICES")))
if "corral_test/CudaProbe-v1" not in gym.registry:
    gym.register(id="corral_test/CudaProbe-v1", entry_point=CartPoleEnv, max_episode_steps=500)
'''


def sweep(tmp_path: Path, *overrides: str, env: dict[str, str] | None = None,
          timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``train.py -m hydra/launcher=submitit_local`` with ``overrides``, its sweep in ``tmp_path/sweep``."""
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=submitit_local", "seed=1", *overrides,
           f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=env)


def test_async_environment_processes_count_toward_a_jobs_cpus(tmp_path: Path) -> None:
    """A job with 3 async environment processes asked for 1 CPU (the trainer's) whatever n_envs."""
    proc = sweep(tmp_path, *ASYNC, "worker.n_envs=2,3", *TINY)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "worker.n_envs=2" in out and "(3 CPU(s))" in out, out[-4000:]  # the trainer + 2 env processes
    assert "worker.n_envs=3" in out and "(4 CPU(s))" in out, out[-4000:]
    summaries = [json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/summary.json")]
    assert sorted(s["status"] for s in summaries) == ["completed", "completed"]
    # Per sampler worker under sampler=ray, beside each actor's num_cpus; samplers whose workers are
    # daemon processes (no async there) are sized as before.
    assert job_cpus(compose_config([*ASYNC, "worker.n_envs=4", "sampler=ray", "sampler.n_workers=2"])) == 11
    assert job_cpus(compose_config([*ASYNC, "worker.n_envs=4", "sampler.n_workers=2"])) == 9
    assert job_cpus(compose_config(["worker=vector", "worker.n_envs=8"])) == 1  # native backend: in-process


def _job_cuda(tmp_path: Path, *overrides: str) -> tuple[str, str]:
    """Run one job of the probe env; its ``CUDA_VISIBLE_DEVICES`` (as ``repr``) and the sweep's output."""
    (tmp_path / "cuda_probe.py").write_text(PROBE)
    probe = tmp_path / "probe"
    probe.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
           "CUDA_PROBE_OUT": str(probe)}
    env.pop("CUDA_VISIBLE_DEVICES", None)  # the sweep's own: unset, every GPU visible
    proc = sweep(tmp_path, "env=gym", "env.id=cuda_probe:corral_test/CudaProbe-v1", *overrides, *TINY, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    summary = json.loads((tmp_path / "sweep" / "0" / "summary.json").read_text())
    assert summary["status"] == "completed", out[-4000:]
    return (probe / f"{summary['pid']}.txt").read_text(), out


def test_a_submitit_local_job_sees_the_machines_gpus_unless_it_asks_for_a_number(tmp_path: Path) -> None:
    """The preset's ``gpus_per_node: 0`` made submitit set ``CUDA_VISIBLE_DEVICES=""`` for every job:
    no GPU, and ``device=auto`` quietly on the CPU."""
    seen, _ = _job_cuda(tmp_path)
    assert seen == "None"  # left as the sweep's (unset), not ""


def test_explicit_gpus_and_cpus_per_task_are_respected(tmp_path: Path) -> None:
    seen, out = _job_cuda(tmp_path, "hydra.launcher.gpus_per_node=1", "hydra.launcher.cpus_per_task=2", *ASYNC,
                          "worker.n_envs=3")
    assert seen == "'0'"  # submitit's own choice for one GPU
    assert "(2 CPU(s))" in out, out[-4000:]  # the user's number, not the computed 4


@pytest.mark.parametrize("setting", ["hydra.launcher.tasks_per_node=2", "hydra.launcher.nodes=2"])
def test_more_than_one_task_per_job_is_one_line_before_any_job(tmp_path: Path, setting: str) -> None:
    """``tasks_per_node=2`` ran the job twice in one directory: one trained, the twin failed, the
    directory in use."""
    proc = sweep(tmp_path, setting, *TINY, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"corral: error: {setting}: a corral job is one trainer process"), \
        proc.stderr[-3000:]
    assert "sampler.n_workers" in lines[0] and "more jobs" in lines[0]
    assert not (tmp_path / "sweep").exists()
