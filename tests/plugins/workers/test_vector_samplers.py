"""``worker=vector`` under every sampler: the same episodes under local, multiprocessing and Ray for the
native, EnvPool and sync backends; action_server and alternating through the proxy agent; train.py."""

from __future__ import annotations

import copy
import csv
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corral.framework.env import EnvFactory
from corral.framework.worker import WorkerFactory
from corral.plugins.samplers.local import LocalSampler
from corral.plugins.samplers.multiprocessing import MultiprocessingSampler
from corral.plugins.workers.vector import VectorWorker
from corral.testing.contracts.helpers import env_spec_of, make_test_policy, perturbed
from corral.testing.processes import child_processes, shm_entries, wait_gone

REPO = Path(__file__).resolve().parents[3]
CARTPOLE = EnvFactory("CartPole-v1")
TIMEOUT = 60.0


def has_envpool() -> bool:
    try:
        import envpool  # noqa: F401
    except ImportError:
        return False
    return True


BACKENDS = [
    {"backend": "native", "n_envs": 5},
    {"backend": "sync", "n_envs": 3},
    pytest.param({"backend": "envpool", "n_envs": 4, "num_threads": 1},
                 marks=pytest.mark.skipif(not has_envpool(), reason="needs EnvPool")),
    {"backend": "native", "n_envs": 3, "timesteps_per_call": 20},
    {"backend": "sync", "n_envs": 3, "carry_episodes": True},
]
IDS = ["native", "sync", "envpool", "native-fragments", "sync-carried"]


def factory(args: dict[str, Any], seed: int = 11, n_workers: int = 2) -> WorkerFactory:
    return WorkerFactory(seed=seed, max_episode_length=200, n_workers=n_workers, worker_class=VectorWorker,
                         worker_args=dict(args))


@pytest.fixture(scope="module")
def policy() -> Any:
    return make_test_policy(env_spec_of(CARTPOLE))


def same_calls(reference: Any, sampler: Any, policy: Any) -> None:
    """Three obtain_samples calls (the second with new parameters) and one obtain_exact_episodes call
    give the same episodes from both samplers."""
    params0 = policy.get_param_values()
    params1 = perturbed(params0)
    for itr, params in enumerate((params0, params1, params1)):
        want = reference.obtain_samples(itr, 400, params)
        got = sampler.obtain_samples(itr, 400, params)
        assert len(got) >= 400
        assert got.differences(want) == [], f"call {itr}"
    if not reference.worker_factory.worker_args.get("timesteps_per_call"):  # fragments: no episode counts
        want = reference.obtain_exact_episodes(3, params0)
        got = sampler.obtain_exact_episodes(3, params0)
        assert got.n_episodes == 6 and got.differences(want) == []


def baseline() -> tuple[set[int], set[str]]:
    """Child processes and shared-memory segments before a test (multiprocessing's resource tracker
    started first, so it is not taken for a leftover)."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    return set(child_processes()), shm_entries()


def no_leftovers(before_children: set[int], before_shm: set[str]) -> None:
    left = [p for p in child_processes() if p not in before_children]
    assert not wait_gone(left, timeout=20.0), f"processes left: {left}"
    assert not {n for n in shm_entries() - before_shm if n.startswith(f"corral_{os.getpid()}_")}


@pytest.mark.parametrize("args", BACKENDS, ids=IDS)
def test_multiprocessing_gives_the_local_samplers_episodes(policy: Any, args: dict[str, Any]) -> None:
    children, shm = baseline()
    f = factory(args)
    with LocalSampler.from_worker_factory(copy.deepcopy(f), policy, CARTPOLE) as local, \
            MultiprocessingSampler.from_worker_factory(f, policy, CARTPOLE, timeout=TIMEOUT) as mp:
        same_calls(local, mp, policy)
    no_leftovers(children, shm)


def test_ray_gives_the_local_samplers_episodes(policy: Any) -> None:
    ray = pytest.importorskip("ray")
    from corral.plugins.samplers.ray import RaySampler

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        for case in BACKENDS:
            args = case if isinstance(case, dict) else case.values[0]
            if args["backend"] == "envpool" and not has_envpool():
                continue
            f = factory(args)
            with LocalSampler.from_worker_factory(copy.deepcopy(f), policy, CARTPOLE) as local, \
                    RaySampler.from_worker_factory(f, policy, CARTPOLE) as remote:
                same_calls(local, remote, policy)
    finally:
        ray.shutdown()


@pytest.mark.parametrize("sampler_name", ["action_server", "alternating"])
@pytest.mark.parametrize("args", [{"backend": "native", "n_envs": 4}, {"backend": "sync", "n_envs": 2},
                                  {"backend": "native", "n_envs": 3, "timesteps_per_call": 16},
                                  {"backend": "native", "n_envs": 3, "carry_episodes": True}],
                         ids=["native", "sync", "native-fragments", "native-carried"])
def test_action_server_samplers_run_it_through_the_proxy(policy: Any, sampler_name: str, args: dict[str, Any]) -> None:
    """The worker's agent is a proxy to one batched policy in the sampler's process: the same episodes as
    the local sampler."""
    from corral.framework.plugins import get_registry

    sampler_class = get_registry().get("sampler", sampler_name).factory
    children, shm = baseline()
    f = factory(args)
    with LocalSampler.from_worker_factory(copy.deepcopy(f), policy, CARTPOLE) as local, \
            sampler_class.from_worker_factory(f, policy, CARTPOLE, device="cpu", timeout=TIMEOUT) as served:
        same_calls(local, served, policy)
    no_leftovers(children, shm)


def test_train_py_with_worker_vector(tmp_path: Path) -> None:
    """``python train.py worker=vector`` trains PPO for two epochs, and resumes from its snapshot."""
    run = tmp_path / "run"
    cmd = [sys.executable, str(REPO / "train.py"), "worker=vector", "worker.n_envs=8", "trainer.n_epochs=2",
           "trainer.batch_size=400", "trainer.eval_every=0", "logger=[csv]", f"hydra.run.dir={run}"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = (run / "progress.csv").read_text().splitlines()
    assert len(rows) == 3, rows
    assert float(rows[-1].split(",")[rows[0].split(",").index("env_steps")]) >= 800


def test_ppo_cartpole_vector_preset_composes() -> None:
    from corral.testing import compose_config

    cfg = compose_config(["experiment=ppo_cartpole_vector"])
    assert cfg.worker.name == "vector" and cfg.worker.backend == "native" and cfg.worker.n_envs >= 8
    assert cfg.algo.name == "ppo"
    assert np.isclose(cfg.trainer.batch_size % cfg.worker.n_envs, 0)


@pytest.mark.skipif(not has_envpool(), reason="needs EnvPool")
def test_ppo_halfcheetah_envpool_preset_trains_one_epoch(tmp_path: Path) -> None:
    """The preset's EnvPool HalfCheetah: one update of two whole 1,000-step episodes, then an evaluation
    through the same worker."""
    run = tmp_path / "run"
    cmd = [sys.executable, str(REPO / "train.py"), "experiment=ppo_halfcheetah_envpool", "trainer.n_epochs=1",
           "trainer.eval_every=1", "trainer.eval_episodes=2", "logger=[csv]", f"hydra.run.dir={run}"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    header, row = (run / "progress.csv").read_text().splitlines()[:2]
    values = dict(zip(header.split(","), row.split(",")))
    assert float(values["env_steps"]) == 2000 and values["eval/return_mean"] != ""


def _train(run: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(REPO / "train.py"), *overrides, f"hydra.run.dir={run}"]
    proc = subprocess.run(cmd, cwd=run.parent, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


RESUMABLE = ["worker=vector", "worker.n_envs=8", "trainer.batch_size=600", "trainer.eval_every=0", "logger=[csv]",
             "trainer.snapshot_every=1", "trainer.progress=false"]


def test_a_resumed_native_run_continues_the_same_curve(tmp_path: Path) -> None:
    """The native backend's RNG state is in the snapshot: 2 epochs + a resume to 3 = 3 epochs straight."""
    _train(tmp_path / "full", *RESUMABLE, "trainer.n_epochs=3")
    _train(tmp_path / "part", *RESUMABLE, "trainer.n_epochs=2")
    subprocess.run([sys.executable, str(REPO / "train.py"), f"trainer.resume={tmp_path / 'part'}", "trainer.n_epochs=3"],
                   cwd=tmp_path, capture_output=True, text=True, timeout=240, check=True)
    def rows(run: str) -> list[dict[str, str]]:
        with open(tmp_path / run / "progress.csv") as f:
            return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]

    assert len(rows("full")) == 3 and rows("part") == rows("full")


@pytest.mark.skipif(not has_envpool(), reason="needs EnvPool")
def test_a_resumed_envpool_run_says_once_that_it_starts_fresh_episodes(tmp_path: Path) -> None:
    args = [*RESUMABLE, "worker.backend=envpool", "worker.num_threads=1"]
    _train(tmp_path / "part", *args, "trainer.n_epochs=2")
    proc = subprocess.run([sys.executable, str(REPO / "train.py"), f"trainer.resume={tmp_path / 'part'}",
                           "trainer.n_epochs=3"], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "starts fresh episodes" in line]
    assert len(said) == 1 and "worker.backend=envpool cannot save its environments' state" in said[0]


def _has_ray() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("sampler", [
    ["sampler=multiprocessing", "sampler.start_method=spawn"],
    ["sampler=multiprocessing", "sampler.start_method=fork"],
    pytest.param(["sampler=ray"], marks=pytest.mark.skipif(not _has_ray(), reason="needs the ray extra")),
], ids=["spawn", "fork", "ray"])
def test_a_warning_from_a_worker_process_is_one_corral_line(tmp_path: Path, sampler: list[str]) -> None:
    """The oversize warning is logged inside the worker's own process: a spawned one and a Ray actor
    have no logging of their own (Python printed the bare message), a forked one inherits the job's.
    Each prints it once, as ``corral: warning: ...`` (after Ray's ``(_RayWorker pid=N)``), and the run's
    ``corral.log`` has it once too (the worker process appends it there)."""
    proc = _train(tmp_path / "run", "worker=vector", "worker.n_envs=64", "trainer.batch_size=64", "trainer.n_epochs=2",
                  "trainer.eval_every=0", "trainer.progress=false", "logger=[csv]", *sampler, "sampler.n_workers=1")
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if "were asked for" in line]
    assert len(said) == 1, proc.stderr[-3000:]
    line = re.sub(r"^(\x1b\[\d+m)?\(\w+ pid=\d+\)(\x1b\[0m)? ", "", said[0])  # Ray's prefix of an actor's line
    assert line.startswith("corral: warning: worker=vector returned "), proc.stderr[-3000:]
    assert "UserWarning" not in proc.stderr, proc.stderr[-3000:]  # e.g. torch's, on a read-only batch from Ray
    logged = [line for line in (tmp_path / "run" / "corral.log").read_text().splitlines() if "were asked for" in line]
    assert len(logged) == 1, logged
    assert re.match(r"^\[[\d\- :,]+\]\[corral\.plugins\.workers\.vector\]\[WARNING\] - (\[worker 0\] )?corral: worker=vector "
                    r"returned ", logged[0]), logged


@pytest.mark.parametrize("fault", ["ctrl_c", "kill_env_process"])
def test_an_async_vector_env_under_ctrl_c_or_a_killed_environment_process(tmp_path: Path, fault: str) -> None:
    """``worker.backend=async`` under sampler=local. Ctrl-C reached the environment processes too, which
    died under the worker: the run ended "failed", exit 1, with BrokenPipeError tracebacks from closing
    them. Now they ignore SIGINT (the worker stops them): the run is interrupted as any other, 130. An
    environment process killed outright is one line naming its slot, pid and signal, exit 2, with the
    epochs before it kept and no process left."""
    import signal
    import time

    from corral.testing.processes import session_processes, started_session

    run = tmp_path / "run"
    cmd = [sys.executable, str(REPO / "train.py"), "worker=vector", "worker.backend=async", "worker.n_envs=2",
           "trainer.n_epochs=200", "trainer.batch_size=400", "trainer.eval_every=0", "trainer.progress=false",
           f"hydra.run.dir={run}"]
    with started_session(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        deadline = time.monotonic() + 120
        csv_path = run / "progress.csv"
        while (not csv_path.exists() or len(csv_path.read_text().splitlines()) < 3) and proc.poll() is None:
            assert time.monotonic() < deadline, "no second epoch within 120 s"
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        session = session_processes(proc.pid)
        envs = sorted(child_processes(proc.pid))
        assert len(envs) == 2, envs
        if fault == "ctrl_c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(envs[0], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=120)
        last = stderr.strip().splitlines()[-1]
        if fault == "ctrl_c":
            assert proc.returncode == 130, stderr[-3000:]
            assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr[-3000:]
            assert last.startswith("corral: interrupted after "), stderr[-3000:]
        else:
            assert proc.returncode == 2, stderr[-3000:]
            assert re.fullmatch(
                rf"corral: error: worker 0 raised EnvironmentProcessLost: the environment process of slot 0 "
                rf"\(pid {envs[0]}\) was killed by signal 9 \(SIGKILL\); worker.backend=async cannot go on without "
                r"it while (sampling \(obtain_samples\)|saving its sampling state \(state_dict\)); the traceback "
                r"above shows where it raised", last), stderr[-3000:]
        assert "Error executing job" not in stderr and "Exception ignored" not in stderr, stderr[-3000:]
        assert wait_gone(session, timeout=30) == set()
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) >= 2


def test_an_async_vector_env_whose_step_hangs_is_one_line_within_its_step_timeout(tmp_path: Path) -> None:
    """``worker.backend=async`` under sampler=local, an environment whose step never returns (a stuck
    simulator): the run waited for ever (no sampler timeout bounds sampler=local). Now the slot that
    does not answer within ``worker.step_timeout`` is named with its pid, and nothing is left running."""
    import time

    from corral.testing.processes import session_processes, started_session

    run = tmp_path / "run"
    cmd = [sys.executable, str(REPO / "train.py"), "worker=vector", "worker.backend=async", "worker.n_envs=2",
           "worker.step_timeout=2", "env=gym", "env.id=corral.testing.faulty_envs:corral/HangingCartPole-v1",
           "+env.kwargs.fail_at=30", "+env.kwargs.hang_s=600", "trainer.n_epochs=5", "trainer.batch_size=200",
           "trainer.eval_every=0", "trainer.progress=false", "logger=[csv]", f"hydra.run.dir={run}"]
    with started_session(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        seen: set[int] = set()
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            seen |= session_processes(proc.pid)
            time.sleep(0.1)
        assert proc.poll() is not None, "the run did not end within 120 s of a 2 s step timeout"
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 2, stderr[-3000:]
        last = stderr.strip().splitlines()[-1]
        assert re.search(r"worker\.backend=async: environment slot [01] \(pid \d+\)( and slot [01] \(pid \d+\))? did not "
                         r"answer a step within worker\.step_timeout=2 s \(its step hangs\); fix the environment, or "
                         r"raise worker\.step_timeout for one that is this slow", last), stderr[-3000:]
        assert "Error executing job" not in stderr, stderr[-3000:]
        assert wait_gone(seen, timeout=30) == set()
