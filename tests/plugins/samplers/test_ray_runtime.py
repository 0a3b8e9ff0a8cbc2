"""RaySampler and Ray runtimes: its own local runtime, and a real multi-node cluster started with `ray start`."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from corral import EnvFactory, EnvSpec, MLPPolicy, RaySampler  # noqa: E402
from corral.testing.processes import (  # noqa: E402
    cmdline,
    default_signal_dispositions,
    descendants,
    started_session,
    stop_session,
    wait_for_path,
    wait_gone,
)

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


@pytest.mark.parametrize("how", ["sampler", "launcher"])
def test_a_local_runtime_that_cannot_start_is_one_line_naming_the_part(tmp_path: Path, how: str) -> None:
    """Ray's start fails on a temporary directory it cannot use (here a file; a full disk or a full
    /dev/shm fail it too, after Ray's startup timeout): one line naming the sampler or the launcher,
    not Ray's traceback, and no Ray process left."""
    (tmp_path / "a_file").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_TMPDIR"] = str(tmp_path / "a_file")
    run = ["-m", "hydra/launcher=ray", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}"] if how == "launcher" \
        else ["sampler=ray", f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *run, "trainer.n_epochs=1", "trainer.batch_size=100",
         "trainer.eval_every=0", "trainer.progress=false", "logger=[csv]"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    part = "hydra/launcher=ray" if how == "launcher" else "ray sampler"
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line == (f"corral: error: {part}: could not start a local Ray runtime (NotADirectoryError: [Errno 20] Not "
                    f"a directory: '{tmp_path / 'a_file' / 'ray'}'); Ray's logs say why (under its temporary "
                    "directory, /tmp/ray/session_latest/logs by default): a full disk there or a full /dev/shm "
                    "stops it"), proc.stderr[-3000:]
    left = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit() and str(tmp_path) in cmdline(int(d.name))]
    assert not left, [cmdline(pid) for pid in left]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("how", ["sampler", "sampler with RAY_ADDRESS and auto", "launcher"])
def test_a_cluster_address_where_nothing_answers_is_one_line_within_seconds(tmp_path: Path, how: str) -> None:
    """Ray would retry the connection for minutes (twenty tries of about half a minute); corral asks
    the address first and stops with one line naming the setting and what to do. The Ray launcher's
    address is checked before the sweep starts: no job runs."""
    port = free_port()  # nothing listens there once the probe socket is closed
    address = f"127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    option, given = ("hydra.launcher.address", address) if how == "launcher" else ("sampler.address", address)
    if how == "sampler with RAY_ADDRESS and auto":
        given, env["RAY_ADDRESS"] = "auto", address
    run = ["-m", "hydra/launcher=ray", f"hydra.launcher.address={given}", "seed=1,2",
           f"hydra.sweep.dir={tmp_path / 'sweep'}"] if how == "launcher" else [
        "sampler=ray", f"sampler.address={given}", f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *run, "trainer.n_epochs=1", "trainer.batch_size=100",
         "trainer.eval_every=0", "trainer.progress=false", "logger=[csv]"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"corral: error: could not join a Ray cluster at {option}={given} (nothing answers at "), line
    assert line.endswith(f":{port}: Connection refused): start one with `ray start --head` and give its address "
                         f"(host:port, ray://host:10001, or auto on one of its nodes), or leave {option} empty for a "
                         "Ray runtime of this run's own"), line
    assert not (tmp_path / "sweep").exists()  # the launcher's: before the sweep, no job


def full_cmdline(pid: int) -> str:
    """The whole command line of ``pid`` ('' when it cannot be read)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def cluster_processes(port: int, temp_dir: str) -> set[int]:
    """The processes of the `ray start` cluster whose GCS listens on ``port`` and whose files are in
    ``temp_dir``, and their descendants (worker processes renamed ``ray::...``). Only this
    cluster's: never another Ray on the machine."""
    import re

    mark = re.compile(rf"(:|=){port}\b|{re.escape(temp_dir)}")
    pids = {int(e) for e in os.listdir("/proc") if e.isdigit() and mark.search(full_cmdline(int(e)))}
    pids.discard(os.getpid())
    for pid in list(pids):
        pids |= descendants(pid)
    return pids


def stop_cluster(port: int, temp_dir: str) -> set[int]:
    """SIGTERM this cluster's processes, up to 10 s for them to go, then SIGKILL; the pids still
    running after that are returned. (Not `ray stop`, which stops every Ray on the machine.)"""
    import signal

    left: set[int] = set()
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        pids = cluster_processes(port, temp_dir) | left
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        left = wait_gone(pids, timeout=grace)
        if not left:
            break
    return left


@pytest.fixture()
def ray_cluster(tmp_path: Path):
    """A head node and a second node process on this machine, each with one CPU, stopped afterwards
    (its own processes only, bounded)."""
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    assert ray_cli, "the ray CLI is not installed"
    # Without token authentication (the cluster listens on 127.0.0.1 only): with Ray 2.60 and a
    # ~/.ray/auth_token on the machine, the second `ray start --address` failed with InvalidAuthToken.
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    env.pop("RAY_ADDRESS", None)
    port = free_port()
    # A short temporary directory of its own (Ray's socket paths must stay short): it marks this
    # cluster's processes, and goes with it. Inside the suite's Ray directory (RAY_TMPDIR, see
    # tests/conftest.py), which the suite removes even when this teardown does not run.
    temp_dir = tempfile.mkdtemp(prefix="c", dir=os.environ.get("RAY_TMPDIR") or "/tmp")
    common = ["--num-cpus=1", "--object-store-memory=150000000", "--disable-usage-stats", f"--temp-dir={temp_dir}"]
    try:
        subprocess.run([ray_cli, "start", "--head", f"--port={port}", "--include-dashboard=false", *common],
                       check=True, capture_output=True, timeout=120, env=env, preexec_fn=default_signal_dispositions)
        subprocess.run([ray_cli, "start", f"--address=127.0.0.1:{port}", *common],
                       check=True, capture_output=True, timeout=120, env=env, preexec_fn=default_signal_dispositions)
        yield f"127.0.0.1:{port}", env
    finally:
        left = stop_cluster(port, temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not left, f"cluster processes still running: {[full_cmdline(p)[:120] for p in left]}"


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


#: train.py as `python train.py ...` runs it, plus a SIGUSR2 that prints every thread's stack
#: (faulthandler), so a run that does not stop says where it is.
STACKS_ON_SIGUSR2 = ("import faulthandler, runpy, signal, sys; faulthandler.register(signal.SIGUSR2, all_threads=True); "
                     "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def test_ctrl_c_of_train_py_leaves_no_actor_or_ray_process(tmp_path: Path) -> None:
    import signal
    import time

    run = tmp_path / "run"
    cmd = [sys.executable, "-c", STACKS_ON_SIGUSR2, str(ROOT / "train.py"), "sampler=ray", "sampler.n_workers=2", "trainer.n_epochs=100000",
           "trainer.max_env_steps=null", "trainer.batch_size=400", "trainer.eval_every=0", "trainer.progress=false",
           "logger=[csv]", f"hydra.run.dir={run}"]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    # Its own session, so the SIGINT reaches the whole process group as Ctrl-C in a terminal does.
    # (started_session: SIGINT at its default disposition however the suite was launched, and
    # nothing left running whatever happens.)
    with started_session(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        wait_for_path(proc, run / "snapshots" / "latest", timeout=180)
        spawned = descendants(proc.pid)
        assert spawned, "Ray started no processes?"
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGUSR2)
            time.sleep(3)
            stop_session(proc)
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"train.py did not stop within 90 s of Ctrl-C; its stderr, with every thread's stack:\n{err[-12000:]}")
    assert proc.returncode == 130, err[-3000:]
    assert "corral: interrupted" in err
    # Ray's notice that its default token authentication is on came with every local runtime (Ray 2.60)
    assert "Token authentication is enabled" not in err, err[-3000:]
    left = wait_gone(spawned, timeout=30)
    assert not left, [cmdline(p) for p in left]


@pytest.mark.parametrize("how", ["sampler", "launcher"])
def test_ctrl_c_while_ray_starts_leaves_no_ray_process(tmp_path: Path, how: str) -> None:
    """Ctrl-C (SIGINT to the whole process group) while ``ray.init`` starts the local runtime of
    ``sampler=ray`` or of ``hydra/launcher=ray``: its raylet is up and has started its agents, no
    worker exists yet. train.py stops with its one line and status 130, and no process it started is
    running ten seconds after it exited (the raylet's agents outlived it by a minute)."""
    import signal
    import time

    run = ["-m", "hydra/launcher=ray", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}"] if how == "launcher" \
        else ["sampler=ray", "sampler.n_workers=2", f"hydra.run.dir={tmp_path / 'run'}"]
    cmd = [sys.executable, "-c", STACKS_ON_SIGUSR2, str(ROOT / "train.py"), *run, "trainer.n_epochs=100000",
           "trainer.max_env_steps=null", "trainer.batch_size=400", "trainer.eval_every=0", "trainer.progress=false",
           "logger=[csv]"]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    # Files, not pipes: a Ray process that outlives train.py would hold them open.
    err_path = tmp_path / "stderr"
    seen: dict[int, str] = {}  # every descendant of train.py at any poll, with its latest command line

    def poll(pid: int) -> dict[int, str]:
        now = {p: cmdline(p) for p in descendants(pid)}
        seen.update({p: line for p, line in now.items() if line != "?" or p not in seen})
        return now

    def is_worker(line: str) -> bool:  # a Ray worker process (an actor, a job's task); the agents are ray::...Agent
        return "default_worker.py" in line or (line.startswith("ray::") and not line.endswith("Agent"))

    with err_path.open("w") as err_file, started_session(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err_file,
                                                          env=env) as proc:
        # SIGINT once the raylet has started its agents (or a second after the raylet appeared):
        # ray.init then still waits, for seconds, for the node to register and this driver to connect.
        deadline, raylet_at = time.monotonic() + 180, None
        while True:
            assert proc.poll() is None, f"train.py exited ({proc.returncode}) before Ray started: " \
                                        f"{err_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no raylet within 180 s: {sorted(seen.values())}"
            now = poll(proc.pid)
            raylets = [p for p, line in now.items() if "/raylet/raylet " in line]
            if raylets and raylet_at is None:
                raylet_at = time.monotonic()
            if raylets and (descendants(raylets[0]) or time.monotonic() - raylet_at > 1.0):
                break
            time.sleep(0.02)
        during_start = not any(is_worker(line) for line in now.values()) and not any(tmp_path.rglob("progress.csv"))
        os.killpg(proc.pid, signal.SIGINT)
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            poll(proc.pid)  # what started after the signal too
            time.sleep(0.05)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGUSR2)
            time.sleep(3)
            pytest.fail(f"train.py did not stop within 90 s of Ctrl-C; its stderr, with every thread's stack:\n"
                        f"{err_path.read_text()[-12000:]}")
        # Before leaving the block, which stops whatever is left.
        survivors = {p: seen[p] for p in wait_gone(seen, timeout=10)}
    err = err_path.read_text()
    print(f"SIGINT {'while Ray started' if during_start else 'after a Ray worker existed'}; {len(seen)} processes seen")
    assert proc.returncode == 130, err[-3000:]
    assert "corral: interrupted" in err and "Traceback" not in err, err[-3000:]
    assert not survivors, f"running 10 s after train.py exited: {survivors}"


ASSETS = ROOT / "tests" / "plugins" / "samplers" / "ray_assets"
# A driver whose policy and environment classes come from tests/plugins/samplers/ray_assets, a
# directory no Ray worker has on its path: the driver imports the module, then drops the directory
# from sys.path, as a node that never had the file (Ray hands the driver's sys.path to its workers).
RUNTIME_ENV_DRIVER = """
import json, sys
assets, runtime_env = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, assets)
import corral_only_here
sys.path.remove(assets)
from corral import EnvFactory, EnvSpec, RaySampler, WorkerError
env = EnvFactory(corral_only_here.OnlyHereCartPole)
policy = corral_only_here.OnlyHerePolicy(EnvSpec.from_env(env()))
try:
    with RaySampler(agents=policy, envs=env, max_episode_length=50, n_workers=2, seed=1, address="auto",
                    start_timeout=90, timeout=90, runtime_env=runtime_env) as sampler:
        batch = sampler.obtain_samples(0, 200, policy.get_param_values())
        print("SAMPLED", len(batch), "NODES", len({node for _, node in sampler.locations}))
except WorkerError as exc:
    print("WORKER_ERROR", str(exc).splitlines()[0])
"""


def test_runtime_env_ships_a_scripts_own_module_to_a_two_node_cluster(ray_cluster, tmp_path: Path) -> None:
    """A class Ray's workers cannot import is a WorkerError naming the module and the fix;
    sampler.runtime_env (working_dir or py_modules) ships it to both nodes."""
    import json

    address, env = ray_cluster
    env = dict(env, RAY_ADDRESS=address)

    def drive(runtime_env: dict) -> str:
        proc = subprocess.run([sys.executable, "-c", RUNTIME_ENV_DRIVER, str(ASSETS), json.dumps(runtime_env)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=240, env=env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-4000:]
        return proc.stdout

    out = drive({})
    assert "WORKER_ERROR ray sampler: worker " in out, out
    assert "cannot import module 'corral_only_here'" in out and "sampler.runtime_env" in out, out
    assert "IndexError" not in out and "before it had an agent" not in out
    for runtime_env in ({"working_dir": str(ASSETS)}, {"py_modules": [str(ASSETS / "corral_only_here.py")]}):
        out = drive(runtime_env)
        # One CPU per node and per actor: the two actors ran on the two nodes, both importing the module.
        assert "SAMPLED" in out and "NODES 2" in out, (runtime_env, out)
