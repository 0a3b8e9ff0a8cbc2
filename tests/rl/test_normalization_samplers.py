"""Running normalisation end to end: same statistics under every sampler, snapshots bit for bit,
algorithms see normalised data while the logs keep raw returns, SAC's replay keeps raw data."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch

from corral.framework.batch import EpisodeBatch
from corral.rl.normalization import NormalizedAlgorithm, NormalizedPolicy, normalize_observations

SMALL = ["env=pendulum", "algo=ppo", "algo.n_epochs=2", "worker=vec", "worker.n_envs=2", "sampler.n_workers=2",
         "normalize.obs=true", "normalize.reward=true", "trainer.batch_size=400", "trainer.n_epochs=3",
         "trainer.eval_every=0", "trainer.progress=false", "logger=[csv]"]


def _train(build: Callable[..., Any], *overrides: str, log_dir: Path | None = None) -> dict[str, Any]:
    """Train a small normalised PPO run; return its raw batches, final statistics and parameters."""
    run = build(*SMALL, *overrides, log_dir=log_dir)
    assert isinstance(run.algo, NormalizedAlgorithm)
    raw: list[EpisodeBatch] = []
    seen: list[EpisodeBatch] = []
    sample, train_once = run.algo.sample, run.algo.inner.train_once
    run.algo.sample = lambda itr, n: raw.append(sample(itr, n)) or raw[-1]
    run.algo.inner.train_once = lambda itr, batch: seen.append(batch) or train_once(itr, batch)
    run.train()
    out = {"raw": raw, "seen": seen, "norm": run.algo.state_dict()["normalization"],
           "params": run.policy.get_param_values(), "log_dir": run.trainer.log_dir}
    run.close()
    return out


def _assert_same_stats(a: dict[str, Any], b: dict[str, Any]) -> None:
    for part in ("obs", "ret"):
        for key in ("mean", "var"):
            x, y = a[part][key], b[part][key]
            assert x.dtype == y.dtype == np.float64 and x.tobytes() == y.tobytes(), (part, key, x, y)
        assert a[part]["count"] == b[part]["count"]
    assert a["gamma"] == b["gamma"]


SAMPLERS = ["multiprocessing", "action_server", "alternating", "ray"]


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_same_statistics_and_episodes_under_every_sampler(corral_build: Any, sampler: str) -> None:
    if sampler == "ray":
        pytest.importorskip("ray")
    extra = ["sampler.device=cpu"] if sampler in ("action_server", "alternating") else []
    local = _train(corral_build, "sampler=local")
    other = _train(corral_build, f"sampler={sampler}", *extra)
    assert len(local["raw"]) == len(other["raw"]) == 3
    for a, b in zip(local["raw"], other["raw"]):
        assert a.equals(b), a.differences(b)
    _assert_same_stats(local["norm"], other["norm"])
    assert local["norm"]["obs"]["count"] > 1000  # it really merged every epoch's observations
    for key, value in local["params"].items():
        assert value.tobytes() == other["params"][key].tobytes(), key


def test_algorithm_sees_normalised_data_and_logs_stay_raw(corral_build: Any) -> None:
    out = _train(corral_build, "sampler=local")
    raw, seen = out["raw"], out["seen"]
    # Epoch 1's observations are normalised with the statistics of epoch 0's episodes (what the
    # workers acted with), and its rewards are scaled: not the raw ones.
    from corral.rl.normalization import RunningMeanStd

    rms = RunningMeanStd(raw[0].observations.shape[1:])
    rms.update(raw[0].observations)
    expected = normalize_observations(raw[1].observations, rms.mean, rms.var, 10.0, 1e-8)
    assert seen[1].observations.tobytes() == expected.tobytes()
    assert not np.allclose(seen[1].rewards, raw[1].rewards)
    assert np.abs(seen[1].rewards).max() < np.abs(raw[1].rewards).max()
    with open(Path(out["log_dir"]) / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    for row, batch in zip(rows, raw):
        assert float(row["train/return_mean"]) == pytest.approx(float(batch.episode_returns.mean()), rel=1e-6)
        assert float(row["normalize/return_std"]) > 1.0


def test_snapshot_round_trip_is_bit_for_bit(corral_build: Any, tmp_path: Path) -> None:
    straight = _train(corral_build, "trainer.n_epochs=3", log_dir=tmp_path / "straight")
    first = _train(corral_build, "trainer.n_epochs=2", log_dir=tmp_path / "first")
    saved = torch.load(tmp_path / "first" / "snapshots" / "epoch_000002.pt", weights_only=False)
    _assert_same_stats(saved["algo"]["normalization"], first["norm"])
    resumed = _train(corral_build, "trainer.n_epochs=3", f"trainer.resume={tmp_path / 'first'}",
                     log_dir=tmp_path / "resumed")
    assert len(resumed["raw"]) == 1
    assert resumed["raw"][0].equals(straight["raw"][2])
    _assert_same_stats(resumed["norm"], straight["norm"])
    for key, value in straight["params"].items():
        assert value.tobytes() == resumed["params"][key].tobytes(), key


def test_evaluation_acts_with_frozen_statistics(corral_build: Any) -> None:
    run = corral_build(*SMALL, "sampler=local", "trainer.n_epochs=1")
    run.train()
    policy = run.algo.eval_policy
    assert isinstance(policy, NormalizedPolicy)
    frozen = policy.frozen()
    before = frozen.obs_rms.mean.copy()
    run.trainer.train(n_epochs=2)
    assert frozen.obs_rms.mean.tobytes() == before.tobytes()
    assert run.algo.eval_policy.obs_rms.mean.tobytes() != before.tobytes()
    update = run.algo.get_agent_update()
    assert update["obs_norm.mean"].tobytes() == run.algo.normalizer.obs_rms.mean.tobytes()
    # The workers act with the statistics the last agent update carried.
    run.algo.sample(3, 10)
    agent = run.sampler._workers[0].agent
    assert isinstance(agent, NormalizedPolicy) and agent.obs_rms is not run.algo.normalizer.obs_rms
    assert agent.obs_rms.var.tobytes() == run.algo.normalizer.obs_rms.var.tobytes()


def test_sac_keeps_raw_transitions_and_normalises_minibatches(corral_build: Any) -> None:
    run = corral_build("experiment=sac_pendulum", "normalize.obs=true", "normalize.reward=true",
                       "algo.min_buffer_size=200", "algo.batch_size=32", "trainer.max_env_steps=400",
                       "trainer.eval_every=0", "trainer.progress=false", "logger=[csv]")
    raw: list[EpisodeBatch] = []
    sample = run.algo.sample
    run.algo.sample = lambda itr, n: raw.append(sample(itr, n)) or raw[-1]
    stats = run.train()
    stored = run.algo.replay_buffer.sample(1)  # the buffer holds raw observations
    all_obs = np.concatenate([b.observations for b in raw])
    assert any(np.array_equal(stored["observations"][0], o) for o in all_obs)
    batch = run.algo.inner.minibatch_transform({"observations": torch.from_numpy(all_obs[:4].astype(np.float32)),
                                                "rewards": torch.ones(4)})
    assert batch["observations"].abs().max() <= 10.0 and not torch.allclose(batch["rewards"], torch.ones(4))
    assert stats["replay/n_updates"] > 0 and "normalize/return_std" in stats


def test_a_normalised_snapshot_is_refused_without_normalisation(corral_build: Any, tmp_path: Path) -> None:
    from corral.framework.errors import ConfigError

    _train(corral_build, "trainer.n_epochs=1", log_dir=tmp_path / "normalised")
    plain = [o for o in SMALL if not o.startswith("normalize.")]
    run = corral_build(*plain, "sampler=local", f"trainer.resume={tmp_path / 'normalised'}", log_dir=tmp_path / "plain")
    with pytest.raises(ConfigError, match="trained with running normalisation"):
        run.train()


def test_corral_eval_uses_the_snapshot_statistics(tmp_path: Path) -> None:
    """``corral eval`` rebuilds the run, loads the statistics with the weights and evaluates with
    them frozen: the same returns as the run's own last evaluation (same evaluation seeds)."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    run_dir = tmp_path / "run"
    train = [sys.executable, str(root / "train.py"), "env=pendulum", "normalize.obs=true", "normalize.reward=true",
             "trainer.n_epochs=2", "trainer.batch_size=400", "trainer.eval_every=2", "trainer.eval_episodes=2",
             "trainer.progress=false", "logger=[csv]", f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(train, cwd=root, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(run_dir / "progress.csv") as f:
        last = list(csv.DictReader(f))[-1]
    proc = subprocess.run([sys.executable, "-m", "corral.framework.cli", "eval", str(run_dir), "--episodes", "2"],
                          cwd=root, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((run_dir / "eval.json").read_text())
    assert float(np.mean(result["returns"])) == pytest.approx(float(last["eval/return_mean"]), rel=1e-9)


@pytest.mark.parametrize("sampler", ["multiprocessing", "action_server"])
def test_vector_worker_normalises_like_the_others(corral_build: Any, sampler: str) -> None:
    """``worker=vector`` (a gymnasium VectorEnv per worker) acts through the same agent: the same
    episodes, statistics and parameters under local and a process sampler."""
    extra = ["sampler.device=cpu"] if sampler == "action_server" else []
    vector = ["worker=vector", "worker.n_envs=2", "worker.backend=sync"]
    local = _train(corral_build, "sampler=local", *vector)
    other = _train(corral_build, f"sampler={sampler}", *vector, *extra)
    for a, b in zip(local["raw"], other["raw"]):
        assert a.equals(b), a.differences(b)
    _assert_same_stats(local["norm"], other["norm"])
    for key, value in local["params"].items():
        assert value.tobytes() == other["params"][key].tobytes(), key


def test_reward_scaling_alone_keeps_the_plain_agent(corral_build: Any) -> None:
    plain = [o for o in SMALL if not o.startswith("normalize.obs")]
    run = corral_build(*plain, "sampler=local", "trainer.n_epochs=2")
    assert run.algo.policy is run.policy and "obs_norm.mean" not in run.algo.get_agent_update()
    stats = run.train()
    assert stats["normalize/return_std"] > 1.0 and "normalize/obs_std_mean" not in stats
    assert run.algo.state_dict()["normalization"]["obs"]["count"] < 1  # observations untouched
