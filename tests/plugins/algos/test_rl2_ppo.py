"""``algo=rl2_ppo``: training over whole trials, snapshots, meta-evaluation, an end-to-end run with
resume, and a short learning check."""

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

from corral.framework.compose import Run, build
from corral.framework.entry import prepare

ROOT = Path(__file__).resolve().parents[3]
#: A small bandits problem: 3 arms, trials of 4 one-pull episodes, 2 workers with 2 slots each.
SMALL = ["experiment=rl2_bandits", "env.n_arms=3", "worker.n_episodes_per_trial=4", "worker.n_envs=2",
         "sampler.n_workers=2", "trainer.batch_size=200", "algo.minibatch_size=100", "algo.n_epochs=2",
         "algo.n_train_tasks=30", "algo.n_test_tasks=6", "algo.meta_eval_trials=2", "trainer.eval_every=0",
         "logger=[]", "seed=3"]


def make_run(*overrides: str) -> Run:
    args = prepare([*SMALL, *overrides])
    with hydra.initialize_config_module(config_module="corral.conf", version_base="1.3"):
        cfg = hydra.compose(config_name="config", overrides=args)
    return build(cfg)


def params(run: Run) -> dict[str, np.ndarray]:
    return {k: np.array(v, copy=True) for k, v in run.policy.get_param_values().items()}


def test_train_once_over_trials_changes_the_policy_and_reports_finite_stats() -> None:
    run = make_run()
    try:
        batch = run.algo.sample(0, 200)
        assert (batch.lengths == 4).all() and len(batch) >= 200
        assert batch.episode_infos["task_id"].max() < 30  # meta-train tasks only
        before = params(run)
        stats = run.algo.train_once(0, batch)
        assert all(isinstance(v, float) and math.isfinite(v) for v in stats.values()), stats
        assert stats["rl2/n_trials"] == batch.n_episodes
        after = params(run)
        assert any(not np.array_equal(before[k], after[k]) for k in before)
        assert all(np.array_equal(np.asarray(run.algo.get_agent_update()[k]), after[k]) for k in after)
    finally:
        run.close()


def test_epoch_tasks_are_spread_one_schedule_per_worker() -> None:
    run = make_run()
    try:
        updates = run.algo.task_sampler.env_updates(0, 2, run.algo.tasks_per_worker(200))
        batch = run.algo.sample(0, 200)
        half = batch.n_episodes // 2  # worker order: worker 0's trials first
        ids = batch.episode_infos["task_id"].tolist()
        assert ids[:half] == list(updates[0].indices[:half])  # one slot after the other, in schedule order
        assert ids[half:] == list(updates[1].indices[:half])
    finally:
        run.close()


def test_state_dict_round_trip_trains_identically() -> None:
    first, second = make_run(), make_run("seed=4")
    try:
        first.algo.train_once(0, first.algo.sample(0, 200))
        second.algo.load_state_dict(copy.deepcopy(first.algo.state_dict()))
        batch = first.algo.sample(1, 200)
        s1, s2 = first.algo.train_once(1, batch), second.algo.train_once(1, batch)
        a, b = params(first), params(second)
        assert all(np.array_equal(a[k], b[k]) for k in a)
        assert s1 == s2
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("minibatch_size, per_epoch", [(100, 3), (160, 2), (100000, 1)])
def test_minibatches_are_minibatch_size_steps_rounded_to_whole_trials(minibatch_size: int, per_epoch: int) -> None:
    """A minibatch is ``algo.minibatch_size`` steps rounded to whole trials of the batch's mean length;
    above the batch's steps every gradient step uses the whole batch (Adam counts the steps taken)."""
    run = make_run(f"algo.minibatch_size={minibatch_size}")
    try:
        batch = run.algo.sample(0, 200)
        n_steps, n_trials = len(batch), batch.n_episodes
        starts = run.algo.minibatch_starts("minibatch_size", minibatch_size, n_steps, trials=n_trials)
        assert len(starts) == per_epoch and starts.step == max(1, round(minibatch_size / (n_steps / n_trials)))
        run.algo.train_once(0, batch)
        steps = {int(s["step"]) for s in run.algo.optimizers["adam"].state.values()}
        assert steps == {2 * per_epoch}  # algo.n_epochs=2
    finally:
        run.close()


def test_a_minibatch_that_rounds_to_the_whole_batch_or_one_trial_is_said_once(caplog: pytest.LogCaptureFixture
                                                                              ) -> None:
    """Rounding to whole trials that makes a minibatch the whole batch (a size within half a trial below
    its steps) or one trial (half a trial or less) is one warning, as a size above the batch is; a size
    whose rounding leaves several minibatches of several trials says nothing."""
    run = make_run()
    try:
        batch = run.algo.sample(0, 200)
        n_steps, n_trials = len(batch), batch.n_episodes
        per_trial = n_steps / n_trials
        said = {}
        for size in (n_steps - 1, 1, 100):
            run.algo._warned_minibatch.clear()
            caplog.clear()
            with caplog.at_level("WARNING", logger="corral.rl.on_policy"):
                run.algo.minibatch_starts("minibatch_size", size, n_steps, trials=n_trials)
                run.algo.minibatch_starts("minibatch_size", size, n_steps, trials=n_trials)
            said[size] = [r.getMessage() for r in caplog.records]
        assert said[n_steps - 1] == [
            f"corral: algo.minibatch_size={n_steps - 1} rounds to whole trials of the batch's {per_trial:g} steps: all "
            f"{n_trials} trials ({n_steps} steps), so each gradient step uses the whole batch; give "
            f"algo.minibatch_size at most {round((n_trials - 1) * per_trial)} for minibatches of fewer trials"]
        assert said[1] == [
            f"corral: algo.minibatch_size=1 is half a trial or less of the batch's {per_trial:g} steps, so each "
            f"minibatch is one whole trial ({round(per_trial)} steps); give algo.minibatch_size at least "
            f"{round(per_trial)}"]
        assert said[100] == []
    finally:
        run.close()


def test_meta_evaluate_reports_an_adaptation_curve_on_held_out_tasks() -> None:
    run = make_run()
    try:
        stats = run.algo.meta_evaluate(run.env, seed=3)
        assert [k for k in stats if k.startswith("meta_eval/return_ep")] == [f"meta_eval/return_ep{i}" for i in range(4)]
        assert stats["meta_eval/n_trials"] == 12.0
        assert stats == run.algo.meta_evaluate(run.env, seed=3)  # the same seeds every call
        trials = run.algo.meta_test(run.env, seed=3)
        assert sorted(set(trials.episode_infos["task_id"].tolist())) == list(range(30, 36))  # held out
        assert stats["meta_eval/trial_return"] == pytest.approx(trials.episode_returns.mean())
    finally:
        run.close()


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]


def train(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "train.py"), *SMALL, "logger=[csv]", "trainer.eval_every=2",
           "trainer.eval_episodes=2", "trainer.progress=false", f"hydra.run.dir={run_dir}", *overrides]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_train_py_end_to_end_logs_adaptation_curves_and_resumes_exactly(tmp_path: Path) -> None:
    full = train(tmp_path / "full", "trainer.n_epochs=3")
    assert full.returncode == 0, full.stderr[-3000:]
    rows = read_rows(tmp_path / "full" / "progress.csv")
    assert len(rows) == 3
    for i in range(4):
        assert rows[1][f"meta_eval/return_ep{i}"] != "" and rows[0][f"meta_eval/return_ep{i}"] == ""
    snapshot = tmp_path / "full" / "snapshots" / "epoch_000002.pt"
    resumed = train(tmp_path / "resumed", "trainer.n_epochs=3", f"trainer.resume={snapshot}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    last = read_rows(tmp_path / "resumed" / "progress.csv")[-1]
    assert {k: v for k, v in last.items() if v} == {k: v for k, v in rows[2].items() if v}


def test_a_minibatch_larger_than_the_batch_is_one_warning_line(tmp_path: Path) -> None:
    """``algo.minibatch_size`` above the batch's steps says so once, in steps and trials, as PPO's does
    (it was silent: 2,500 and 100,000 gave the same progress.csv)."""
    small = [o for o in SMALL if not o.startswith("algo.minibatch_size=")]
    cmd = [sys.executable, str(ROOT / "train.py"), *small, "algo.minibatch_size=100000", "trainer.n_epochs=2",
           "trainer.progress=false", f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("corral: warning:")]
    assert warnings == [
        "corral: warning: algo.minibatch_size=100000 is larger than the batch of 208 steps (52 trials) this update "
        "learns from, so each gradient step uses the whole batch; lower algo.minibatch_size or raise "
        "trainer.batch_size"], proc.stderr[-3000:]


def test_short_training_learns_to_beat_random_pulls() -> None:
    """Two-armed bandits, trials of 5 pulls: 40k steps of RL2 already pull the better arm more often
    than chance on held-out bandits (paired comparison on the same tasks and seeds)."""
    run = make_run("env.n_arms=2", "worker.n_episodes_per_trial=5", "worker.n_envs=8", "sampler.n_workers=1",
                   "trainer.batch_size=2000", "algo.minibatch_size=500", "algo.n_epochs=8",
                   "algo.learning_rate=0.005", "algo.ent_coef=0", "algo.n_train_tasks=1000",
                   "algo.n_test_tasks=50", "algo.meta_eval_trials=4", "trainer.n_epochs=20", "seed=1")
    try:
        before = run.algo.meta_evaluate(run.env, seed=1)["meta_eval/trial_return"]
        run.train()
        after = run.algo.meta_evaluate(run.env, seed=1)["meta_eval/trial_return"]
        probe = run.env()
        tasks = run.algo.split.tasks(probe, "test")
        random_pulls = 5 * float(np.mean([t.params["probs"].mean() for t in tasks]))
        best_arm = 5 * float(np.mean([t.params["probs"].max() for t in tasks]))
    finally:
        run.close()
    assert after > before + 0.1, (before, after)
    assert after > random_pulls + 0.1, (random_pulls, after, best_arm)
