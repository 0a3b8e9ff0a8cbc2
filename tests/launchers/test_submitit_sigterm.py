"""SIGTERM to a ``hydra/launcher=submitit_local`` sweep, end to end with ``train.py``.

``kill <pid>`` on the sweep's process ended it at once (killed by SIGTERM), silently, and left each job's
controller (``python -m corral.launchers.submitit_controller``) and the job itself training on, unattended.
``kill -TERM -<pgid>`` (every process of the sweep's process group: the controllers and jobs are in it) stopped
the jobs, but the sweep's process still ended killed by SIGTERM without a line. Now either stops the sweep:
the launcher passes SIGTERM on to each running job through its controller, waits for the jobs to save (each
writes an ``interrupted`` summary), and the sweep ends with corral's interrupted line (exit 143, as a run stopped by SIGTERM), leaving no
process and no ``/dev/shm`` segment behind.

Each test runs a 2-job sweep in a session of its own and sends SIGTERM once both jobs have saved an epoch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.testing.modules import import_path

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
pytest.importorskip("submitit")

ROOT = Path(__file__).resolve().parents[2]
#: ``tests/conf/sigterm_sweeps.py``: the sweep run, signalled and waited for.
sweeps = import_path(ROOT / "tests" / "conf" / "sigterm_sweeps.py", "sigterm_sweeps")
#: Two jobs of tiny epochs (500 steps, one evaluation episode, CSV only), running until stopped.
SWEEP = ["hydra/launcher=submitit_local", "seed=1,2", "trainer.n_epochs=1000000", "trainer.batch_size=500",
         "trainer.eval_episodes=1", "logger=[csv]", "trainer.progress=false", "trainer.max_env_steps=null"]


@pytest.mark.parametrize("whom", ["process", "process group"])
def test_sigterm_stops_the_jobs_and_waits_for_them(tmp_path: Path, whom: str) -> None:
    """SIGTERM to the sweep's process alone, or to its whole process group: both jobs stop and save (summary
    ``interrupted``, the job's log says SIGTERM stopped it), the sweep's output ends with corral's line naming
    the sweep's directory (exit 143, as a run stopped by SIGTERM), and no controller or job process is left
    running once it has exited."""
    sweep = tmp_path / "multirun"
    run = sweeps.signalled_sweep(tmp_path, sweep, SWEEP, whom=whom, left_s=3)  # the launcher waited for its jobs
    sweeps.assert_ended_as_interrupted(run, sweep)
    for job in (0, 1):
        summary = json.loads((sweep / str(job) / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["epochs"] >= 1, summary
        assert (sweep / str(job) / "snapshots" / "latest").is_file()
        logs = sorted((sweep / ".submitit").rglob("*_0_log.err"))
        assert any(f"[job {job}] corral: interrupted by SIGTERM" in log.read_text() for log in logs), logs
