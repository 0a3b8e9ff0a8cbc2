"""``corral results``, ``corral plot`` and ``corral plugins`` on what a user may give them: a file
instead of a directory, a directory that cannot be listed, a ``progress.csv`` that cannot be read,
cut short or holds a word where a number goes, empty option values, a path with a space, and a
``CORRAL_PLUGINS`` name that matches nothing under ``--check``. Each ends in one line, no traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from corral.framework.cli import main
from corral.results.summary import write_summary

pytest.importorskip("matplotlib")

HEADER = "epoch,env_steps,train/return_mean,eval/return_mean"
#: The user a child runs as when the tests run as root (root reads files whatever their mode).
NOBODY = 65534


def make_run(d: Path, seed: int, rows: list[tuple[int, float]], algo: str = "ppo") -> Path:
    """A run directory as ``train.py`` leaves it: ``.hydra/overrides.yaml``, ``progress.csv``, ``summary.json``."""
    overrides = [f"seed={seed}", f"algo={algo}"]
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (d / "progress.csv").write_text(HEADER + "\n" + "".join(f"{i},{x},{y},{y}\n" for i, (x, y) in enumerate(rows)))
    write_summary(d, {"status": "completed", "overrides": overrides, "job": {"num": seed},
                      "final_train_return": rows[-1][1], "final_eval_return": rows[-1][1], "env_steps": rows[-1][0]})
    return d


def sweep(root: Path, n: int = 3) -> Path:
    for seed in range(n):
        make_run(root / str(seed), seed, [(100, 10.0 + seed), (200, 20.0 + seed), (300, 30.0 + seed)])
    return root


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


@pytest.mark.parametrize("command", ["results", "plot"])
def test_a_file_given_instead_of_a_run_directory_is_named_with_the_directory_to_give(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    """Before: ``results`` said there was no completed run under the file, ``plot`` that it could not
    write ``<file>/learning_curves.png``."""
    run = make_run(tmp_path / "run", 1, [(100, 1.0), (200, 2.0)])
    summary = run / "summary.json"
    code, out, err = run_cli(capsys, command, str(summary))
    assert (code, out) == (2, [])
    assert err == [f"corral {command}: error: {summary} is a file, not a run or sweep directory; give the directory "
                   f"that holds it ({run})"]


def test_plot_names_each_run_whose_progress_csv_cannot_be_read_and_draws_the_others(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A word where a number goes, a row cut short (a copy or a write cut off), a binary file: each run
    is one ``skipped:`` line saying why; before, the first stopped the command with ``could not convert
    string to float: 'abc'`` or a codec error naming no file, and a cut row was drawn as a value."""
    root = sweep(tmp_path / "sweep", 5)
    (root / "0" / "progress.csv").write_text(f"{HEADER}\n0,100,abc,1.0\n1,200,2.0,2.0\n")
    cut = (root / "1" / "progress.csv").read_text()
    (root / "1" / "progress.csv").write_text(cut[:cut.rindex(",") + 2])  # ends "...,3" of 31.0: half a row
    short = (root / "3" / "progress.csv").read_text().splitlines()
    (root / "3" / "progress.csv").write_text("\n".join([*short[:2], "1,200", *short[3:]]) + "\n")
    binary = (root / "2" / "progress.csv").read_bytes()
    (root / "2" / "progress.csv").write_bytes(binary + b"\xff\xfe\n")
    code, out, err = run_cli(capsys, "plot", str(root), "--metric", "train/return_mean")
    assert (code, err) == (0, [])
    assert out == ["all runs: 1 run(s), final train/return_mean 34.0",
                   f"skipped: {root / '0'} (its progress.csv cannot be read: line 2: train/return_mean is 'abc', "
                   "not a number)",
                   f"skipped: {root / '1'} (its progress.csv cannot be read: its last line (line 4) has no line "
                   "end: a row cut short (a copy or a write cut off))",
                   f"skipped: {root / '2'} (its progress.csv cannot be read: not text (invalid start byte at byte "
                   f"{len(binary)}))",
                   f"skipped: {root / '3'} (its progress.csv cannot be read: line 3 has 2 fields, the header 4)",
                   f"wrote {root / 'learning_curves.png'} (1 line(s), train/return_mean vs environment steps)"]


def test_plot_with_no_readable_curve_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path / "run", 1, [(100, 1.0), (200, 2.0)])
    (run / "progress.csv").write_text(f"{HEADER}\n0,100,1.0,x\n")
    code, out, err = run_cli(capsys, "plot", str(run), "--metric", "eval/return_mean")
    assert (code, out) == (2, [])
    assert err == [f"corral plot: error: no curve of eval/return_mean under {run}: {run} (its progress.csv cannot be "
                   "read: line 2: eval/return_mean is 'x', not a number); repair or move the file"]


@pytest.mark.parametrize(("option", "message"), [
    ("-o=", "-o is empty; give it an image file (OUT.png) or a directory to write learning_curves.png in"),
    ("--metric=", "--metric is empty; give it a progress.csv column (train/return_mean, eval/return_mean, ...), or "
                  "leave it out for the default"),
])
def test_plot_takes_no_empty_option_value(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                          option: str, message: str) -> None:
    """Before: ``-o=`` wrote ./learning_curves.png, ``--metric=`` drew the default metric: both accepted
    and ignored."""
    root = sweep(tmp_path / "sweep")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, "plot", str(root), option)
    assert (code, out, err) == (2, [], [f"corral plot: error: {message}"])
    assert not list(tmp_path.glob("*.png")) and not (root / "learning_curves.png").exists()


def test_plot_quotes_a_path_with_a_space_in_the_command_it_suggests(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "my runs ü"
    (root / "0" / ".hydra").mkdir(parents=True)  # a job that has not finished
    code, out, err = run_cli(capsys, "plot", str(root))
    assert (code, out) == (2, [])
    assert err == [f"corral plot: error: no completed run (a directory with summary.json) under {root} (1 unfinished; "
                   f"`corral results '{root}'` lists them)"]


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can reach (pytest's tmp_path is private to its owner)."""
    d = Path(tempfile.mkdtemp(prefix="corral-results-shared-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        for p in [d, *d.rglob("*")]:
            if not p.is_symlink():
                p.chmod(0o755 if p.is_dir() else 0o644)
        shutil.rmtree(d)


def as_other_user(shared: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``corral <argv>`` in a child that file modes apply to: this user, or ``nobody`` when running as root."""
    home = shared / "home"
    home.mkdir(exist_ok=True, mode=0o777)
    home.chmod(0o777)
    env = {**os.environ, "HOME": str(home), "MPLCONFIGDIR": str(home)}
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv: file modes cannot be tested")
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return subprocess.run([*prefix, sys.executable, "-m", "corral.framework.cli", *argv], cwd=shared, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_directory_that_cannot_be_listed_is_named_not_left_out_in_silence(shared_dir: Path) -> None:
    """Before: the run inside vanished from the table (n=2, no line about it)."""
    root = sweep(shared_dir / "sweep")
    for p in [root, *root.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    (root / "2").chmod(0o000)
    proc = as_other_user(shared_dir, "results", "sweep")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[2].startswith("| all runs | 2 ")
    assert lines[3:] == ["skipped: sweep/2 (unreadable: cannot list it: Permission denied; a run in it is left out: "
                         "give read access to it)"]
    alone = as_other_user(shared_dir, "results", "sweep/2")
    assert (alone.returncode, alone.stdout.splitlines()) == (2, [lines[3]])
    assert alone.stderr.splitlines() == ["corral results: error: no completed run under sweep/2 (1 unreadable "
                                         "directory; listed above)"]


def test_plot_of_a_run_whose_progress_csv_cannot_be_opened_is_a_skipped_line(shared_dir: Path) -> None:
    """Before: a ``PermissionError`` traceback from ``read_curve``."""
    root = sweep(shared_dir / "sweep")
    for p in [root, *root.rglob("*")]:
        p.chmod(0o777 if p.is_dir() else 0o644)
    (root / "1" / "progress.csv").chmod(0o000)
    proc = as_other_user(shared_dir, "plot", "sweep", "-o", "home/curves.png")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.splitlines()[1:] == [
        "skipped: sweep/1 (its progress.csv cannot be read: Permission denied)",
        "wrote home/curves.png (1 line(s), eval/return_mean vs environment steps)"]


def test_plugins_check_fails_when_corral_plugins_names_nothing_installed(tmp_path: Path) -> None:
    """``CORRAL_PLUGINS=<a typo>``: the plugin meant is not loaded, so ``--check`` (a CI gate) exits 1;
    before, it exited 0 after the warning. ``--json`` carries the same message."""
    env = {**os.environ, "CORRAL_PLUGINS": "corral-nosuchplugin"}
    env.pop("CORRAL_DISABLE_PLUGINS", None)
    cmd = [sys.executable, "-m", "corral.framework.cli", "plugins"]
    checked = subprocess.run([*cmd, "--check"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert checked.returncode == 1, checked.stderr
    assert checked.stderr.splitlines()[0].startswith("corral: warning: CORRAL_PLUGINS names corral-nosuchplugin, but")
    listed = subprocess.run([*cmd, "--json"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0
    assert [m.split(",")[0] for m in json.loads(listed.stdout)["unknown_names"]] == [
        "CORRAL_PLUGINS names corral-nosuchplugin"]
    plain = subprocess.run([*cmd, "--check"], env={k: v for k, v in env.items() if k != "CORRAL_PLUGINS"},
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stdout[-2000:] + plain.stderr
