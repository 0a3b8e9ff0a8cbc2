"""A third-party plugin's mistakes, end to end through ``python train.py``: each is one ``corral: error:``
line naming the plugin (no Python or Hydra traceback), exit status 2, and a run directory whose files
agree with its ``summary.json``.

The plugin is ``tests/data/plugins/corral-faultyplugin``, pip-installed like the other test
distributions (``tests/data/plugins/dists.py``); environment variables switch its mistakes on.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from corral import hookimpl
from corral.framework.errors import ComponentError, PluginHookError
from corral.framework.plugins import Registration, Source, component_error, get_plugin_manager
from corral.framework.trainer import Trainer, statistic_value
from corral.testing.modules import import_path

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "train.py"
TIMEOUT = 180
DIST = "corral-faultyplugin"
#: A tiny run: 200 steps an epoch, no evaluation.
SMALL = ["trainer.batch_size=200", "trainer.eval_every=0"]
PLUGIN = "plugin faultyplugin (corral-faultyplugin 0.3.0)"


def load_dists() -> ModuleType:
    """``tests/data/plugins/dists.py`` (as the fixtures of ``conftest.py`` load it)."""
    return import_path(REPO / "tests" / "data" / "plugins" / "dists.py", "corral_tests_plugin_dists")


def train(tmp_path: Path, sites: dict[str, Path], *overrides: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python train.py <overrides>`` with corral-faultyplugin installed, its run directory ``tmp_path/run``."""
    return subprocess.run(
        [sys.executable, str(TRAIN), *overrides, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path,
        env=load_dists().subprocess_env(sites, DIST, **env), capture_output=True, text=True, timeout=TIMEOUT)


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"--- rc={proc.returncode}\n--- stdout:\n{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-6000:]}"


def plugin_line(sites: dict[str, Path], text: str) -> str:
    """``<file>:<line>`` of the installed plugin's line that holds ``text``."""
    path = sites[DIST] / "corral_faultyplugin" / "plugin.py"
    number = next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)
    return f"{path}:{number}"


def assert_one_error_line(proc: subprocess.CompletedProcess[str], line: str) -> None:
    """Exit status 2; ``line`` is the last line of stderr and its only error line; no traceback."""
    assert proc.returncode == 2, output(proc)
    assert proc.stderr.rstrip("\n").splitlines()[-1] == line, output(proc)
    assert proc.stderr.count("corral: error:") == 1, output(proc)
    assert "Traceback" not in proc.stderr, output(proc)
    assert "Error executing job" not in proc.stderr, output(proc)
    assert "HYDRA_FULL_ERROR" not in proc.stderr, output(proc)


def progress_rows(run: Path) -> list[dict[str, str]]:
    path = run / "progress.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------- A: components that fail to build
@pytest.mark.parametrize(
    ("option", "kind", "raised", "marker"),
    [
        ("env=faultyenv", "env", "RuntimeError: env factory failed on purpose",
         'raise RuntimeError("env factory failed on purpose")'),
        ("sampler=typosampler", "sampler", "TypeError: Sampler.__init__() got an unexpected keyword argument 'chunk_sise'",
         "super().__init__(agents, envs, **kwargs)"),
    ],
    ids=["env-factory-raises", "sampler-config-typo"],
)
def test_a_plugin_component_that_raises_while_built_is_one_line_naming_the_plugin(
    tmp_path: Path, plugin_sites: dict[str, Path], option: str, kind: str, raised: str, marker: str
) -> None:
    """Before: Hydra's ``Error executing job``, ~25 traceback lines, exit status 1, nothing naming the plugin."""
    proc = train(tmp_path, plugin_sites, option, "trainer.n_epochs=1", *SMALL, "logger=[csv]")
    where = plugin_line(plugin_sites, marker)
    assert_one_error_line(proc, f"corral: error: {option} (plugin faultyplugin from corral-faultyplugin 0.3.0): "
                                f"building it raised {raised} (at {where}); fix the plugin, or choose another {kind}")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["status"], summary["epochs"]) == ("failed", 0), summary
    assert not progress_rows(tmp_path / "run")


def test_a_corral_component_that_raises_while_built_is_a_bug_in_corral() -> None:
    """One of corral's own options raising an exception of its own (not a corral error) is a bug in
    corral: the line says so and where it raised."""
    def factory(config: Any) -> Any:
        raise ValueError("boom")

    registration = Registration("sampler", "local", factory, None, "", Source("corral.plugins.samplers.local", "corral", "1.2.3"))
    try:
        factory(None)
    except ValueError as exc:
        error = component_error(registration, exc)
    assert isinstance(error, ComponentError)
    assert (error.kind, error.name, error.plugin) == ("sampler", "local", "corral.plugins.samplers.local")
    line = factory.__code__.co_firstlineno + 1
    assert str(error) == (f"sampler=local (corral's own): building it raised ValueError: boom (at {__file__}:{line}): "
                          "a bug in corral; please report it")


# ------------------------------------------------------------------- B: a statistic that is not a number
@pytest.mark.parametrize("loggers", ["[console,csv,tensorboard]", "[console,csv]"])
def test_a_hooks_statistic_that_is_not_a_number_stops_the_run_before_any_logger_writes_it(
    tmp_path: Path, plugin_sites: dict[str, Path], loggers: str
) -> None:
    """Before: TensorBoard's traceback after the CSV row was written (progress.csv one row ahead of
    summary.json's epochs), or, without TensorBoard, ``hello`` in a progress.csv column and exit 0."""
    proc = train(tmp_path, plugin_sites, "trainer.n_epochs=3", *SMALL, f"logger={loggers}",
                 CORRAL_FAULTYPLUGIN_BAD_STAT="1")
    assert_one_error_line(proc, (
        f"corral: error: {PLUGIN} set the statistic audit/str to 'hello' (type str) in corral_epoch_end: a statistic "
        "must be a number (int or float, numpy's too; not bool), so the run stopped before any logger wrote epoch 1, "
        "which is not part of the run; fix the plugin, or run without it: CORRAL_DISABLE_PLUGINS=faultyplugin"))
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["status"], summary["epochs"]) == ("failed", 1), summary
    rows = progress_rows(run)
    assert [row["epoch"] for row in rows] == ["0"], rows  # as many rows as the summary's epochs
    assert "audit/str" not in rows[0]
    assert sorted(p.name for p in (run / "snapshots").glob("epoch_*.pt")) == ["epoch_000001.pt"]
    assert (run / "snapshots" / "latest").read_text().strip() == "epoch_000001.pt"
    assert "corral: failed after 1 epoch | " in proc.stderr, output(proc)


def test_a_hooks_numpy_statistics_are_logged_as_numbers(tmp_path: Path, plugin_sites: dict[str, Path]) -> None:
    """numpy numbers are numbers: every logger gets them as Python's (W&B and MLflow keep only those),
    and so does the snapshot's record of the last epoch."""
    from corral.framework.snapshot import load_snapshot

    proc = train(tmp_path, plugin_sites, "trainer.n_epochs=2", *SMALL, "logger=[csv,tensorboard]",
                 CORRAL_FAULTYPLUGIN_NUMPY_STATS="1")
    assert proc.returncode == 0, output(proc)
    rows = progress_rows(tmp_path / "run")
    assert [(r["audit/np_float"], r["audit/np_int"]) for r in rows] == [("0.5", "0"), ("0.5", "1")], rows
    last = load_snapshot(tmp_path / "run" / "snapshots" / "epoch_000002.pt")["last_stats"]
    assert (last["audit/np_float"], last["audit/np_int"]) == (0.5, 1)
    assert (type(last["audit/np_float"]), type(last["audit/np_int"])) == (float, int)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1), (2.5, 2.5), (np.float32(0.5), 0.5), (np.int64(3), 3), (float("nan"), "nan"),
     ("1.0", None), (True, None), (np.bool_(True), None), (None, None), (np.zeros(2), None), ([1.0], None)],
)
def test_statistic_value(value: Any, expected: Any) -> None:
    got = statistic_value(value)
    if expected == "nan":
        assert isinstance(got, float) and np.isnan(got)
        return
    assert got == expected and type(got) is type(expected)


def test_the_plugin_that_set_the_statistic_is_named_among_several() -> None:
    """Each implementation is checked as it returns: the plugin named is the one that set the value,
    and a later implementation (say, Optuna's pruning) never sees it."""
    seen_by_second: list[Any] = []

    class Adds:
        @hookimpl
        def corral_epoch_end(self, stats: dict[str, Any]) -> None:
            stats["audit/tensor"] = np.array([1.0, 2.0])

    class Reads:
        @hookimpl
        def corral_epoch_end(self, stats: dict[str, Any]) -> None:
            seen_by_second.append(stats.get("audit/tensor"))

    manager = get_plugin_manager()
    manager.register_object(Reads(), Source("reads", "corral-reads", "1.0"))
    manager.register_object(Adds(), Source("adds", "corral-adds", "2.0"))  # registered last: called first
    trainer = Trainer(loggers=[], hooks=manager.hook)
    with pytest.raises(PluginHookError) as raised:
        trainer._epoch_end_hooks(4, {"epoch": 4, "env_steps": 100})
    assert str(raised.value) == (
        "plugin adds (corral-adds 2.0) set the statistic audit/tensor to array([1., 2.]) (type numpy.ndarray) in "
        "corral_epoch_end: a statistic must be a number (int or float, numpy's too; not bool), so the run stopped "
        "before any logger wrote epoch 4, which is not part of the run; fix the plugin, or run without it: "
        "CORRAL_DISABLE_PLUGINS=adds")
    assert seen_by_second == []


# ---------------------------------------------------------------------- C: a summary hook that raises
def test_a_summary_hook_that_raises_after_a_completed_run_says_the_run_completed(
    tmp_path: Path, plugin_sites: dict[str, Path]
) -> None:
    """Before: exit status 2 with only the plugin's line (and its traceback); the closing line
    ``corral: completed ...`` was never printed although summary.json says completed.

    Now: the closing line first, then one line saying the run completed, where its summary is, and
    which plugin failed; exit status 2 (the run's data is whole, what the plugin does with it is not)."""
    proc = train(tmp_path, plugin_sites, "trainer.n_epochs=1", *SMALL, "logger=[csv]",
                 CORRAL_FAULTYPLUGIN_SUMMARY_RAISES="1")
    run = tmp_path / "run"
    where = plugin_line(plugin_sites, 'raise RuntimeError("summary hook failed on purpose")')
    assert_one_error_line(proc, (
        f"corral: error: the run completed and its summary is {run / 'summary.json'}, but {PLUGIN} raised "
        f"RuntimeError: summary hook failed on purpose in corral_run_summary (at {where}); fix the plugin, or run "
        "without it: CORRAL_DISABLE_PLUGINS=faultyplugin"))
    lines = proc.stderr.rstrip("\n").splitlines()
    assert lines[-2].startswith("corral: completed (n_epochs=1 reached) after 1 epoch | "), output(proc)
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["status"], summary["epochs"]) == ("completed", 1), summary
    assert [row["epoch"] for row in progress_rows(run)] == ["0"]
