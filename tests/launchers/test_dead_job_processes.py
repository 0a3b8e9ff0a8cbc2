"""What a sweep job whose process died leaves behind, end to end with ``train.py`` as a user runs it:
nothing running and no ``/dev/shm`` segment once the sweep has ended, and the job's one line.

Before (each seen with these tests on the code before the change):

- ``hydra/launcher=joblib`` (and ``submitit_local``): a process the job started that does not watch its
  parent (here a simulator's server that the environment starts, as simulators do) outlived the
  job's SIGKILL, handed to init, and ran on after the sweep had ended;
- ``hydra/launcher=joblib`` with ``sampler=multiprocessing``: every job failed at once, its worker
  processes dying at start with ``ValueError: cannot find context for 'loky'`` (the job's process
  is a loky worker, whose default start method the spawned workers read back);
- ``worker=vector worker.backend=async``: each environment process of the killed job printed two
  tracebacks (``ConnectionResetError`` then ``BrokenPipeError``) into the sweep's output.

The job's process is killed as the out-of-memory killer kills: SIGKILL, from the job's own
environment (no timing): :data:`LEFTOVER_ENV`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.launchers.job_processes import MARK_VAR, end_leftovers, new_mark
from corral.testing.processes import default_signal_dispositions, process_alive, shm_entries, wait_gone

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "conf"))
import dying_jobs  # noqa: E402  - the jobs that die by DYING_ENV, and the checks of their lines

#: Small runs: 3 epochs of ~500 steps, no evaluation, CSV only.
SMALL = ["trainer.n_epochs=3", "trainer.batch_size=500", "trainer.eval_every=0", "logger=[csv]",
         "trainer.progress=false"]
#: A module the jobs import (``env.id=leftover_env:...``), two CartPoles:
#:
#: - ``SimulatorCartPole`` starts a "simulator" process of its own (which, like a real simulator's
#:   server, does not watch its parent; its pid goes into the directory ``record``) and kills its own
#:   process with SIGKILL at step ``fail_at`` in the sweep's job number ``job``;
#: - ``ParentKillingCartPole`` runs in a process that a job's process started (a sampler's worker, an
#:   AsyncVectorEnv's environment process) and, when ``kill`` is true, kills that job's process with
#:   SIGKILL at step ``fail_at``; never from a process whose parent is not a job's (loky's worker), so
#:   never the sweep's.
LEFTOVER_ENV = '''
import os
import signal
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

SIMULATOR = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_DFL); time.sleep(600)"


def job_num():
    try:
        from hydra.core.hydra_config import HydraConfig

        return HydraConfig.get().job.get("num")
    except ValueError:  # not in a job
        return None


class SimulatorCartPole(CartPoleEnv):
    def __init__(self, job=0, fail_at=700, record=".", **kwargs):
        super().__init__(**kwargs)
        self.job, self.fail_at, self.steps = int(job), int(fail_at), 0
        self.simulator = subprocess.Popen([sys.executable, "-c", SIMULATOR])
        Path(record, f"{job_num()}-{self.simulator.pid}").touch()

    def step(self, action):
        self.steps += 1
        if self.steps == self.fail_at and job_num() == self.job:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)

    def close(self):
        if self.simulator.poll() is None:
            self.simulator.kill()
            self.simulator.wait()
        super().close()


def parent_is_a_job_process():
    try:
        return b"popen_loky_posix" in Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return False


class ParentKillingCartPole(CartPoleEnv):
    def __init__(self, kill=False, fail_at=300, **kwargs):
        super().__init__(**kwargs)
        self.parent, self.fail_at, self.steps = os.getppid(), int(fail_at), 0
        self.kill = bool(kill) and parent_is_a_job_process()

    def step(self, action):
        self.steps += 1
        if self.kill and self.steps == self.fail_at and os.getppid() == self.parent:
            os.kill(self.parent, signal.SIGKILL)
        return super().step(action)


for name, entry in (("SimulatorCartPole", SimulatorCartPole), ("ParentKillingCartPole", ParentKillingCartPole)):
    if f"leftover/{name}-v1" not in gym.registry:
        gym.register(id=f"leftover/{name}-v1", entry_point=entry, max_episode_steps=500)
'''

KILLED = (r"the job's process \(pid (\d+)\) was killed by SIGKILL while the job ran, as the out-of-memory killer "
          r"does when the machine runs out of memory \(`dmesg` says whether it did\): run fewer jobs at once "
          r"\(hydra.launcher.n_jobs\) or give them less to hold; .*")


def sweep(tmp_path: Path, *overrides: str) -> tuple[int, str, dict[int, int]]:
    """Run ``train.py -m <SMALL> <overrides>`` with the jobs' environments :data:`LEFTOVER_ENV`
    (:func:`dying_jobs.run_watched_sweep`: nothing of it may run a few seconds after it exited)."""
    return dying_jobs.run_watched_sweep(tmp_path, {"leftover_env": LEFTOVER_ENV}, *SMALL, *overrides)


def summary(tmp_path: Path, job: int) -> dict:
    """Job ``job``'s summary.json."""
    return json.loads((tmp_path / "multirun" / str(job) / "summary.json").read_text())


def test_joblib_a_killed_jobs_simulator_process_is_ended(tmp_path: Path) -> None:
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    record = tmp_path / "simulators"
    record.mkdir()
    code, err, _ = sweep(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=1,2", "env=gym",
                         "env.id=leftover_env:leftover/SimulatorCartPole-v1", "+env.kwargs.job=0",
                         f"+env.kwargs.record={record}")
    assert code == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    pid = dying_jobs.dead_job_pid(err, tmp_path / "multirun", KILLED)
    simulators = {int(name.split("-")[1]) for name in os.listdir(record) if name.startswith("0-")}
    assert simulators, os.listdir(record)  # job 0 started its simulator (and the sweep waited for them, above)
    assert summary(tmp_path, 0)["status"] == "failed" and summary(tmp_path, 0)["pid"] == pid
    assert summary(tmp_path, 1)["status"] == "completed"


@pytest.mark.parametrize("children", [
    ("sampler=multiprocessing", "sampler.n_workers=2"),
    ("worker=vector", "worker.backend=async", "worker.n_envs=2"),
], ids=["multiprocessing-workers", "async-environment-processes"])
def test_joblib_a_job_killed_under_its_child_processes_leaves_nothing(tmp_path: Path, children: tuple) -> None:
    """Job 0's process is killed by its own child (a sampler's worker, an environment process), as the
    out-of-memory killer would kill it; job 1 runs beside it to its end."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    before = shm_entries()
    code, err, seen = sweep(tmp_path, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "env=gym",
                            "env.id=leftover_env:leftover/ParentKillingCartPole-v1", "+env.kwargs.kill=true,false", "seed=1",
                            *children)
    assert code == 1, err[-3000:]
    assert "Traceback" not in err and "leaked" not in err, err[-3000:]
    lines = err.strip().splitlines()
    dead = [re.fullmatch(r"\[job 0\] corral: error: " + KILLED, line) for line in lines]
    said = [m for m in dead if m is not None]
    assert len(said) == 1, err[-3000:]
    pid = int(said[0].group(1))
    assert re.fullmatch(r"corral: job 0 \(.*kill=True.*\) failed: " + KILLED, lines[-1]), lines[-1]
    assert summary(tmp_path, 0)["status"] == "failed" and summary(tmp_path, 0)["pid"] == pid
    assert summary(tmp_path, 1)["status"] == "completed" and summary(tmp_path, 1)["epochs"] == 3
    # Its children ran (the test watched them), and they are gone, with every segment made in its processes.
    children_seen = {child for child, parent in seen.items() if parent == pid}
    assert len(children_seen) >= 2, seen
    made_there = [name for name in shm_entries() - before
                  if any(name.startswith(f"corral_{p}_") for p in children_seen | {pid})]
    assert not made_there, made_there


def test_submitit_local_a_killed_jobs_simulator_process_is_ended(tmp_path: Path) -> None:
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    record = tmp_path / "simulators"
    record.mkdir()
    code, err, _ = sweep(tmp_path, "hydra/launcher=submitit_local", "seed=1,2", "env=gym",
                         "env.id=leftover_env:leftover/SimulatorCartPole-v1", "+env.kwargs.job=0",
                         f"+env.kwargs.record={record}")
    assert code == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert len([line for line in err.splitlines() if line.startswith("[job 0] corral: error: the job's process")]) == 1
    assert any(name.startswith("0-") for name in os.listdir(record)), os.listdir(record)
    assert summary(tmp_path, 0)["status"] == "failed" and summary(tmp_path, 1)["status"] == "completed"


def test_end_leftovers_ends_the_processes_with_the_mark_and_removes_the_segments_of_the_dead(tmp_path: Path) -> None:
    """A "job" process with the mark starts a process, writes a segment, and is killed; what it started
    and its segment go, an unmarked process stays."""
    mark = new_mark()
    started = tmp_path / "started"
    job_code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; "
                f"time.sleep(600)']); open({str(started)!r}, 'w').write(str(p.pid)); time.sleep(600)")
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    job = subprocess.Popen([sys.executable, "-c", job_code], env={**os.environ, MARK_VAR: mark},
                           preexec_fn=default_signal_dispositions)
    other = subprocess.Popen(sleeper, preexec_fn=default_signal_dispositions)
    segment = Path("/dev/shm") / f"corral_{job.pid}_h3test"
    grandchild = None
    try:
        deadline = time.monotonic() + 60
        while not started.exists() or not started.read_text():
            assert time.monotonic() < deadline and job.poll() is None, "the job process started nothing"
            time.sleep(0.05)
        grandchild = int(started.read_text())
        segment.write_bytes(b"x")
        os.kill(job.pid, signal.SIGKILL)
        job.wait(timeout=10)
        assert process_alive(grandchild)  # handed to init, running on: what the launcher must end
        assert end_leftovers({MARK_VAR: mark}, [job.pid], grace_s=1.0) == set()
        assert not process_alive(grandchild) and not segment.exists()
        assert process_alive(other.pid)  # no mark: not the job's
    finally:
        for proc in (job, other):
            proc.kill()
            proc.wait(timeout=10)
        if grandchild is not None and process_alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)
            wait_gone([grandchild], timeout=5)
        segment.unlink(missing_ok=True)
