"""Snapshots are data, not code (issue 19 section 8): the data part loads with weights_only=True, state
only pickle can hold is a separate part loaded only when trusted, and a crafted snapshot is refused
by resume and by ``corral eval`` without running anything."""

from __future__ import annotations

import collections
import dataclasses
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from corral.framework.errors import SnapshotError
from corral.framework.snapshot import (
    load_snapshot,
    objects_path,
    register_snapshot_dataclass,
    remove_snapshot,
    save_snapshot,
)

ROOT = Path(__file__).resolve().parents[2]
TINY = ["trainer.n_epochs=2", "trainer.batch_size=200", "trainer.eval_every=0", "logger=[csv]",
        "trainer.progress=false"]


class Plain:
    """A custom object: only pickle can hold it."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plain) and other.value == self.value


class CreatesAFile:
    """Unpickling this creates the file ``path`` (what a malicious snapshot could do)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@register_snapshot_dataclass
@dataclasses.dataclass(frozen=True)
class Schedule:
    """A registered dataclass: stored as data."""

    indices: tuple
    extra: dict


def data_state() -> dict:
    """What corral itself stores: tensors, arrays of several dtypes, numpy scalars, RNG states."""
    rng = np.random.default_rng(3)
    return {
        "format": 1,
        "epoch": 4,
        "params": collections.OrderedDict(w=torch.randn(3, 2), b=torch.zeros(2)),
        "arrays": [np.arange(5).astype(dt) for dt in (np.float32, np.float64, np.int64, np.uint32, np.uint8, np.bool_)],
        "scalars": (np.float64(1.5), np.int64(-3), np.float32(2.25)),
        "generator": rng.bit_generator.state,
        "rng": {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
        "schedule": Schedule(indices=(3, 1, 2), extra={"context": np.ones(2)}),
        "config": "seed: 1\n",
    }


def assert_same(a, b) -> None:
    if isinstance(a, dict):
        assert type(a) is type(b) and a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, (np.ndarray, np.generic)):
        assert type(a) is type(b) and a.dtype == b.dtype and np.array_equal(a, b)
    elif dataclasses.is_dataclass(a):
        assert type(a) is type(b)
        assert_same(dataclasses.asdict(a), dataclasses.asdict(b))
    else:
        assert a == b


def test_corrals_own_state_is_data_and_round_trips_exactly(tmp_path: Path) -> None:
    path = tmp_path / "epoch_000004.pt"
    state = data_state()
    assert save_snapshot(state, path) == []
    assert not objects_path(path).exists()
    assert_same(load_snapshot(path), state)
    # The file itself is plain data: torch's weights-only loader reads it (with the numpy allow-list only).
    from corral.framework.snapshot import _safe_globals

    with _safe_globals():
        torch.load(path, weights_only=True)


def test_objects_go_to_a_separate_part_loaded_only_when_trusted(tmp_path: Path) -> None:
    path = tmp_path / "epoch_000001.pt"
    state = dict(data_state(), plugin={"thing": Plain(7), "ok": np.zeros(2)})
    where = save_snapshot(state, path)
    assert where == ["plugin.thing (test_snapshot.Plain)"]
    assert objects_path(path).name == "epoch_000001.objects.pkl" and objects_path(path).exists()
    with pytest.raises(SnapshotError, match="only pickle can hold in epoch_000001.objects.pkl .*plugin.thing.*"
                                            "trainer.trust_snapshot=true"):
        load_snapshot(path)
    # The data part alone (the config, the counters) needs no trust.
    assert load_snapshot(path, objects=False)["config"] == "seed: 1\n"
    assert_same(load_snapshot(path, trust=True), state)
    # A swapped objects part is refused even when trusted.
    objects_path(path).write_bytes(objects_path(path).read_bytes() + b"\0")
    with pytest.raises(SnapshotError, match="SHA-256"):
        load_snapshot(path, trust=True)
    remove_snapshot(path)
    assert not path.exists() and not objects_path(path).exists()


def test_a_crafted_data_part_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "epoch_000001.pt"
    torch.save(dict(data_state(), evil=CreatesAFile(str(marker))), path)
    with pytest.raises(SnapshotError, match="refusing to load snapshot .*not plain data.*trust_snapshot=true"):
        load_snapshot(path)
    assert not marker.exists()
    load_snapshot(path, trust=True)  # what trusting means: the file's code runs
    assert marker.exists()


def test_a_truncated_or_foreign_snapshot_file_is_named_as_such_with_the_others_beside_it(tmp_path: Path) -> None:
    for epoch in (1, 2):
        save_snapshot(data_state(), tmp_path / f"epoch_00000{epoch}.pt")
    last = tmp_path / "epoch_000002.pt"
    last.write_bytes(last.read_bytes()[:1000])  # cut short, as by a full disk or an interrupted copy
    for trust in (False, True):  # trusting a file does not make a cut one readable
        with pytest.raises(SnapshotError) as caught:
            load_snapshot(last, trust=trust)
        assert str(caught.value) == (
            f"cannot read snapshot {last}: it is not a whole snapshot file (1,000 bytes without the index a snapshot "
            "ends with: truncated, or another kind of file); the other snapshots beside it: epoch_000001.pt (give "
            "one of them as trainer.resume=<file> or to corral eval)")
    last.write_text("not a snapshot\n")  # not torch's format at all: no refusal to unpickle, no miniz error
    with pytest.raises(SnapshotError, match="it is not a whole snapshot file \\(15 bytes"):
        load_snapshot(last)
    assert load_snapshot(tmp_path / "epoch_000001.pt")["config"] == data_state()["config"]


def train(run: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "train.py"), *TINY, *overrides, f"hydra.run.dir={run}"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def corral_eval(run: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "corral.framework.cli", "eval", str(run), "--episodes", "1", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("part", ["data", "objects"])
def test_resume_and_eval_refuse_a_crafted_snapshot(tmp_path: Path, part: str) -> None:
    run = tmp_path / "run"
    proc = train(run)
    assert proc.returncode == 0, proc.stderr[-3000:]
    snapshot = run / "snapshots" / (run / "snapshots" / "latest").read_text().strip()
    assert not objects_path(snapshot).exists(), "a normal run's snapshot needs no objects part"
    state = load_snapshot(snapshot)
    marker = tmp_path / "created-by-unpickling"
    if part == "data":  # someone edits the snapshot file itself
        torch.save(dict(state, extra=CreatesAFile(str(marker))), snapshot)
    else:  # or writes an objects part and a manifest that points to it
        state["algo"]["extra"] = CreatesAFile(str(marker))
        save_snapshot(state, snapshot)
        assert objects_path(snapshot).exists()
    proc = train(tmp_path / "resumed", "trainer.n_epochs=3", f"trainer.resume={run}")
    err = proc.stderr
    assert proc.returncode == 2, err[-3000:]
    assert "corral: error:" in err and "trainer.trust_snapshot=true" in err and "Traceback" not in err, err[-3000:]
    assert not marker.exists(), "resume ran code from the snapshot"
    proc = corral_eval(run)
    assert proc.returncode == 2, (proc.stdout + proc.stderr)[-3000:]
    assert "corral eval: error:" in proc.stderr and "--trust" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists(), "corral eval ran code from the snapshot"


def test_normal_resume_is_bit_exact(tmp_path: Path) -> None:
    """Two epochs, then one more resumed from the snapshot, equal three epochs in one go."""
    straight, first = tmp_path / "straight", tmp_path / "first"
    assert train(straight, "trainer.n_epochs=3").returncode == 0
    assert train(first).returncode == 0
    proc = train(first, "trainer.n_epochs=3", f"trainer.resume={first}")
    assert proc.returncode == 0, proc.stderr[-3000:]

    def last(run: Path) -> dict:
        snapshots = run / "snapshots"
        return load_snapshot(snapshots / (snapshots / "latest").read_text().strip())

    a, b = last(straight), last(first)
    assert a["epoch"] == b["epoch"] == 3 and a["total_env_steps"] == b["total_env_steps"]
    assert_same(a["algo"], b["algo"])
    assert_same(a["sampler"], b["sampler"])

    def rows(run: Path) -> list[list[str]]:  # every column but the timings
        lines = [line.split(",") for line in (run / "progress.csv").read_text().splitlines()]
        keep = [i for i, name in enumerate(lines[0]) if not name.startswith("time/")]
        return [[line[i] for i in keep] for line in lines]

    assert rows(first) == rows(straight) and len(rows(first)) == 4
