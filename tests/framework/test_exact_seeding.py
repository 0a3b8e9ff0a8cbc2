"""Seeds, behaviourally (issue 18, section 5): different workers and slots run different episodes,
the same seed the same ones; and a resumed run continues the global Python, NumPy and torch
generators bit for bit."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from corral.framework.algorithm import Algorithm
from corral.framework.batch import EpisodeBatch
from corral.framework.env import EnvFactory, EnvSpec
from corral.framework.logger import Logger
from corral.framework.plugins import get_registry
from corral.framework.policy import Policy
from corral.framework.trainer import Trainer, TrainerConfig
from corral.framework.worker import WorkerFactory

CARTPOLE = EnvFactory("CartPole-v1")


def mlp_policy() -> Policy:
    from corral.plugins.policies.mlp import MLPPolicy

    torch.manual_seed(0)
    return MLPPolicy(EnvSpec.from_env(CARTPOLE()), hidden_sizes=[8])


def episodes(seed: int) -> list[EpisodeBatch]:
    """Two episodes from each slot of each of two vec workers (two slots each), stochastic policy."""
    local = get_registry().get("sampler", "local").factory
    factory = WorkerFactory(seed=seed, max_episode_length=None, n_workers=2,
                            worker_class=get_registry().get("worker", "vec").factory, worker_args={"n_envs": 2})
    with local.from_worker_factory(factory, agents=mlp_policy(), envs=CARTPOLE) as sampler:
        return sampler.obtain_exact_episodes(2, None).split()


def test_workers_and_slots_run_different_episodes_and_the_same_seed_the_same_ones() -> None:
    a = episodes(seed=11)
    assert len(a) == 4  # worker 0 slot 0, worker 0 slot 1, worker 1 slot 0, worker 1 slot 1
    starts = [e.observations[0].tolist() for e in a]
    assert len({tuple(s) for s in starts}) == 4, "every slot of every worker starts from its own state"
    for i in range(4):
        for j in range(i + 1, 4):
            same_length = a[i].lengths[0] == a[j].lengths[0]
            assert not (same_length and np.array_equal(a[i].actions, a[j].actions)), (i, j)
    b = episodes(seed=11)
    for x, y in zip(a, b):
        assert x.differences(y) == []
    c = episodes(seed=12)
    assert all(not np.array_equal(x.observations[0], y.observations[0]) for x, y in zip(a, c))


# ---------------------------------------------------------------------------------------- resume
class GlobalDraws(Algorithm):
    """Draws from Python's, NumPy's and torch's global generators in every ``train_once``."""

    def __init__(self, policy: Policy, sampler: Any) -> None:
        self.policy = policy
        self.sampler = sampler

    def train_once(self, itr: int, episodes: EpisodeBatch) -> dict[str, float]:
        return {"draw/python": random.random(), "draw/numpy": float(np.random.standard_normal()),
                "draw/torch": float(torch.rand(1)), "draw/steps": float(len(episodes))}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


class Rows(Logger):
    def __init__(self) -> None:
        self.rows: dict[int, dict[str, float]] = {}

    def log(self, epoch: int, stats: Mapping[str, float]) -> None:
        self.rows[epoch] = {k: v for k, v in stats.items() if not k.startswith("time/")}


def trainer(run_dir: Path) -> tuple[Trainer, Rows]:
    local = get_registry().get("sampler", "local").factory
    policy = mlp_policy()
    sampler = local.from_worker_factory(WorkerFactory(seed=2, max_episode_length=None), agents=policy, envs=CARTPOLE)
    rows = Rows()
    t = Trainer(TrainerConfig(eval_every=0, keep_snapshots=0, progress=False, max_env_steps=None),
                snapshot_dir=run_dir, loggers=[rows], seed=2)
    t.setup(GlobalDraws(policy, sampler), CARTPOLE)
    return t, rows


def test_resume_continues_the_global_generators_bit_for_bit(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    full, full_rows = trainer(tmp_path / "full")
    with full:
        full.train(n_epochs=4, batch_size=60)
    # Another process state entirely: the generators are elsewhere until the snapshot restores them.
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    resumed, resumed_rows = trainer(tmp_path / "resumed")
    with resumed:
        resumed.restore(tmp_path / "full" / "snapshots" / "epoch_000002.pt")
        resumed.train(n_epochs=4, batch_size=60)
    assert sorted(resumed_rows.rows) == [2, 3]
    for epoch in (2, 3):
        assert resumed_rows.rows[epoch] == full_rows.rows[epoch], epoch
    assert full_rows.rows[2]["draw/python"] != full_rows.rows[3]["draw/python"]


# ------------------------------------------------------------------- torch threads, before building
def test_a_sweeps_jobs_with_the_same_seed_give_the_same_rows(tmp_path: Path) -> None:
    """``-m seed=1,1``: both jobs build their networks with ``trainer.torch_threads`` threads. Before,
    the first job (like a single run) built them with torch's default thread count and the second with
    the first's ``torch_threads=1``: orthogonal initialisation (a QR decomposition) differs with the
    count, so the losses differed from epoch 0 and the episodes soon after."""
    import csv
    import subprocess
    import sys

    default = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    if int(default) < 2:
        import pytest

        pytest.skip("one core: torch's default thread count is trainer.torch_threads=1's")
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, str(root / "train.py"), "-m", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                           "seed=1,1", "trainer.n_epochs=2", "trainer.batch_size=200", "trainer.eval_every=0",
                           "logger=[csv]"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [list(csv.DictReader((tmp_path / "sweep" / str(job) / "progress.csv").open())) for job in (0, 1)]
    timed = {k for k in rows[0][0] if k.startswith("time/") or "per_s" in k or k.endswith("_s")}
    assert [{k: v for k, v in r.items() if k not in timed} for r in rows[0]] == \
        [{k: v for k, v in r.items() if k not in timed} for r in rows[1]]
