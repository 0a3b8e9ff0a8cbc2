"""``algo=pearl``: per-task buffers, the encoder trained through the critic and the KL term,
snapshots that train identically, meta-evaluation on held-out tasks, and an end-to-end run with
resume under the multiprocessing sampler."""

from __future__ import annotations

import copy
import csv
import math
import subprocess
import sys
from pathlib import Path

import hydra
import numpy as np
import pytest
import torch

from corral.framework.compose import Run, build
from corral.framework.entry import prepare
from corral.framework.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]
#: A small PEARL problem: trials of 3 episodes of 20 steps, 2 slots, small networks.
SMALL = ["experiment=pearl_pointnav", "worker.n_envs=2", "policy.hidden_sizes=[32]",
         "policy.encoder_hidden_sizes=[32]", "algo.qf_hidden_sizes=[32]", "algo.meta_batch=4",
         "algo.batch_size=16", "algo.context_size=8", "algo.min_buffer_size=100", "algo.n_train_tasks=10",
         "algo.n_test_tasks=4", "algo.gradient_steps=5", "trainer.batch_size=240", "trainer.eval_every=0",
         "logger=[]", "seed=3"]


def make_run(*overrides: str) -> Run:
    args = prepare([*SMALL, *overrides])
    with hydra.initialize_config_module(config_module="corral.conf", version_base="1.3"):
        cfg = hydra.compose(config_name="config", overrides=args)
    return build(cfg)


def params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def changed(before: dict[str, torch.Tensor], module: torch.nn.Module) -> bool:
    return any(not torch.equal(before[k], v) for k, v in module.state_dict().items())


def test_episodes_go_to_per_task_buffers_and_only_prior_ones_to_the_context() -> None:
    run = make_run()
    try:
        batch = run.algo.sample(0, 240)
        assert len(batch) >= 240 and batch.episode_infos["task_id"].max() < 10  # meta-train tasks only
        run.algo.store(batch)
        prior = int((batch.lengths * (batch.episode_infos["pearl_posterior"] == 0)).sum())
        assert len(run.algo.rl_buffers) == len(batch) and len(run.algo.context_buffers) == prior
        assert set(run.algo.rl_buffers.task_ids) == set(batch.episode_infos["task_id"].tolist())
        # the context buffers hold the context reward (the sparse one), the RL buffers the reward
        some = run.algo.context_buffers.task_ids[0]
        assert (run.algo.context_buffers.buffers[some].sample(50)["rewards"] >= 0).all()
        assert (run.algo.rl_buffers.buffers[some].sample(50)["rewards"] < 0).all()
    finally:
        run.close()


def recorded_env_updates(run: Run) -> list:
    """Every ``env_update`` the algorithm gives its sampler (recorded on the way through)."""
    sent = []
    obtain = run.algo.sampler.obtain_samples

    def recording(itr, batch_size, agent_update=None, env_update=None):  # noqa: ANN001, ANN202
        sent.append(env_update)
        return obtain(itr, batch_size, agent_update, env_update)

    run.algo.sampler.obtain_samples = recording
    return sent


def test_collect_context_size_starts_training_trials_with_the_tasks_buffered_context() -> None:
    run = make_run("algo.collect_context_size=16")
    sent = recorded_env_updates(run)
    try:
        run.algo.store(run.algo.sample(0, 240))
        assert all(c is None for schedule in sent[0] for c in schedule.contexts)  # nothing known yet
        run.algo.sample(1, 240)
        known = run.algo.context_buffers.task_ids
        seen = 0
        for schedule in sent[1]:
            for index, context in zip(schedule.indices, schedule.contexts):
                task = run.algo.split.task_id("train", index)
                assert (context is None) == (task not in known)
                if context is not None:
                    seen += 1
                    assert context["rewards"].shape == (16,)
                    stored = run.algo.context_buffers.buffers[task].sample(1000)["rewards"]
                    assert set(context["rewards"].tolist()) <= set(stored.tolist())
        assert seen > 0
    finally:
        run.close()
    plain = make_run()
    sent = recorded_env_updates(plain)
    try:
        plain.algo.store(plain.algo.sample(0, 240))
        plain.algo.sample(1, 240)
        assert all(schedule.contexts is None for schedule in sent[1])  # the default: trials start empty
    finally:
        plain.close()


def test_gradient_steps_train_encoder_actor_and_critics_once_the_buffer_is_full() -> None:
    run = make_run("algo.min_buffer_size=400")
    try:
        policy = run.algo.policy
        before = {"encoder": params(policy.encoder), "actor": params(policy.actor), "qf1": params(run.algo.qf1)}
        stats = run.algo.train_once(0, run.algo.sample(0, 240))
        assert stats["replay/n_updates"] == 0 and not changed(before["encoder"], policy.encoder)
        stats = run.algo.train_once(1, run.algo.sample(1, 240))
        assert stats["replay/n_updates"] == 5
        assert all(isinstance(v, float) and math.isfinite(v) for v in stats.values()), stats
        assert {"loss/qf", "loss/policy", "loss/kl", "loss/alpha", "pearl/z_variance"} <= set(stats)
        assert changed(before["encoder"], policy.encoder), "the critic's and KL's gradients must train the encoder"
        assert changed(before["actor"], policy.actor) and changed(before["qf1"], run.algo.qf1)
        update = run.algo.get_agent_update()
        assert all(np.array_equal(np.asarray(update[k]), v.numpy()) for k, v in policy.state_dict().items())
    finally:
        run.close()


def test_kl_weight_pulls_the_posterior_to_the_prior() -> None:
    """With a large KL weight the posterior collapses to N(0, I) (KL -> 0, variance -> 1); with none,
    the critic alone sharpens it."""
    stats = {}
    for kl in (0.0, 100.0):
        run = make_run(f"algo.kl_lambda={kl}", "algo.gradient_steps=60", "algo.min_buffer_size=1",
                       "algo.encoder_learning_rate=0.01")
        try:
            run.algo.train_once(0, run.algo.sample(0, 240))
            stats[kl] = run.algo.train_once(1, run.algo.sample(1, 240))
        finally:
            run.close()
    assert stats[100.0]["loss/kl"] < 0.1 < stats[0.0]["loss/kl"], stats
    assert stats[100.0]["pearl/z_variance"] > 0.5 > stats[0.0]["pearl/z_variance"], stats


def test_state_dict_round_trip_trains_identically() -> None:
    first, second = make_run(), make_run("seed=4")
    try:
        first.algo.train_once(0, first.algo.sample(0, 240))
        second.algo.load_state_dict(copy.deepcopy(first.algo.state_dict()))
        batch = first.algo.sample(1, 240)
        s1, s2 = first.algo.train_once(1, batch), second.algo.train_once(1, batch)
        assert s1 == s2 and s1["replay/n_updates"] == 10
        a, b = first.algo.policy.state_dict(), second.algo.policy.state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)
    finally:
        first.close()
        second.close()


def test_meta_evaluate_reports_adaptation_on_held_out_tasks() -> None:
    run = make_run()
    try:
        stats = run.algo.meta_evaluate(run.env, seed=3)
        assert [k for k in stats if k.startswith("meta_eval/return_ep")] == [f"meta_eval/return_ep{i}" for i in range(3)]
        assert "meta_eval/context_return_ep2" in stats and stats["meta_eval/n_trials"] == 4.0
        assert stats == run.algo.meta_evaluate(run.env, seed=3)  # the same seeds every call
        episodes = run.algo.meta_test(run.env, seed=3)
        assert episodes.episode_infos["task_id"].tolist() == [t for t in range(10, 14) for _ in range(3)]  # held out
        assert stats["meta_eval/return_prior"] == pytest.approx(episodes.episode_returns[::3].mean())
        # fully deterministic (mean actions, mean z) meta-tests repeat exactly under another seed
        a = run.algo.meta_test(run.env, seed=3, deterministic=True)
        run.algo.config.meta_eval_sample_z = False
        b, c = (run.algo.meta_test(run.env, seed=s, deterministic=True) for s in (3, 4))
        assert b.differences(c) == [] and a.differences(b) != []
    finally:
        run.close()


def test_bad_settings_are_config_errors() -> None:
    for override, message in (("algo.context_from=posterior", "context_from"), ("algo.meta_batch=0", "meta_batch"),
                              ("algo.collect_context_size=-1", "collect_context_size")):
        with pytest.raises(ConfigError, match=message):
            make_run(override)


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]


def train(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "train.py"), *SMALL, "logger=[csv]", "trainer.eval_every=2",
           "trainer.eval_episodes=2", "trainer.progress=false", "trainer.snapshot_every=1", "sampler=multiprocessing", "sampler.n_workers=2",
           f"hydra.run.dir={run_dir}", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_train_py_end_to_end_logs_adaptation_curves_and_resumes_exactly(tmp_path: Path) -> None:
    full = train(tmp_path / "full", "trainer.n_epochs=3")
    assert full.returncode == 0, full.stderr[-3000:]
    rows = read_rows(tmp_path / "full" / "progress.csv")
    assert len(rows) == 3
    for i in range(3):
        assert rows[1][f"meta_eval/return_ep{i}"] != "" and rows[0][f"meta_eval/return_ep{i}"] == ""
    snapshot = tmp_path / "full" / "snapshots" / "epoch_000002.pt"
    resumed = train(tmp_path / "resumed", "trainer.n_epochs=3", f"trainer.resume={snapshot}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    last = read_rows(tmp_path / "resumed" / "progress.csv")[-1]
    assert {k: v for k, v in last.items() if v} == {k: v for k, v in rows[2].items() if v}
