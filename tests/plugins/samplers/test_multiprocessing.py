"""sampler=multiprocessing: same episodes as local, stale-version protection, faults, clean shutdown.

Real worker processes (spawn), real gymnasium CartPole and corral's MLPPolicy. Every wait is
bounded; an autouse fixture checks that each test leaves no child process and no shared-memory
segment behind.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from corral import (
    ConfigError,
    DefaultWorker,
    EnvFactory,
    EnvSpec,
    LocalSampler,
    MLPPolicy,
    MultiprocessingSampler,
    VecWorker,
    WorkerError,
    WorkerFactory,
)
from corral.parallel.shared_memory import segment_prefix
from corral.testing.processes import child_processes, interruptible, started_session, wait_for_path, wait_gone

ROOT = Path(__file__).resolve().parents[3]
SHM = Path("/dev/shm")
CARTPOLE = EnvFactory("CartPole-v1")


# ---------------------------------------------------------------------- environments (module level: picklable)
class KillSelfCartPole(CartPoleEnv):
    """CartPole that SIGKILLs its own process at step ``at_step``, once (``marker`` records it)."""

    def __init__(self, marker: str, at_step: int = 40, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.marker, self.at_step, self.n = marker, at_step, 0

    def step(self, action: Any) -> Any:
        self.n += 1
        if self.n == self.at_step and not os.path.exists(self.marker):
            Path(self.marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)


class RaiseInStepCartPole(CartPoleEnv):
    """CartPole whose ``step`` raises at step ``at_step``."""

    def __init__(self, at_step: int = 5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.at_step, self.n = at_step, 0

    def step(self, action: Any) -> Any:
        self.n += 1
        if self.n == self.at_step:
            raise RuntimeError(f"env exploded at step {self.n}")
        return super().step(action)


class SlowCartPole(CartPoleEnv):
    """CartPole that sleeps ``delay`` seconds per step, and ``stall`` seconds at step ``stall_at``."""

    def __init__(self, delay: float = 0.0, stall_at: int = 0, stall: float = 60.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.delay, self.stall_at, self.stall, self.n = delay, stall_at, stall, 0

    def step(self, action: Any) -> Any:
        self.n += 1
        time.sleep(self.stall if self.n == self.stall_at else self.delay)
        return super().step(action)


def make_cartpole(cls: type, **kwargs: Any) -> EnvFactory:
    """A CartPole-v1-like factory (500-step limit comes from max_episode_length)."""
    return EnvFactory(cls, kwargs)


# ---------------------------------------------------------------------- helpers
def our_segments(pid: int | None = None) -> set[str]:
    """Shared-memory segments created by process ``pid`` (default: this one)."""
    return {p.name for p in SHM.glob(segment_prefix(pid) + "*")} if SHM.is_dir() else set()


@pytest.fixture(autouse=True)
def leaves_nothing_behind() -> Any:
    """Every test must end with no worker process and no segment of ours."""
    yield
    assert multiprocessing.active_children() == []
    assert our_segments() == set()


@pytest.fixture(scope="module")
def policy() -> MLPPolicy:
    return MLPPolicy(EnvSpec.from_env(CARTPOLE()))


def options(seed: int = 1, worker: type = DefaultWorker, **kwargs: Any) -> dict[str, Any]:
    worker_args = dict(n_envs=3) if worker is VecWorker else {}
    return dict(max_episode_length=500, n_workers=2, seed=seed, worker_class=worker, worker_args=worker_args, **kwargs)


def biased_params(policy: MLPPolicy, action: int) -> dict[str, np.ndarray]:
    """Parameters under which the policy picks ``action`` with probability ~1."""
    params = {k: v.copy() for k, v in policy.get_param_values().items()}
    params["net.4.weight"][:] = 0
    params["net.4.bias"][:] = -30.0
    params["net.4.bias"][action] = 30.0
    return params


def assert_same(a: Any, b: Any) -> None:
    assert a.equals(b), a.differences(b)


# ---------------------------------------------------------------------- same seed, same episodes
@pytest.mark.parametrize("worker", [DefaultWorker, VecWorker], ids=["default", "vec"])
@pytest.mark.parametrize("seed", [1, 2])
def test_same_episodes_as_local_and_exact_state_round_trip(policy: MLPPolicy, seed: int, worker: type) -> None:
    params = policy.get_param_values()
    with MultiprocessingSampler(policy, CARTPOLE, **options(seed, worker)) as mp, \
            LocalSampler(policy, CARTPOLE, **options(seed, worker)) as local:
        check_same_as_local(mp, local, params)


def check_same_as_local(mp: Any, local: LocalSampler, params: Any) -> None:
    """Two obtain_samples calls and one obtain_exact_episodes equal ``local``'s; state_dict resumes exactly."""
    for itr, n in enumerate((700, 333)):
        got = mp.obtain_samples(itr, n, params)
        assert len(got) >= n
        assert_same(got, local.obtain_samples(itr, n, params))
    assert_same(mp.obtain_exact_episodes(3, params), local.obtain_exact_episodes(3, params))
    assert mp.total_env_steps == local.total_env_steps

    # state_dict / load_state_dict: a resume continues exactly, and the format is the local one.
    state = mp.state_dict()
    pickle.loads(pickle.dumps(state))
    expected = mp.obtain_samples(9, 400, params)
    mp.load_state_dict(state)
    assert_same(mp.obtain_samples(9, 400, params), expected)
    local.load_state_dict(state)
    assert_same(local.obtain_samples(9, 400, params), expected)


def test_per_worker_agents_and_envs_and_the_factory_pickles(policy: MLPPolicy) -> None:
    factory = WorkerFactory(seed=5, max_episode_length=500, n_workers=2, worker_class=VecWorker,
                            worker_args=dict(n_envs=2))
    assert isinstance(pickle.loads(pickle.dumps(factory))(1), VecWorker)
    agents = [biased_params(policy, 0), biased_params(policy, 1)]
    pin = hasattr(os, "sched_setaffinity")
    with MultiprocessingSampler.from_worker_factory(factory, [policy, policy], [CARTPOLE, CARTPOLE],
                                                    start_method="spawn", cpu_affinity=pin) as mp:
        for pid in mp.worker_pids:  # workers ignore SIGINT: Ctrl-C is the parent's to handle
            assert pid is not None
            os.kill(pid, signal.SIGINT)
        batch = mp.obtain_exact_episodes(2, agents)
        if pin:
            cores = sorted(os.sched_getaffinity(0))
            assert [os.sched_getaffinity(pid) for pid in mp.worker_pids] == [
                {cores[0]}, {cores[1 % len(cores)]}]
    first = batch.split()[:2]  # worker 0's episodes come first
    assert all((ep.actions == 0).all() for ep in first)
    assert (batch.split()[-1].actions == 1).all()
    with pytest.raises(ConfigError, match="exactly one item per worker"):
        MultiprocessingSampler.from_worker_factory(factory, [policy], CARTPOLE)


# ---------------------------------------------------------------------- stale-version protection
def test_answers_to_an_abandoned_call_never_enter_a_later_batch(policy: MLPPolicy) -> None:
    slow = make_cartpole(SlowCartPole, delay=0.001)  # the abandoned call lasts >= 1 s on any machine
    check_abandoned_call(MultiprocessingSampler(policy, slow, **options(3)), policy)


def check_abandoned_call(sampler: Any, policy: MLPPolicy) -> None:
    """Ctrl-C interrupts a call on a slow environment; the next call's batch holds only its own agent's episodes."""
    with sampler as mp:
        main = threading.main_thread().ident
        assert main is not None
        timer = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
        # interruptible(): SIGINT raises here even when the suite runs with SIGINT ignored.
        with interruptible():
            timer.start()
            try:
                with pytest.raises(KeyboardInterrupt):  # Ctrl-C in a notebook, say
                    mp.obtain_samples(0, 2000, biased_params(policy, 1))
            finally:
                timer.cancel()
        batch = mp.obtain_samples(1, 100, biased_params(policy, 0))
        assert len(batch) >= 100
        assert (batch.actions == 0).all(), "episodes of the abandoned (older) agent were mixed in"
        assert mp.n_stale == 2 and mp.agent_version == 3


class SlowRaisingCartPole(SlowCartPole):
    """SlowCartPole whose ``step`` raises once, at step ``raise_at``."""

    def __init__(self, raise_at: int = 300, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.raise_at, self.count = raise_at, 0

    def step(self, action: Any) -> Any:
        self.count += 1
        if self.count == self.raise_at:
            raise RuntimeError(f"env exploded at step {self.count}")
        return super().step(action)


def test_the_error_of_an_abandoned_call_does_not_fail_the_next_one(policy: MLPPolicy) -> None:
    """Ctrl-C abandons a call whose environment raises later; that error answers the old request
    (matched by sequence number), so the next call succeeds."""
    slow = make_cartpole(SlowRaisingCartPole, delay=0.004, raise_at=250)  # raises ~1 s into the call
    with MultiprocessingSampler(policy, slow, **options(3)) as mp:
        main = threading.main_thread().ident
        assert main is not None
        timer = threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT))
        with interruptible():
            timer.start()
            try:
                with pytest.raises(KeyboardInterrupt):
                    mp.obtain_samples(0, 4000, biased_params(policy, 1))
            finally:
                timer.cancel()
        batch = mp.obtain_samples(1, 100, biased_params(policy, 0))
        assert len(batch) >= 100 and (batch.actions == 0).all()
        assert mp.n_stale == 2, "both workers' errors for the abandoned request were dropped as stale"


# ---------------------------------------------------------------------- faults
def test_sigkill_during_obtain_samples_raises_naming_the_worker(policy: MLPPolicy, tmp_path: Path) -> None:
    envs = [CARTPOLE, make_cartpole(KillSelfCartPole, marker=str(tmp_path / "killed"))]
    check_sigkill_raises(MultiprocessingSampler(policy, envs, **options()), policy)


def check_sigkill_raises(mp: Any, policy: MLPPolicy) -> None:
    """Worker 1 SIGKILLs itself mid-sample: a WorkerError naming it, within 10 s; the sampler is closed."""
    pids = mp.worker_pids
    t0 = time.monotonic()
    with pytest.raises(WorkerError) as info:
        mp.obtain_samples(0, 4000, policy.get_param_values())
    assert time.monotonic() - t0 < 10
    err = info.value
    assert err.worker_number == 1 and err.exitcode == -signal.SIGKILL
    assert f"worker 1 (pid {pids[1]})" in str(err) and "SIGKILL" in str(err)
    with pytest.raises(RuntimeError, match="shut down"):  # a failed sampler is closed
        mp.obtain_samples(1, 10, None)
    mp.shutdown_worker()  # twice is fine


def test_sigkill_with_restart_completes_the_call(policy: MLPPolicy, tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    envs = [CARTPOLE, make_cartpole(KillSelfCartPole, marker=str(tmp_path / "killed"))]
    check_sigkill_restart(MultiprocessingSampler(policy, envs, **options(on_worker_failure="restart")), policy,
                          caplog)


def check_sigkill_restart(sampler: Any, policy: MLPPolicy, caplog: pytest.LogCaptureFixture) -> None:
    """Worker 1 SIGKILLs itself mid-sample: it is restarted, the call completes with the current agent."""
    with sampler as mp:
        old = mp.worker_pids
        with caplog.at_level("WARNING"):
            batch = mp.obtain_samples(0, 1000, biased_params(policy, 0))
        assert len(batch) >= 1000 and (batch.actions == 0).all()
        assert mp.n_restarts == 1
        assert "worker 1" in caplog.text and "SIGKILL" in caplog.text and "restarting" in caplog.text
        new = mp.worker_pids
        assert new[0] == old[0] and new[1] != old[1]
        # The restarted worker has the current agent and keeps working.
        assert (mp.obtain_exact_episodes(1, None).actions == 0).all()


def test_env_raising_in_step_carries_its_traceback(policy: MLPPolicy) -> None:
    envs = [CARTPOLE, make_cartpole(RaiseInStepCartPole, at_step=5)]
    with MultiprocessingSampler(policy, envs, **options()) as mp:
        with pytest.raises(WorkerError) as info:
            mp.obtain_samples(0, 1000, policy.get_param_values())
    err = info.value
    assert err.worker_number == 1 and "worker 1" in str(err) and "RuntimeError: env exploded at step 5" in str(err)
    assert err.remote_traceback is not None
    assert "in step" in err.remote_traceback and "test_multiprocessing.py" in err.remote_traceback


def test_a_stuck_worker_times_out(policy: MLPPolicy) -> None:
    envs = [CARTPOLE, make_cartpole(SlowCartPole, stall_at=3)]
    mp = MultiprocessingSampler(policy, envs, **options(timeout=1.0))
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match="worker 1 .* made no progress for 1 s") as info:
        mp.obtain_samples(0, 100, None)
    assert time.monotonic() - t0 < 10
    assert info.value.worker_number == 1 and info.value.exitcode is not None


def test_restarts_are_bounded(policy: MLPPolicy) -> None:
    envs = [CARTPOLE, make_cartpole(RaiseInStepCartPole, at_step=3)]
    mp = MultiprocessingSampler(policy, envs, **options(on_worker_failure="restart", max_restarts=1))
    with pytest.raises(WorkerError, match="already restarted 1 times") as info:
        mp.obtain_samples(0, 1000, policy.get_param_values())
    assert info.value.worker_number == 1 and mp.n_restarts == 1
    assert "env exploded" in (info.value.remote_traceback or "")


def test_all_workers_dead_is_an_error(policy: MLPPolicy) -> None:
    check_all_workers_dead(MultiprocessingSampler(policy, CARTPOLE, **options()))


def check_all_workers_dead(mp: Any) -> None:
    """Every worker of a 2-worker process sampler SIGKILLed between calls: the next call says so."""
    for pid in mp.worker_pids:
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(mp.worker_pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(WorkerError, match="all 2 workers are dead"):
        mp.obtain_samples(0, 100, None)


def test_invalid_options_and_unpicklable_factories_fail_clearly(policy: MLPPolicy) -> None:
    with pytest.raises(ConfigError, match="start_method"):
        MultiprocessingSampler(policy, CARTPOLE, start_method="threads", **options())
    with pytest.raises(ConfigError, match="on_worker_failure"):
        MultiprocessingSampler(policy, CARTPOLE, on_worker_failure="ignore", **options())
    opts = options()
    opts["worker_args"] = {"unused": lambda: None}
    with pytest.raises(ConfigError, match="picklable"):
        MultiprocessingSampler(policy, CARTPOLE, **opts)


# ---------------------------------------------------------------------- train.py end to end
def train_command(sampler: str) -> list[str]:
    """A short PPO run of train.py with ``sampler`` (2 workers x vec(4))."""
    return [sys.executable, str(ROOT / "train.py"), f"sampler={sampler}", "sampler.n_workers=2", "worker=vec",
            "worker.n_envs=4", "trainer.batch_size=1000", "trainer.eval_every=0", "logger=[csv]",
            "trainer.progress=false"]


def test_train_py_runs_end_to_end(tmp_path: Path) -> None:
    check_train_py_runs("multiprocessing", tmp_path)


def check_train_py_runs(sampler: str, tmp_path: Path) -> None:
    """Two epochs of train.py with ``sampler`` end cleanly."""
    run = tmp_path / "run"
    proc = subprocess.run([*train_command(sampler), "trainer.n_epochs=2", f"hydra.run.dir={run}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert len((run / "progress.csv").read_text().splitlines()) == 3  # header + 2 epochs
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_ctrl_c_exits_130_and_leaves_no_worker_or_segment(tmp_path: Path) -> None:
    check_ctrl_c("multiprocessing", tmp_path)


def check_ctrl_c(sampler: str, tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the process group) during a long train.py run with ``sampler``: exit 130,
    no worker process, shared-memory segment or semaphore left."""
    run = tmp_path / "run"
    semaphores = {p.name for p in SHM.glob("sem.mp-*")}
    # A session of its own, so that the SIGINT below reaches the whole process group, workers
    # included, as Ctrl-C in a terminal does; SIGINT at its default disposition however the suite
    # was launched; whatever happens, nothing it started outlives the test.
    with started_session([*train_command(sampler), "trainer.n_epochs=100000", "trainer.max_env_steps=null",
                          f"hydra.run.dir={run}"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True) as proc:
        wait_for_path(proc, run / "snapshots" / "latest", timeout=120)
        children = child_processes(proc.pid)
        workers = [p for p, command in children.items() if "spawn_main" in command]
        assert len(workers) == 2, children
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired as exc:  # what it printed, to tell where it stopped
            pytest.fail(f"train.py did not exit within 60 s of Ctrl-C; its stderr so far:\n{exc.stderr!r}")
    assert proc.returncode == 130, err
    assert "corral: interrupted" in err
    assert "Traceback" not in err and "leaked" not in err
    assert not wait_gone(children, timeout=10), "worker processes outlived train.py"
    assert our_segments(proc.pid) == set()
    assert {p.name for p in SHM.glob("sem.mp-*")} - semaphores == set(), "semaphores outlived train.py"


def test_a_script_without_a_main_guard_gets_told_what_to_do(tmp_path: Path) -> None:
    """spawn re-imports the main module in each worker; a script that builds the sampler at import
    time ends with a message that says to guard it, not with a hang or only a library traceback."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        "from corral import EnvFactory, EnvSpec, MLPPolicy, MultiprocessingSampler\n"
        "env = EnvFactory('CartPole-v1')\n"
        "policy = MLPPolicy(EnvSpec.from_env(env()))\n"
        "MultiprocessingSampler(agents=policy, envs=env, max_episode_length=50, n_workers=1, timeout=60)\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode != 0
    assert "if __name__ == '__main__':" in proc.stderr.splitlines()[-1], proc.stderr[-2000:]


@pytest.mark.parametrize("sampler", ["multiprocessing", "ray"])
def test_more_workers_than_the_memory_holds_is_one_line_before_any_process(tmp_path: Path, sampler: str) -> None:
    """``sampler.n_workers=3000`` on this machine: the kernel's OOM killer ended the run (exit 137),
    trainer included, with no line and no summary.json. A local Ray runtime's actors are processes
    on this machine too."""
    from corral.framework.memory import available_memory_mib
    from corral.parallel.worker_process import WORKER_PROCESS_MIB

    if sampler == "ray":
        pytest.importorskip("ray")

    available = available_memory_mib()
    if available is None:
        pytest.skip("/proc/meminfo does not say how much memory is available")
    n_workers = int(available // WORKER_PROCESS_MIB) + 1000
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), f"sampler={sampler}",
                           f"sampler.n_workers={n_workers}", "trainer.n_epochs=1", "trainer.progress=false",
                           f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"corral: error: sampler.n_workers={n_workers}: {n_workers} worker processes need at "
                           "least "), line
    assert f"give fewer (sampler.n_workers={os.cpu_count()} uses its {os.cpu_count()} CPUs)" in line, line
