"""``worker=vector worker.backend=async`` under a sampler whose workers run in daemon processes
(``sampler=multiprocessing``, ``action_server``, ``alternating``: they declare
``Sampler.workers_in_daemon_processes``) is refused by the config check, before anything starts: a
single run and a sweep each end with one line naming the combination and saying what to do. Before,
each worker refused when it started: a single run failed after its run directory and its workers
had started, and ``-m ... seed=1,2,3`` started all three jobs and printed the refusal once per job
(and once more in the sweep's closing line). A worker built in a daemon process outside a run
(library use) still gets the late refusal from ``build_vector_env``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import DictConfig

from corral.framework.errors import ConfigError, WorkerError

ROOT = Path(__file__).resolve().parents[2]
ASYNC = ["worker=vector", "worker.backend=async", "worker.n_envs=2", "trainer.n_epochs=1", "logger=[csv]"]


def refusal(sampler: str) -> str:
    """The one line a run of ``worker.backend=async`` under ``sampler=<sampler>`` ends with."""
    return (f"corral: error: sampler={sampler} runs each worker in a daemon process, which cannot start processes "
            "of its own, but worker=vector with worker.backend=async starts one per environment; use "
            "worker.backend=sync (the same environments, stepped in the worker's process), or sampler=local or "
            "sampler=ray to keep worker.backend=async")


def session_processes(sid: int) -> list[int]:
    """Pids of the processes still in session ``sid`` (a ``train.py`` started with ``start_new_session``
    and whatever it started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == sid:  # after ")": state, ppid, pgrp, session
            pids.append(int(entry.name))
    return pids


def train(tmp_path: Path, *args: str) -> tuple[int, list[str], list[int]]:
    """``python train.py <args>`` in ``tmp_path``, in a session of its own: its exit status, its
    non-blank output lines (stdout and stderr), and the processes it started that were still running
    10 s after it ended (killed then: a multiprocessing resource tracker takes a moment to go)."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    deadline = time.monotonic() + 10
    while (left := session_processes(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return proc.returncode, [line for line in (out + err).splitlines() if line.strip()], left


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
@pytest.mark.parametrize("sampler", ["multiprocessing", "action_server", "alternating"])
def test_a_single_run_is_refused_before_it_starts(tmp_path: Path, sampler: str) -> None:
    """Before: the run directory was created (summary.json: failed) and the workers started, then
    ``corral: error: multiprocessing sampler: worker 0 could not apply the environment update: ...``."""
    run = tmp_path / "run"
    code, lines, left = train(tmp_path, f"sampler={sampler}", *ASYNC, f"hydra.run.dir={run}")
    assert code == 2, lines
    assert lines == [refusal(sampler)], lines
    assert not run.exists(), sorted(p.name for p in run.iterdir())
    assert left == [], f"train.py left processes running: {left}"


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_sweep_of_three_seeds_is_refused_in_one_line_before_any_job(tmp_path: Path) -> None:
    """Before: Hydra launched the three jobs, each printed the refusal, and the sweep's closing line
    repeated it (exit status 1), leaving three job directories."""
    sweep = tmp_path / "sweep"
    code, lines, left = train(tmp_path, "-m", "sampler=multiprocessing", *ASYNC, "seed=1,2,3", f"hydra.sweep.dir={sweep}")
    assert code == 2, lines
    assert lines == [f"{refusal('multiprocessing')} (the sweep's job seed=1; no job has started)"], lines
    assert not sweep.exists() or not [p for p in sweep.iterdir() if p.is_dir()], sorted(sweep.iterdir())
    assert left == [], f"train.py left processes running: {left}"


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_sweep_over_samplers_names_the_job_that_cannot_run(tmp_path: Path) -> None:
    """``-m sampler=local,alternating``: the local job could run, the alternating one could not; no job starts."""
    sweep = tmp_path / "sweep"
    code, lines, left = train(tmp_path, "-m", "sampler=local,alternating", *ASYNC, f"hydra.sweep.dir={sweep}")
    assert code == 2, lines
    assert lines == [f"{refusal('alternating')} (the sweep's job sampler=alternating; no job has started)"], lines
    assert not sweep.exists() or not [p for p in sweep.iterdir() if p.is_dir()], sorted(sweep.iterdir())
    assert left == [], f"train.py left processes running: {left}"


def _config(sampler: str, backend: str) -> DictConfig:
    """What ``python train.py sampler=<sampler> worker=vector worker.backend=<backend>`` composes."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from corral.framework.config import CONFIG_MODULE, CONFIG_NAME
    from corral.framework.entry import prepare

    args = prepare([f"sampler={sampler}", "worker=vector", f"worker.backend={backend}", "worker.n_envs=2"])
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            return compose(config_name=CONFIG_NAME, overrides=args)
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize("sampler", ["local", "ray"])
def test_samplers_whose_workers_may_start_processes_pass_the_check(sampler: str) -> None:
    """Workers of ``sampler=local`` run in the main process, Ray's actors are not daemon processes:
    ``worker.backend=async`` runs under both (``train.py sampler=ray worker=vector worker.backend=async`` completes)."""
    from corral.framework.compose import validate

    validate(_config(sampler, "async"))


@pytest.mark.parametrize("sampler", ["multiprocessing", "action_server", "alternating"])
def test_the_sync_backend_passes_the_check_under_a_process_sampler(sampler: str) -> None:
    from corral.framework.compose import validate

    validate(_config(sampler, "sync"))
    with pytest.raises(ConfigError) as refused:
        validate(_config(sampler, "async"))
    assert f"corral: error: {refused.value}" == refusal(sampler)


def test_a_worker_built_in_a_daemon_process_outside_a_run_is_still_refused() -> None:
    """Library use, without the config check: the worker refuses in its own process, in one line."""
    from corral.framework.env import EnvFactory
    from corral.plugins.samplers.multiprocessing import MultiprocessingSampler
    from corral.plugins.workers.vector import VectorWorker
    from corral.testing.contracts.helpers import env_spec_of, make_test_policy

    env = EnvFactory("CartPole-v1")
    policy = make_test_policy(env_spec_of(env))
    with pytest.raises(WorkerError) as refused:  # when its workers are given the environment: at construction
        with MultiprocessingSampler(policy, env, n_workers=1, seed=1, max_episode_length=50, timeout=60,
                                    worker_class=VectorWorker, worker_args=dict(n_envs=2, backend="async")) as sampler:
            sampler.obtain_samples(0, 100, policy)
    assert "the sampler runs each worker in a daemon process, which cannot start processes of its own" in str(
        refused.value), refused.value
