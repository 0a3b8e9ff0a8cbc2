"""End to end: ``corral eval <run>`` and ``train.py trainer.resume=<run>`` of a run made with a third-party
plugin's option that is missing now (the plugin turned off with ``CORRAL_DISABLE_PLUGINS`` or left out
of ``CORRAL_PLUGINS``, or not installed at all) end in one line that names the run, the option, the
plugin and its package, and what to do.

The plugin is the real test distribution ``corral-testplugin`` (``tests/data/plugins``), pip-installed
into a temporary directory and made visible through ``PYTHONPATH`` (``tests/data/plugins/dists.py``);
the run uses its ``worker=testworker``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator, Sequence

import pytest

from corral.testing.modules import import_path

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "train.py"
TIMEOUT = 180
PLUGIN = "corral-testplugin"
MADE = "was made with worker=testworker, from the plugin testplugin (corral-testplugin 0.1.0)"


def _dists() -> ModuleType:
    return import_path(REPO / "tests" / "data" / "plugins" / "dists.py", "corral_tests_plugin_dists")


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The test plugin distributions, pip-installed (``--target``) into a temporary directory each."""
    return _dists().install(tmp_path_factory.mktemp("corral_plugin_dists"))


def run(args: Sequence[str], cwd: Path, sites: dict[str, Path], *visible: str, **env: str
        ) -> subprocess.CompletedProcess[str]:
    """A command as a user runs it, with only the ``visible`` test plugins installed (bounded)."""
    return subprocess.run(list(args), cwd=cwd, env=_dists().subprocess_env(sites, *visible, **env),
                          capture_output=True, text=True, timeout=TIMEOUT)


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"--- rc={proc.returncode}\n--- stdout:\n{proc.stdout}\n--- stderr:\n{proc.stderr}"


@pytest.fixture(scope="module")
def plugin_run(tmp_path_factory: pytest.TempPathFactory, sites: dict[str, Path]) -> Path:
    """A one-epoch run made with the plugin's ``worker=testworker``."""
    run_dir = tmp_path_factory.mktemp("missing_plugin") / "run"
    proc = run([sys.executable, str(TRAIN), "worker=testworker", "trainer.n_epochs=1", "trainer.batch_size=200",
                "trainer.eval_every=0", "trainer.progress=false", "logger=[csv]", f"hydra.run.dir={run_dir}"],
               run_dir.parent, sites, PLUGIN)
    assert proc.returncode == 0, output(proc)
    return run_dir


@pytest.fixture
def run_copy(plugin_run: Path, tmp_path: Path) -> Iterator[Path]:
    """A copy of :func:`plugin_run` that a test may resume (removed after it)."""
    copy = tmp_path / "run"
    shutil.copytree(plugin_run, copy)
    yield copy
    shutil.rmtree(copy, ignore_errors=True)


def files(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file of a run directory: its size and modification time."""
    return {str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def one_line(proc: subprocess.CompletedProcess[str], prefix: str) -> str:
    """The single line a failed command printed (exit status 2, as for any config error; no traceback)."""
    assert proc.returncode == 2, output(proc)
    assert "Traceback" not in proc.stderr and proc.stdout == "", output(proc)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), output(proc)
    return lines[0]


def evaluate(run_dir: Path, sites: dict[str, Path], *visible: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "corral.framework.cli", "eval", str(run_dir), "--episodes", "1"],
               run_dir.parent, sites, *visible, **env)


def resume(run_dir: Path, sites: dict[str, Path], *visible: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, str(TRAIN), f"trainer.resume={run_dir}", "trainer.n_epochs=2"], run_dir.parent,
               sites, *visible, **env)


def test_the_snapshot_records_which_plugin_provided_each_option(plugin_run: Path) -> None:
    from corral.framework.snapshot import SOURCES_KEY, load_snapshot
    from corral.framework.trainer import find_snapshot

    sources = load_snapshot(find_snapshot(plugin_run), objects=False)[SOURCES_KEY]
    assert sources["worker"] == {"kind": "worker", "option": "testworker", "plugin": "testplugin",
                                 "distribution": "corral-testplugin", "version": "0.1.0"}
    assert sources["env"]["distribution"] == "corral" and sources["logger.csv"]["option"] == "csv"


def test_eval_with_the_plugin_disabled(plugin_run: Path, sites: dict[str, Path]) -> None:
    proc = evaluate(plugin_run, sites, PLUGIN, CORRAL_DISABLE_PLUGINS="testplugin")
    assert one_line(proc, "corral eval: error: ") == (
        f"corral eval: error: the run in {plugin_run} {MADE}, which CORRAL_DISABLE_PLUGINS=testplugin disables "
        "here; unset CORRAL_DISABLE_PLUGINS (or take testplugin out of it) to evaluate the run")
    assert not (plugin_run / "eval.json").exists()


def test_eval_with_the_plugin_left_out_of_corral_plugins(plugin_run: Path, sites: dict[str, Path]) -> None:
    proc = evaluate(plugin_run, sites, PLUGIN, CORRAL_PLUGINS="corral-faultyplugin")  # not on the path: a warning first
    line = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, output(proc)
    assert line == (f"corral eval: error: the run in {plugin_run} {MADE}, which CORRAL_PLUGINS=corral-faultyplugin "
                    "leaves out here; add testplugin to CORRAL_PLUGINS (or unset it) to evaluate the run"), output(proc)


def test_eval_with_the_plugin_not_installed(plugin_run: Path, sites: dict[str, Path]) -> None:
    proc = evaluate(plugin_run, sites)  # no test plugin on the path: its entry point is not there
    assert one_line(proc, "corral eval: error: ") == (
        f"corral eval: error: the run in {plugin_run} {MADE}, which is not installed here; install it again "
        "(pip install corral-testplugin) to evaluate the run")


def test_resume_with_the_plugin_disabled(run_copy: Path, sites: dict[str, Path]) -> None:
    before = files(run_copy)
    proc = resume(run_copy, sites, PLUGIN, CORRAL_DISABLE_PLUGINS="corral-testplugin")
    assert one_line(proc, "corral: error: ") == (
        f"corral: error: the run in {run_copy} {MADE}, which CORRAL_DISABLE_PLUGINS=corral-testplugin disables "
        "here; unset CORRAL_DISABLE_PLUGINS (or take testplugin out of it) to resume the run")
    assert files(run_copy) == before  # nothing written: no resume record, no progress row, no snapshot


def test_resume_with_the_plugin_not_installed(run_copy: Path, sites: dict[str, Path]) -> None:
    before = files(run_copy)
    proc = resume(run_copy, sites)
    assert one_line(proc, "corral: error: ") == (
        f"corral: error: the run in {run_copy} {MADE}, which is not installed here; install it again "
        "(pip install corral-testplugin) to resume the run")
    assert files(run_copy) == before


def test_a_run_without_the_record_names_the_disabled_plugins(run_copy: Path, sites: dict[str, Path]) -> None:
    """A snapshot written before corral recorded where its options came from: the line names the
    plugins the variable turns off, since one of them may be the run's."""
    import torch

    from corral.framework.snapshot import SOURCES_KEY
    from corral.framework.trainer import find_snapshot

    snapshot = find_snapshot(run_copy)
    state = torch.load(snapshot, weights_only=False)  # the file this test's own run wrote
    del state[SOURCES_KEY]
    torch.save(state, snapshot)
    proc = evaluate(run_copy, sites, PLUGIN, CORRAL_DISABLE_PLUGINS="testplugin")
    assert one_line(proc, "corral eval: error: ") == (
        f"corral eval: error: the run in {run_copy} was made with worker=testworker, which no plugin loaded here "
        "registers (available: default, fragment, pearl, rl2, vec, vector), and CORRAL_DISABLE_PLUGINS=testplugin "
        "disables the installed plugin testplugin (corral-testplugin 0.1.0); if one of them provides "
        "worker=testworker, let it load to evaluate the run")
    proc = resume(run_copy, sites)
    assert one_line(proc, "corral: error: ") == (
        f"corral: error: the run in {run_copy} was made with worker=testworker, which no installed plugin registers "
        "(available: default, fragment, pearl, rl2, vec, vector); install the plugin package that provides it to "
        "resume the run (the run does not record which; `corral plugins` lists what is installed)")


def test_a_plugin_that_failed_to_load_or_no_longer_has_the_option(
        sites: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The record names a plugin that is installed but failed to load here, or one whose installed
    version no longer registers the option: each its own line (real plugins, loaded in this process)."""
    from corral.framework.errors import ConfigError
    from corral.framework.resume import check_run_options

    for var in _dists().PLUGIN_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    cfg = {"worker": {"name": "gone"}}
    record = {"kind": "worker", "option": "gone", "version": "0.0.9"}
    with pytest.warns(Warning), _dists().visible(sites, "corral-brokenregister", PLUGIN):
        with pytest.raises(ConfigError) as failed:
            check_run_options(cfg, tmp_path, {"worker": {**record, "plugin": "brokenregister",
                                                         "distribution": "corral-brokenregister"}}, "evaluate")
        with pytest.raises(ConfigError) as changed:
            check_run_options(cfg, tmp_path, {"worker": {**record, "plugin": "testplugin",
                                                         "distribution": "corral-testplugin"}}, "resume")
    assert str(failed.value).startswith(
        f"the run in {tmp_path} was made with worker=gone, from the plugin brokenregister (corral-brokenregister "
        "0.0.9), which failed to load here (")
    assert str(failed.value).endswith(
        "); fix it, or install it again (pip install --force-reinstall corral-brokenregister) to evaluate the run")
    assert str(changed.value) == (
        f"the run in {tmp_path} was made with worker=gone, from the plugin testplugin (corral-testplugin 0.0.9), but "
        "corral-testplugin 0.1.0 installed here does not register it; install the version the run was made with "
        "(pip install corral-testplugin==0.0.9) to resume the run")
