"""Launchers crossed with the samplers that start processes of their own, end to end with ``train.py``.

Each sweep's job process is not ``train.py``'s own: a loky worker (``hydra/launcher=joblib``), a
submitit job process (``submitit_local``) or a Ray worker (``hydra/launcher=ray``). A sampler that
starts worker processes there (``multiprocessing``, ``action_server``) must work as it does under the
basic launcher. Before the fix of ``corral.launchers.job_processes.run_in_job_process``, every job of
``hydra/launcher=joblib`` with such a sampler failed: its spawned workers read loky's start method back
and died with ``ValueError: cannot find context for 'loky'``.

The whole launcher x sampler x worker matrix was run by hand (all combinations passed, or were refused
by design: ``worker.backend=async`` under the multiprocessing, action_server and alternating samplers);
these are cheap representatives of it: two jobs, one epoch with an evaluation, each job's two worker
processes, and nothing left running or in ``/dev/shm`` afterwards.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from corral.testing.processes import remove_shm_of, shm_entries

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "conf"))
import dying_jobs  # noqa: E402  - run_watched_sweep: a bounded sweep whose processes are watched

#: Two jobs of one ~400-step epoch with an evaluation, CSV only.
TINY = ["seed=1,2", "trainer.n_epochs=1", "trainer.batch_size=400", "trainer.eval_every=1",
        "trainer.eval_episodes=1", "logger=[csv]", "trainer.progress=false"]
NO_RAY = importlib.util.find_spec("ray") is None


@pytest.mark.parametrize("launcher, sampler", [
    pytest.param(["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
                 ["sampler=action_server", "sampler.n_workers=2", "sampler.device=cpu"], id="joblib-action_server"),
    pytest.param(["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5"],
                 ["sampler=multiprocessing", "sampler.n_workers=2"], id="submitit_local-multiprocessing"),
    pytest.param(["hydra/launcher=ray", "hydra.launcher.num_cpus=2", "hydra.launcher.poll_s=0.2"],
                 ["sampler=multiprocessing", "sampler.n_workers=2"], id="ray-multiprocessing",
                 marks=pytest.mark.skipif(NO_RAY, reason="needs ray (pip install 'corral[ray]')")),
])
def test_sampler_worker_processes_run_in_each_launchers_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            launcher: list[str], sampler: list[str]) -> None:
    """Both jobs complete, evaluated, with their sampler's worker processes; nothing is left behind."""
    if launcher[0] == "hydra/launcher=joblib":
        pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    if launcher[0] == "hydra/launcher=submitit_local":
        pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # the Ray launcher's own local runtime
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    before = shm_entries()
    seen: dict[int, int] = {}
    try:
        code, err, seen = dying_jobs.run_watched_sweep(tmp_path, {}, *launcher, *sampler, *TINY)
    finally:
        left = remove_shm_of(seen, before)
    assert code == 0, err[-3000:]
    assert "Traceback" not in err and "leaked" not in err, err[-3000:]
    for job in (0, 1):
        done = dying_jobs.summary(tmp_path / "multirun", job)
        assert done["status"] == "completed" and done["epochs"] == 1, done
        assert done["final_eval_return"] is not None and done["env_steps"] >= 400, done
    assert not left, left  # no /dev/shm segment of the sweep's processes outlived it
