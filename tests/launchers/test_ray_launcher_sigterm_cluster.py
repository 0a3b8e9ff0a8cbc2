"""SIGTERM to a ``hydra/launcher=ray`` sweep that joined a running cluster (``hydra.launcher.address=auto``).

The cluster is the user's, started before the sweep with ``ray start`` (two nodes of one CPU each, on this
machine, in a temporary directory and on a port of their own, stopped with ``ray stop`` afterwards: the
``ray_cluster`` fixture of ``tests/plugins/samplers/test_ray_runtime.py``). SIGTERM to the sweep's process,
or to its whole process group, stops the sweep as on a local runtime of its own
(``test_ray_launcher_sigterm.py``): each job is cancelled, saves and writes an ``interrupted`` summary, and the
sweep ends with corral's interrupted line (exit 143). And the cluster outlives it: it still answers, with all
of its CPUs free again (the jobs' placement groups removed), and no job keeps running on it (no Ray worker
process runs a job's task any more, and the jobs' logs stop growing).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.testing.modules import import_path
from corral.testing.processes import cmdline, processes_with_environment

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
#: ``tests/conf/sigterm_sweeps.py``: the sweep run, signalled and waited for.
sweeps = import_path(ROOT / "tests" / "conf" / "sigterm_sweeps.py", "sigterm_sweeps")
sys.path.insert(0, str(ROOT / "tests" / "plugins" / "samplers"))
from test_ray_runtime import ray_cluster  # noqa: E402,F401  - the two-node `ray start` cluster fixture

#: Two jobs of tiny epochs (500 steps, one evaluation episode, CSV only), running until stopped, on the
#: cluster the test started (one CPU each: one job per node).
SWEEP = ["hydra/launcher=ray", "hydra.launcher.address=auto", "hydra.launcher.poll_s=0.2", "seed=1,2",
         "trainer.n_epochs=1000000", "trainer.batch_size=500", "trainer.eval_episodes=1", "logger=[csv]",
         "trainer.progress=false", "trainer.max_env_steps=null"]
#: The title Ray gives a worker process while it runs a job's task (corral.launchers.ray._run_job_on_ray).
JOB_TASK = "ray::_run_job_on_ray"
#: Prints the cluster's CPUs, all and free, once every CPU is free again (or after 60 s).
CLUSTER_CPUS = ("import time, ray; ray.init(address='auto', log_to_driver=False); end = time.monotonic() + 60\n"
                "while ray.available_resources().get('CPU', 0) < ray.cluster_resources().get('CPU', 0) "
                "and time.monotonic() < end: time.sleep(0.2)\n"
                "print('CPUs', ray.cluster_resources().get('CPU', 0), ray.available_resources().get('CPU', 0))")


def job_tasks() -> list[int]:
    """Processes of this machine running a job's task (Ray's title for the worker process) of a Ray runtime
    this test process started: their environment has its ``RAY_TMPDIR`` (each pytest-xdist worker has a
    directory of its own, tests/conftest.py), so the Ray tests another worker runs beside it do not count."""
    mine = processes_with_environment(f"RAY_TMPDIR={os.environ['RAY_TMPDIR']}")
    return sorted(pid for pid in mine if cmdline(pid).startswith(JOB_TASK))


def no_job_tasks_within(timeout: float) -> list[int]:
    """Wait up to ``timeout`` seconds for every job task's process to end; those still running."""
    deadline = time.monotonic() + timeout
    while (left := job_tasks()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.mark.parametrize("whom", ["process", "process group"])
def test_sigterm_stops_the_jobs_on_a_joined_cluster_and_leaves_the_cluster_running(
        ray_cluster, tmp_path: Path, whom: str) -> None:  # noqa: F811
    """SIGTERM to the sweep's process alone, or to its process group: both jobs stop and save, the sweep
    ends as interrupted (exit 143), and the cluster it joined still runs, idle, with every CPU free."""
    address, env = ray_cluster
    env = dict(env, RAY_ADDRESS=address)
    assert no_job_tasks_within(0) == [], "a job's task runs on this machine before the test"
    sweep = tmp_path / "multirun"
    run = sweeps.signalled_sweep(tmp_path, sweep, SWEEP, whom=whom, env=env)
    out = run.tail
    sweeps.assert_ended_as_interrupted(run, sweep)
    assert "Ray launcher: 2 job(s) on the Ray cluster at auto" in "\n".join(run.lines), out
    assert "SIGTERM received" not in out, out  # no stack dump of Ray's
    for job in (0, 1):
        summary = json.loads((sweep / str(job) / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["epochs"] >= 1, summary
        assert (sweep / str(job) / "snapshots" / "latest").is_file()
        assert re.search(rf"\[job {job}\] corral: interrupted", out), out
    # No job runs on the cluster any more: no worker process runs a job's task ...
    left = no_job_tasks_within(30)
    assert left == [], f"jobs still run on the cluster after the sweep ended: pids {left}"
    rows = [sweeps.progress_rows(sweep / str(job)) for job in (0, 1)]
    # ... and the cluster still runs, every CPU of it free (the jobs' placement groups are gone).
    status = subprocess.run([sys.executable, "-c", CLUSTER_CPUS], capture_output=True, text=True, timeout=120,
                            env=env, cwd=tmp_path)
    assert status.returncode == 0, f"the cluster no longer answers after the sweep's SIGTERM:\n{status.stderr[-3000:]}"
    assert status.stdout.strip().splitlines()[-1] == "CPUs 2.0 2.0", status.stdout + status.stderr[-2000:]
    # Nothing wrote to the jobs' logs since they stopped (the check above took a moment at least).
    assert [sweeps.progress_rows(sweep / str(job)) for job in (0, 1)] == rows
