"""``hydra/sweeper=optuna`` values that were taken in silence, each refused in one line before any trial:

- a tag other than ``log`` (``tag(log10, ...)``, ``tag(LOG, ...)``) was dropped and the space searched
  linearly, and ``log`` on a choice or a stepped range was dropped too (``tag(log, range(1, 10))``, an
  int range stepping by 1, is searched on a log scale);
- ``direction=[maximize,minimize]``: train.py returns one objective, so every trial trained to its
  end and then failed;
- a misspelt setting added with ``+`` (``+hydra.sweeper.n_trial=5``) was dropped.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna")
if int(optuna.__version__.split(".")[0]) < 3:
    pytest.skip("corral's Optuna sweeper needs optuna>=3", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
SEARCH = "algo.learning_rate=interval(0.0001,0.01)"
TAGS = "it knows the tag log only (a log-scale interval(a, b) or range(a, b)), e.g. tag(log, interval(1e-5, 1e-1))"


def refused(tmp_path: Path, *args: str) -> list[str]:
    """The stderr lines of a refused search (exit status 2, as the other refusals before a sweep)
    that ran no trial."""
    sweep_dir = tmp_path / "multirun"
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=1",
                           SEARCH, *args, "trainer.n_epochs=1", "trainer.batch_size=500", "trainer.eval_episodes=1",
                           "trainer.progress=false", f"hydra.sweep.dir={sweep_dir}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    assert not sweep_dir.exists()  # no trial ran
    return proc.stderr.strip().splitlines()


@pytest.mark.parametrize(("space", "why"), [
    ("tag(log10, interval(1e-5, 1e-1))", f"the optuna sweeper knows no tag log10: {TAGS}"),
    ("tag(LOG, interval(1e-5, 1e-1))", f"the optuna sweeper knows no tag LOG: {TAGS}"),
    ("tag(log, choice(0.001, 0.01))", "tag(log, ...) has no meaning for a choice (Optuna picks among the choices as "
                                      "given); use tag(log, interval(a, b)) or drop the tag"),
])
def test_a_tag_the_sweeper_would_drop_is_one_line(tmp_path: Path, space: str, why: str) -> None:
    lines = refused(tmp_path, f"algo.learning_rate={space}")
    assert lines == [f"corral: error: algo.learning_rate={space}: {why}"]


def test_a_log_scale_range_is_searched_on_a_log_scale() -> None:
    from hydra_plugins.corral_optuna_sweeper.optuna_sweeper import search_space

    space, _ = search_space(None, ["algo.n_epochs=tag(log, range(1, 10))"])
    assert space["algo.n_epochs"] == optuna.distributions.IntDistribution(1, 9, log=True)


def test_a_stepped_log_scale_range_is_one_line(tmp_path: Path) -> None:
    lines = refused(tmp_path, "algo.n_epochs=tag(log, range(1, 10, 2))")
    assert lines == ["corral: error: algo.n_epochs=tag(log, range(1, 10, 2)): a log-scale range steps by 1 (Optuna's "
                     "log-scale ints do), got step 2; use tag(log, range(1, 10)) or drop the tag"]


def test_several_directions_are_one_line_before_any_trial(tmp_path: Path) -> None:
    lines = refused(tmp_path, "hydra.sweeper.direction=[maximize,minimize]")
    assert lines == ["corral: error: hydra.sweeper.direction=[maximize,minimize]: corral's train.py reports one "
                     "objective, the run's final evaluation return (eval/return_mean), so Optuna would fail each trial "
                     "once it has trained; give one direction: maximize (or minimize)"]


def test_a_misspelt_added_setting_is_one_line(tmp_path: Path) -> None:
    lines = refused(tmp_path, "+hydra.sweeper.n_trial=5")
    assert lines == ["corral: error: hydra.sweeper.n_trial: the optuna sweeper has no such setting; did you mean "
                     "hydra.sweeper.n_trials? (its settings: direction, study_name, storage, n_trials, n_jobs, sampler, "
                     "pruner, prune_on, params; nothing would read it)"]
