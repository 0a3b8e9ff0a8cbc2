"""experiments/learning.py and its SB3 peer runner: the table, the plot, the config mapping, and
tiny real runs with and without ``--peer sb3``.

The SB3 parts need the ``bench`` extra (in ``dev``); without it they skip. Timings are never
asserted (the machine is shared), only that they are reported.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest

from corral.testing.modules import import_path

ROOT = Path(__file__).resolve().parents[2]
TINY = ["experiment=ppo_cartpole", "trainer.max_env_steps=2048", "trainer.eval_every=1", "trainer.eval_episodes=2"]


@pytest.fixture(scope="module")
def learning() -> ModuleType:
    """experiments/learning.py as a module."""
    return import_path(ROOT / "experiments" / "learning.py", "corral_experiments_learning")


@pytest.fixture(scope="module")
def runner() -> ModuleType:
    """experiments/peers/sb3_runner.py as a module."""
    return import_path(ROOT / "experiments" / "peers" / "sb3_runner.py", "corral_experiments_sb3_runner")


def result(seed: int, steps: list[float], returns: list[float], seconds: float) -> dict[str, Any]:
    """A run as learning.py holds it: progress rows plus wall time."""
    rows = [{"env_steps": s, "train/return_mean": r, "eval/return_mean": r, "time/total_s": seconds * s / steps[-1]}
            for s, r in zip(steps, returns)]
    return {"seed": seed, "rows": rows, "wall_s": seconds + 1.0}


def test_welch_t_test_matches_reference_values(learning: ModuleType) -> None:
    # SAC HalfCheetah's final evaluations, corral vs SB3 (sac_halfcheetah_vs_sb3.md); reference values from
    # scipy.stats.ttest_ind(a, b, equal_var=False)
    t, df, p = learning.welch_t_test([7160.9, 6443.4, 7342.0], [6610.4, 6541.1, 6531.5])
    assert (t, df, p) == pytest.approx((1.5284932115856225, 2.032821875546494, 0.26404547729835426), rel=1e-9)
    t, df, p = learning.welch_t_test([3634.0, 3363.9, 3417.2], [3695.8, 3174.1, 3728.5])
    assert (t, df, p) == pytest.approx((-0.3090845563372787, 2.809778892864235, 0.778744371148729), rel=1e-9)
    # far apart: p near 0; equal samples: p = 1
    assert learning.welch_t_test([100.0, 101.0, 102.0], [0.0, 1.0, 2.0])[2] < 1e-4
    assert learning.welch_t_test([1.0, 2.0], [1.0, 2.0])[2] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="at least two values"):
        learning.welch_t_test([1.0], [1.0, 2.0])


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="scipy is not installed")
def test_welch_t_test_agrees_with_scipy(learning: ModuleType) -> None:
    import numpy as np
    from scipy import stats

    rng = np.random.default_rng(0)
    for _ in range(200):
        a = list(rng.normal(0, rng.uniform(0.1, 5), rng.integers(2, 9)))
        b = list(rng.normal(rng.uniform(-3, 3), rng.uniform(0.1, 5), rng.integers(2, 9)))
        reference = stats.ttest_ind(a, b, equal_var=False)
        t, _df, p = learning.welch_t_test(a, b)
        assert t == pytest.approx(reference.statistic, rel=1e-9) and p == pytest.approx(reference.pvalue, abs=1e-10)


def test_summary_compares_final_returns_with_the_peer_spread_and_time_per_step(learning: ModuleType) -> None:
    ours = [result(1, [1000, 2000], [100, 480], 2.0), result(2, [1000, 2010], [90, 460], 2.0)]
    theirs = [result(1, [1024, 2048], [50, 400], 4.0), result(2, [1024, 2048], [60, 500], 4.0)]
    lines = "\n".join(learning.peer_summary(ours, theirs, "train/return_mean", "sb3"))
    assert "corral mean 470.0" in lines and "sb3 seeds 400.0 .. 500.0" in lines
    assert "within the spread of sb3's seeds" in lines
    ratio = float(re.search(r"ratio corral/sb3 = ([0-9.]+)x", lines).group(1))
    assert ratio == pytest.approx((1e-3 + 2 / 2010) / 2 / (4 / 2048), abs=0.01)
    assert "meets the <= 1.2x target" in lines
    # Welch's t-test of the final values (470 vs 450): 480, 460 against 400, 500
    t, df, p = learning.welch_t_test([480.0, 460.0], [400.0, 500.0])
    assert f"corral mean - sb3 mean = +20.0 (sb3 mean 450.0); Welch's t-test over 2 + 2 seeds: t = {t:.2f}, " \
           f"df = {df:.1f}, p = {p:.2f}." in lines
    slow = [result(1, [1000, 2000], [10, 20], 20.0)]
    lines = "\n".join(learning.peer_summary(slow, theirs, "train/return_mean", "sb3"))
    assert "BELOW the spread" in lines and "MISSES the <= 1.2x target" in lines
    assert "Welch" not in lines  # one corral seed: no test
    table = learning.summarise(ours, "train/return_mean", 475)
    assert [row["reached_at_steps"] for row in table] == [2000, None]


def test_final_metric_is_the_last_epoch_that_logged_it(learning: ModuleType) -> None:
    """Evaluation metrics are logged every few epochs: the final value is the last one logged."""
    run = result(1, [1000, 2000], [100, 480], 2.0)
    run["rows"].append({"env_steps": 3000, "train/return_mean": 470, "time/total_s": 3.0})
    (row,) = learning.summarise([run], "eval/return_mean", 475)
    assert row["final eval/return_mean"] == 480 and row["reached_at_steps"] == 2000
    assert row["final eval"] == 480 and row["final eval at steps"] == 2000  # where the final value was logged


def test_plot_draws_a_band_per_framework(learning: ModuleType, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    ours = [result(1, [1000, 2000], [100, 480], 2.0), result(2, [1010, 2020], [90, 460], 2.0)]
    theirs = [result(1, [1024, 2048], [50, 400], 4.0)]
    path = tmp_path / "curves.png"
    assert learning.plot_frameworks({"corral": ours, "sb3": theirs}, "train/return_mean", path, "t")
    assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"


def test_corral_never_imports_stable_baselines3() -> None:
    for path in (ROOT / "corral").rglob("*.py"):
        text = path.read_text()
        assert "stable_baselines3" not in text and "sb3_contrib" not in text, path
    code = ("import sys, corral; from corral.framework.plugins import get_registry; get_registry(); "
            "import corral.plugins.algos.trpo, corral.plugins.algos.ppo; "
            "print(sorted(m for m in sys.modules if m.startswith(('stable_baselines3', 'sb3_contrib'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------ the SB3 mapping
def composed(*overrides: str) -> dict[str, Any]:
    """The resolved config ``python train.py <overrides>`` runs, as plain containers."""
    from omegaconf import OmegaConf

    from corral.testing.plugin import compose_config

    return OmegaConf.to_container(compose_config(list(overrides)), resolve=True)  # type: ignore[return-value]


def test_ppo_maps_to_sb3_ppo_with_the_same_settings(runner: ModuleType) -> None:
    cfg = composed("experiment=ppo_cartpole", "worker=vec", "worker.n_envs=4", "algo.clip_range=0.1")
    spec = runner.sb3_spec(cfg)
    assert spec.sb3_class == ("stable_baselines3", "PPO")
    assert (spec.env_id, spec.n_envs, spec.total_steps, spec.row_every) == ("CartPole-v1", 4, 100_000, 2048)
    kw = spec.kwargs
    assert kw["n_steps"] == 512 and kw["batch_size"] == 64 and kw["n_epochs"] == 10
    assert kw["clip_range"] == 0.1 and kw["learning_rate"] == 3e-4 and kw["gae_lambda"] == 0.95
    assert kw["policy_kwargs"]["net_arch"] == {"pi": [64, 64], "vf": [64, 64]}
    assert (spec.eval_every, spec.eval_episodes) == (5, 10)


def test_trpo_maps_to_sb3_contrib_trpo(runner: ModuleType) -> None:
    spec = runner.sb3_spec(composed("experiment=trpo_cartpole"))
    assert spec.sb3_class == ("sb3_contrib", "TRPO")
    kw = spec.kwargs
    assert kw["target_kl"] == 0.01 and kw["cg_max_steps"] == 20 and kw["n_critic_updates"] == 20
    assert kw["line_search_shrinking_factor"] == 0.8 and kw["learning_rate"] == 1e-3 and kw["n_steps"] == 1024


def test_off_policy_presets_map_with_the_same_update_schedule(runner: ModuleType) -> None:
    sac = runner.sb3_spec(composed("experiment=sac_pendulum"))
    assert sac.sb3_class == ("stable_baselines3", "SAC") and sac.env_id == "Pendulum-v1"
    assert sac.kwargs["train_freq"] == (100, "step") and sac.kwargs["gradient_steps"] == 100  # one epoch, utd 1
    assert sac.kwargs["ent_coef"] == "auto_1"
    # corral trains after its first epoch of 100 steps; SB3 trains once num_timesteps > learning_starts
    assert sac.kwargs["learning_starts"] == 99
    dqn = runner.sb3_spec(composed("experiment=dqn_cartpole"))
    assert dqn.kwargs["train_freq"] == (256, "step") and dqn.kwargs["gradient_steps"] == 128
    assert dqn.kwargs["exploration_fraction"] == pytest.approx(8000 / 100_000)
    assert dqn.kwargs["learning_starts"] == 1023  # min_buffer_size 1024: corral trains after its 4th epoch of 256
    assert any("double" in line for line in dqn.unmapped), "what SB3 cannot match is reported"


def test_sb3_starts_training_after_the_same_first_epoch_as_corral(runner: ModuleType, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With the mapped ``learning_starts``, real SB3 runs its first gradient steps at the end of the same
    epoch as corral (``sac_pendulum``: after the first 100 steps), not one rollout later."""
    pytest.importorskip("stable_baselines3")
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path))  # SB3's default logger makes a /tmp/SB3-<time> directory
    from stable_baselines3 import SAC

    spec = runner.sb3_spec(composed("experiment=sac_pendulum"))
    kwargs = {**spec.kwargs, "gradient_steps": 2, "batch_size": 16,
              "policy_kwargs": {**spec.kwargs["policy_kwargs"], "net_arch": {"pi": [8], "qf": [8]}}}
    model = SAC("MlpPolicy", spec.env_id, seed=1, device="cpu", **kwargs)
    model.learn(total_timesteps=100)  # corral's first epoch: random actions, then its first update
    assert model._n_updates == 2


@pytest.mark.parametrize("overrides", [["experiment=ppo_cartpole"], ["experiment=trpo_cartpole"],
                                       ["experiment=ppo_halfcheetah"], ["experiment=sac_pendulum"],
                                       ["experiment=dqn_cartpole"]])
def test_sb3_accepts_the_mapped_arguments(runner: ModuleType, overrides: list[str]) -> None:
    """SB3 builds its model from the mapping (real classes; an unknown keyword would raise)."""
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("sb3_contrib")
    if "ppo_halfcheetah" in overrides[0]:
        pytest.importorskip("mujoco")
    import importlib

    from stable_baselines3.common.env_util import make_vec_env

    spec = runner.sb3_spec(composed(*overrides))
    module, cls = spec.sb3_class
    env = make_vec_env(lambda: runner.make_env(spec), n_envs=spec.n_envs, seed=1)
    try:
        model = getattr(importlib.import_module(module), cls)("MlpPolicy", env, seed=1, device="cpu", **spec.kwargs)
        if spec.algo in runner.ON_POLICY:
            assert model.n_steps * spec.n_envs == spec.row_every
        assert spec.env_id in str(env.envs[0].unwrapped.spec.id)
    finally:
        env.close()


# ------------------------------------------------------------------------------ real tiny runs
@pytest.fixture
def run_name() -> Iterator[str]:
    """A unique results name; its runs under experiments/runs/ are removed afterwards."""
    name = f"test_learning_{uuid.uuid4().hex[:8]}"
    yield name
    shutil.rmtree(ROOT / "experiments" / "runs" / name, ignore_errors=True)


def learning_py(*args: str) -> subprocess.CompletedProcess:
    """``python experiments/learning.py ...`` as a user runs it."""
    cmd = [sys.executable, str(ROOT / "experiments" / "learning.py"), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=280)


def test_learning_py_writes_table_and_plot(run_name: str, tmp_path: Path) -> None:
    proc = learning_py("--name", run_name, "--seeds", "1", "--threshold", "475", "--results-dir", str(tmp_path),
                       "--", *TINY)
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / f"{run_name}.md").read_text()
    assert "| seed | reached_at_steps |" in md and "framework" not in md
    assert re.search(r"^\| 1 \| not reached \| [0-9.,]+ \|", md, re.M)
    if importlib.util.find_spec("matplotlib"):
        assert (tmp_path / f"{run_name}.png").is_file()


def test_learning_py_run_again_under_its_name_replaces_its_runs(run_name: str, tmp_path: Path) -> None:
    """train.py refuses a run directory that holds a run; learning.py, run again under the same name,
    replaces its own earlier run of each seed and says so."""
    args = ("--name", run_name, "--seeds", "1", "--threshold", "475", "--results-dir", str(tmp_path), "--", *TINY)
    assert learning_py(*args).returncode == 0
    again = learning_py(*args)
    assert again.returncode == 0, again.stderr
    assert f"learning.py: replacing the earlier run {ROOT / 'experiments' / 'runs' / run_name / 'seed1'}" in again.stderr


def test_learning_py_with_peer_sb3_runs_both_and_compares(run_name: str, tmp_path: Path) -> None:
    pytest.importorskip("stable_baselines3")
    sb3_dirs = set(Path(tempfile.gettempdir()).glob("SB3-*"))  # SB3's default logger makes one per learn()
    proc = learning_py("--name", run_name, "--seeds", "1", "--threshold", "475", "--results-dir", str(tmp_path),
                       "--peer", "sb3", "--", *TINY)
    assert proc.returncode == 0, proc.stderr
    assert set(Path(tempfile.gettempdir()).glob("SB3-*")) == sb3_dirs, "the SB3 run left a directory in /tmp"
    md = (tmp_path / f"{run_name}.md").read_text()
    assert re.search(r"^\| corral \| 1 \|", md, re.M) and re.search(r"^\| sb3 \| 1 \|", md, re.M)
    assert "## corral vs sb3" in md and "ratio corral/sb3 = " in md
    assert "stable_baselines3.PPO(" in md  # the mapping is recorded with the results
    assert (tmp_path / f"{run_name}.png").is_file()
    runs = ROOT / "experiments" / "runs" / run_name
    rows = (runs / "sb3_seed1" / "progress.csv").read_text().splitlines()
    assert rows[0].split(",")[:2] == ["epoch", "env_steps"] and "eval/return_mean" in rows[0]
    assert len(rows) == 2 and rows[1].split(",")[1] == "2048"  # one row per 2,048-step rollout
