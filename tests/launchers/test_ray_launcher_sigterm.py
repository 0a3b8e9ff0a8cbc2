"""SIGTERM to a ``hydra/launcher=ray`` sweep, end to end with ``train.py`` on a local Ray runtime of its own.

``kill <pid>`` on the sweep's process ended it with Ray's ``*** SIGTERM received`` stack dump and exit status 1,
and the local runtime with it, so the jobs were killed without a ``summary.json``. ``kill -TERM -<pgid>`` (every
process of the sweep's process group) also reached the runtime's raylet and GCS, whose end killed the jobs
(Ray's job workers have process groups of their own, so the jobs never got the signal); the sweep ended with
SIGABRT. Now either stops the sweep as Ctrl-C does: each job is cancelled, saves and writes an ``interrupted``
summary, the runtime is shut down, and the sweep ends with corral's interrupted line (exit 143, as a run stopped by SIGTERM), leaving no
process and no ``/dev/shm`` segment behind.

Each test runs a 2-job sweep in a session of its own and sends SIGTERM once both jobs have saved an epoch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from corral.testing.modules import import_path

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
#: ``tests/conf/sigterm_sweeps.py``: the sweep run, signalled and waited for.
sweeps = import_path(ROOT / "tests" / "conf" / "sigterm_sweeps.py", "sigterm_sweeps")
#: Two jobs of tiny epochs (500 steps, one evaluation episode, CSV only), running until stopped.
SWEEP = ["hydra/launcher=ray", "hydra.launcher.num_cpus=2", "hydra.launcher.poll_s=0.2", "seed=1,2",
         "trainer.n_epochs=1000000", "trainer.batch_size=500", "trainer.eval_episodes=1", "logger=[csv]",
         "trainer.progress=false", "trainer.max_env_steps=null"]


@pytest.mark.parametrize("whom", ["process", "process group"])
def test_sigterm_stops_the_jobs_and_shuts_the_runtime_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           whom: str) -> None:
    """SIGTERM to the sweep's process alone, or to its whole process group: both jobs stop and save (summary
    ``interrupted``), the sweep's output ends with corral's line naming the sweep's directory (exit 143, as a
    run stopped by SIGTERM), with no stack dump of Ray's, and nothing of the sweep (Ray's processes, the jobs'
    workers) is left running."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local runtime of the sweep's own
    sweep = tmp_path / "multirun"
    run = sweeps.signalled_sweep(tmp_path, sweep, SWEEP, whom=whom, env={"RAY_USAGE_STATS_ENABLED": "0"})
    out = run.tail
    sweeps.assert_ended_as_interrupted(run, sweep)
    assert "SIGTERM received" not in out, out  # no stack dump of Ray's
    for job in (0, 1):
        summary = json.loads((sweep / str(job) / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["epochs"] >= 1, summary
        assert (sweep / str(job) / "snapshots" / "latest").is_file()
        assert re.search(rf"\[job {job}\] corral: interrupted", out), out  # the job's own line reached the sweep's
