"""``trainer.keep_best``: the snapshot of the best evaluation is written, named by ``snapshots/best``
and never pruned; ``snapshots/best`` (and ``latest``) go wherever a snapshot is asked for (``corral
eval``, ``trainer.resume``), and a branch keeps the best snapshot as of the epoch it resumes from.
Was: only the newest ``trainer.keep_snapshots`` snapshots stayed, so the policy of the best
evaluation was gone once three later epochs had been saved."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from corral.framework.errors import SnapshotError
from corral.framework.resume import copy_history, plan
from corral.framework.snapshot import load_snapshot
from corral.framework.trainer import find_snapshot
from corral.testing.modules import import_path

TINY = import_path(Path(__file__).resolve().parents[1] / "conf" / "tiny_runs.py", "tiny_runs")
train = TINY.train_evaluating
evaluations = TINY.eval_returns


def best_name(returns: list[float]) -> str:
    """The snapshot file of the first epoch with the highest return (epoch index i is saved as i + 1)."""
    return f"epoch_{returns.index(max(returns)) + 1:06d}.pt"


def test_the_best_evaluations_snapshot_is_kept_named_and_evaluated_again(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(run, "trainer.n_epochs=6", "trainer.keep_snapshots=1", "trainer.keep_best=true")
    returns = evaluations(run)
    best = best_name(returns)
    snapshots = run / "snapshots"
    assert (snapshots / "best").read_text().strip() == best
    assert (snapshots / "latest").read_text().strip() == "epoch_000006.pt"
    assert {p.name for p in snapshots.glob("epoch_*.pt")} == {best, "epoch_000006.pt"}  # keep_snapshots=1, and the best
    assert load_snapshot(snapshots / best)["best_snapshot"] == best
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_eval_return"] == max(returns) and summary["best_snapshot"] == str(snapshots / best)
    # snapshots/best is where a snapshot is asked for: corral eval repeats that evaluation's episodes
    assert find_snapshot(snapshots / "best") == snapshots / best
    done = subprocess.run([sys.executable, "-m", "corral.framework.cli", "eval", str(snapshots / "best"),
                           "--episodes", "2", "--json", "-o", ""], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert Path(result["snapshot"]).name == best and result["return_mean"] == max(returns), (result, returns)


def test_without_keep_best_nothing_changes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(run, "trainer.n_epochs=4", "trainer.keep_snapshots=1")
    assert {p.name for p in (run / "snapshots").iterdir()} == {"epoch_000004.pt", "latest"}
    assert json.loads((run / "summary.json").read_text())["best_snapshot"] is None


def test_keep_best_without_evaluation_is_one_warning(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = train(run, "trainer.n_epochs=2", "trainer.keep_best=true", "trainer.eval_every=0")
    warnings = [line for line in done.stderr.splitlines() if line.startswith("corral: warning:")]
    assert warnings == ["corral: warning: trainer.keep_best=true has no effect while trainer.eval_every=0: it applies "
                        "only with trainer.eval_every > 0; set that, or leave trainer.keep_best at its default (false)"]
    assert not (run / "snapshots" / "best").exists()


def test_the_final_evaluation_counts_and_a_branch_keeps_the_best_as_of_its_epoch(tmp_path: Path) -> None:
    """Evaluating every 2 epochs of 3, the run's last evaluation is the one after training (on epoch 3's
    snapshot); a branch from epoch 1's snapshot has epoch 1's as its best (its one evaluation)."""
    run = tmp_path / "run"
    train(run, "trainer.n_epochs=3", "trainer.eval_every=2", "trainer.eval_episodes=2", "trainer.keep_snapshots=0",
          "trainer.keep_best=true")
    evaluated = evaluations(run)
    assert len(evaluated) == 1  # epoch index 1 (the second epoch)
    final = json.loads((run / "summary.json").read_text())["final_eval_return"]
    expected = "epoch_000003.pt" if final > evaluated[0] else "epoch_000002.pt"
    assert (run / "snapshots" / "best").read_text().strip() == expected
    assert load_snapshot(run / "snapshots" / expected)["best_snapshot"] == expected

    branch = tmp_path / "branch"
    done = train(branch, f"trainer.resume={run / 'snapshots' / 'epoch_000002.pt'}", "trainer.n_epochs=3",
                 "trainer.eval_every=2")
    assert "corral: note: the best snapshot" not in done.stderr, done.stderr[-3000:]
    # the branch's best as of its epoch 2 is epoch 2's (its only evaluation), whatever the original's is now
    branch_best = (branch / "snapshots" / "best").read_text().strip()
    branch_final = json.loads((branch / "summary.json").read_text())["final_eval_return"]
    assert branch_best == ("epoch_000003.pt" if branch_final > evaluated[0] else "epoch_000002.pt")
    assert (branch / "snapshots" / branch_best).is_file()

    # a snapshot resumed without the run it came from: the best one its state names is not there, said once
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "epoch_000003.pt").write_bytes((run / "snapshots" / "epoch_000003.pt").read_bytes())
    done = train(tmp_path / "from_loose", f"trainer.resume={loose / 'epoch_000003.pt'}", "trainer.n_epochs=4",
                 "trainer.eval_every=2")
    notes = [line for line in done.stderr.splitlines() if line.startswith("corral: note: the best snapshot")]
    assert notes == [f"corral: note: the best snapshot as of the resumed epoch ({expected}) is not in "
                     f"{tmp_path / 'from_loose' / 'snapshots'} (a branch keeps it only while the original run's best "
                     f"came no later); this run's next evaluation above {max(evaluated[0], final):.2f} writes its best "
                     "snapshot"], done.stderr[-3000:]


def write_run(directory: Path, names: list[str], best: str) -> Path:
    """A snapshot directory with files of those names (their contents are not read here) and pointers."""
    snapshots = directory / "snapshots"
    snapshots.mkdir(parents=True)
    for name in names:
        (snapshots / name).write_bytes(b"x")
    (snapshots / "latest").write_text(names[-1] + "\n")
    (snapshots / "best").write_text(best + "\n")
    return snapshots


@pytest.mark.parametrize(("best", "copied"), [("epoch_000002.pt", True), ("epoch_000003.pt", True),
                                              ("epoch_000004.pt", False)])
def test_a_branch_copies_the_best_snapshot_only_when_it_is_no_later_than_its_own(tmp_path: Path, best: str,
                                                                                 copied: bool) -> None:
    snapshots = write_run(tmp_path / "run", ["epoch_000002.pt", "epoch_000003.pt", "epoch_000004.pt"], best)
    resume = plan(str(snapshots / "epoch_000003.pt"), tmp_path / "branch")
    copy_history(resume)
    branch = tmp_path / "branch" / "snapshots"
    assert (branch / "latest").read_text().strip() == "epoch_000003.pt"
    if copied:
        assert (branch / "best").read_text().strip() == best and (branch / best).is_file()
    else:  # the best as of epoch 3 is not known from the files: the trainer's restore says so, with its state
        assert not (branch / "best").exists() and not (branch / best).exists()


def test_a_pointer_that_names_a_missing_snapshot_is_one_line(tmp_path: Path) -> None:
    snapshots = write_run(tmp_path / "run", ["epoch_000002.pt"], "epoch_000001.pt")
    with pytest.raises(SnapshotError, match=r"best names epoch_000001.pt, which is not in .*snapshots; give a "
                                            r"snapshot file or the run directory"):
        find_snapshot(snapshots / "best")
    assert find_snapshot(snapshots / "latest") == snapshots / "epoch_000002.pt"
