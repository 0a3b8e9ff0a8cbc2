"""``hydra/launcher=ray`` (corral.launchers.ray): per-job resources, and a sweep on a real two-node cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from corral.framework.errors import ConfigError
from corral.launchers.ray import RayLauncherSettings, job_bundles

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"
TINY = ["trainer.max_env_steps=1000", "trainer.batch_size=500", "trainer.eval_episodes=1", "logger=[csv]",
        "trainer.progress=false"]


def test_bundles_follow_each_jobs_sampler() -> None:
    s = RayLauncherSettings()
    assert job_bundles({"sampler": {"name": "local", "n_workers": 4}}, s) == [{"CPU": 1.0}]
    assert job_bundles({"sampler": {"name": "multiprocessing", "n_workers": 3}}, s) == [{"CPU": 3.0}]
    # sampler=ray: the trainer's bundle plus one per actor, with the actor's own CPUs and GPUs.
    assert job_bundles({"sampler": {"name": "ray", "n_workers": 2, "num_cpus": 0.5, "num_gpus": 0.25}}, s) == [
        {"CPU": 1.0}, {"CPU": 0.5, "GPU": 0.25}, {"CPU": 0.5, "GPU": 0.25}]
    assert job_bundles({"sampler": {"name": "ray", "n_workers": 2, "num_cpus": 0.0}}, s) == [{"CPU": 1.0}]
    small = RayLauncherSettings(driver_cpus=0.25, driver_gpus=1.0)
    assert job_bundles({"sampler": {"name": "ray", "n_workers": 1, "num_cpus": 1}}, small) == [
        {"CPU": 0.25, "GPU": 1.0}, {"CPU": 1.0}]
    assert job_bundles({"sampler": {"name": "ray", "n_workers": 8}}, RayLauncherSettings(job_cpus=2)) == [{"CPU": 2.0}]


@pytest.mark.parametrize("bad", [dict(driver_cpus=0), dict(job_cpus=-1), dict(max_concurrent_jobs=0),
                                 dict(poll_s=0)])
def test_bad_settings_are_config_errors(bad: dict) -> None:
    with pytest.raises(ConfigError, match="hydra.launcher"):
        RayLauncherSettings(**bad).validate()


def test_runtime_env_is_checked_and_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    s = RayLauncherSettings(runtime_env={"working_dir": "mine", "env_vars": {"A": 1}, "pip": []})
    s.validate()
    assert s.runtime_env == {"working_dir": str(tmp_path / "mine"), "env_vars": {"A": "1"}}
    with pytest.raises(ConfigError, match=r"hydra.launcher.runtime_env has unknown key\(s\) \['workdir'\]"):
        RayLauncherSettings(runtime_env={"workdir": "."}).validate()
    with pytest.raises(ConfigError, match="hydra.launcher.runtime_env.py_modules: 'nowhere' does not exist"):
        RayLauncherSettings(runtime_env={"py_modules": ["nowhere"]}).validate()


ray = pytest.importorskip("ray")


def test_runtime_env_reaches_the_jobs_processes() -> None:
    """The launcher's runtime environment is the runtime's: a task (a job) sees its env_vars."""
    import os

    from corral.launchers.ray import _connect

    if ray.is_initialized():
        pytest.skip("a Ray runtime is already running in this process")
    os.environ.pop("CORRAL_RUNTIME_ENV_TEST", None)
    settings = RayLauncherSettings(num_cpus=1, runtime_env={"env_vars": {"CORRAL_RUNTIME_ENV_TEST": "from-settings"}})
    settings.validate()
    assert _connect(ray, settings) is True
    try:
        seen = ray.get(ray.remote(lambda: os.environ.get("CORRAL_RUNTIME_ENV_TEST")).remote(), timeout=120)
    finally:
        ray.shutdown()
    assert seen == "from-settings"
sys.path.insert(0, str(ROOT / "tests" / "plugins" / "samplers"))
from test_ray_runtime import ray_cluster  # noqa: E402,F401  - the two-node `ray start` cluster fixture


def test_sweep_with_ray_samplers_on_a_two_node_cluster(ray_cluster, tmp_path: Path) -> None:  # noqa: F811
    """Two 1-CPU nodes; each job needs its trainer's CPU plus its sampler actor's CPU, so the jobs
    take turns instead of both holding a CPU while waiting for their actors (the nested deadlock)."""
    address, env = ray_cluster
    env = dict(env, RAY_ADDRESS=address)
    sweep_dir = tmp_path / "multirun"
    cmd = [sys.executable, str(TRAIN), "-m", "hydra/launcher=ray", "hydra.launcher.address=auto",
           "hydra.launcher.poll_s=0.2", "seed=1,2", "sampler=ray", "sampler.n_workers=1", "sampler.address=auto",
           "sampler.start_timeout=60",
           *TINY, f"hydra.sweep.dir={sweep_dir}"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=400, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Ray launcher: 2 job(s) on the Ray cluster at auto" in out
    assert out.count("[CPU=1 + CPU=1]") == 2  # trainer bundle + one actor bundle per job
    summaries = [json.loads((sweep_dir / j / "summary.json").read_text()) for j in ("0", "1")]
    assert [s["status"] for s in summaries] == ["completed", "completed"]
    assert sorted(s["config"]["seed"] for s in summaries) == [1, 2]
    assert all(s["env_steps"] >= 1000 and s["final_eval_return"] is not None for s in summaries)
    # The jobs did not overlap: 2 CPUs hold one job (trainer + actor) at a time.
    (a0, b0), (a1, b1) = sorted((s["started_at"], s["finished_at"]) for s in summaries)
    assert b0 <= a1 + 1.0  # start times are taken before Ray placement bookkeeping; allow a little slack

    # A job that can never fit (trainer + 3 actors = 4 CPUs on a 2-CPU cluster) fails at once, clearly.
    cmd_big = [c for c in cmd if not c.startswith(("seed=", "sampler.n_workers=", "hydra.sweep.dir="))]
    cmd_big.append("sampler.n_workers=3")
    proc = subprocess.run([*cmd_big, f"hydra.sweep.dir={tmp_path / 'big'}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=200, env=env)
    assert proc.returncode != 0
    assert "needs 4 CPU(s)" in proc.stdout + proc.stderr and "the cluster has 2" in proc.stdout + proc.stderr

    # A job that fails (here its environment raises on the Ray sampler's actor) fails the sweep with a
    # message naming it. (A config error is refused before any job starts, whatever the launcher.)
    cmd_bad = [c for c in cmd if not c.startswith(("seed=", "hydra.sweep.dir="))]
    proc = subprocess.run([*cmd_bad, "seed=1", "env.id=corral.testing.faulty_envs:corral/RaisingCartPole-v1",
                           "+env.kwargs.fail_at=5", f"hydra.sweep.dir={tmp_path / 'bad'}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=200, env=env)
    out = proc.stdout + proc.stderr
    why = "raised EnvironmentFailure: RaisingCartPole failed on purpose at step 5"
    assert proc.returncode != 0
    assert "corral: error: " in out and why in out, out[-3000:]  # the job's own message
    assert "corral: job 0 (" in out and "failed: ray sampler: worker 0 (pid " in out and why in out, out[-3000:]

    # The launcher left the cluster it joined running.
    status = subprocess.run([sys.executable, "-c", "import ray; ray.init(address='auto'); "
                             "print(int(ray.cluster_resources()['CPU']))"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert status.stdout.strip().endswith("2"), status.stderr[-2000:]
