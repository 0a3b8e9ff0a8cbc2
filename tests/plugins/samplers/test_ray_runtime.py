"""RaySampler and Ray runtimes: its own local runtime, and a real multi-node cluster started with `ray start`."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from corral import EnvFactory, EnvSpec, MLPPolicy, RaySampler  # noqa: E402
from corral.testing.processes import cmdline, descendants, wait_gone  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture()
def policy():
    return MLPPolicy(EnvSpec.from_env(EnvFactory("CartPole-v1")()))


def test_starts_and_stops_its_own_runtime(policy, monkeypatch) -> None:
    if ray.is_initialized():
        ray.shutdown()
    # address="" means a runtime of its own, even where RAY_ADDRESS points at a cluster.
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    with RaySampler(agents=policy, envs=EnvFactory("CartPole-v1"), max_episode_length=100, n_workers=1, seed=1) as s:
        assert ray.is_initialized()
        assert len(s.obtain_samples(0, 100, policy.get_param_values())) >= 100
    assert not ray.is_initialized(), "a runtime the sampler started must be stopped at shutdown"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def ray_cluster(tmp_path: Path):
    """A head node and a second node process on this machine, each with one CPU, stopped afterwards."""
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    assert ray_cli, "the ray CLI is not installed"
    # Without token authentication (the cluster listens on 127.0.0.1 only): with Ray 2.60 and a
    # ~/.ray/auth_token on the machine, the second `ray start --address` failed with InvalidAuthToken.
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    port = free_port()
    common = ["--num-cpus=1", "--object-store-memory=150000000", "--disable-usage-stats"]
    started = []
    try:
        subprocess.run([ray_cli, "start", "--head", f"--port={port}", "--include-dashboard=false", *common],
                       check=True, capture_output=True, timeout=120, env=env)
        started.append("head")
        subprocess.run([ray_cli, "start", f"--address=127.0.0.1:{port}", *common],
                       check=True, capture_output=True, timeout=120, env=env)
        started.append("node")
        yield f"127.0.0.1:{port}", env
    finally:
        subprocess.run([ray_cli, "stop", "--force"], capture_output=True, timeout=120, env=env)


def test_train_py_on_a_two_node_cluster(ray_cluster, tmp_path: Path) -> None:
    address, env = ray_cluster
    env = dict(env, RAY_ADDRESS=address)
    cmd = [
        sys.executable, str(ROOT / "train.py"), "sampler=ray", "sampler.address=auto", "sampler.n_workers=2",
        "worker=vec", "worker.n_envs=2", "trainer.n_epochs=2", "trainer.batch_size=600", "trainer.eval_every=0",
        "trainer.progress=false", "logger=[console,csv]", f"hydra.run.dir={tmp_path / 'run'}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # One CPU per node and one CPU per actor: the two actors can only run on two different nodes.
    assert "ray sampler: 2 actors on 2 node(s)" in out, out[-4000:]
    assert (tmp_path / "run" / "progress.csv").read_text().count("\n") == 3


def test_ctrl_c_of_train_py_leaves_no_actor_or_ray_process(tmp_path: Path) -> None:
    import signal
    import time

    run = tmp_path / "run"
    cmd = [sys.executable, str(ROOT / "train.py"), "sampler=ray", "sampler.n_workers=2", "trainer.n_epochs=100000",
           "trainer.max_env_steps=null", "trainer.batch_size=400", "trainer.eval_every=0", "trainer.progress=false",
           "logger=[csv]", f"hydra.run.dir={run}"]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    # Its own session, so the SIGINT reaches the whole process group as Ctrl-C in a terminal does.
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 180
        while not (run / "snapshots" / "latest").exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no snapshot within 180 s"
            time.sleep(0.05)
        spawned = descendants(proc.pid)
        assert spawned, "Ray started no processes?"
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert proc.returncode == 130, err[-3000:]
    assert "corral: interrupted at epoch" in err
    left = wait_gone(spawned, timeout=30)
    assert not left, [cmdline(p) for p in left]
