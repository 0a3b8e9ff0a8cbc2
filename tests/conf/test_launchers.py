"""``hydra/launcher=joblib`` end to end: a 6-job sweep, `corral results` / `corral plot` on it, and Ctrl-C.

The sweep is ``python train.py -m hydra/launcher=joblib seed=1,2,3 algo=vpg,ppo`` with a tiny budget,
run once for the module.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.testing.processes import default_signal_dispositions, stop_session

pytest.importorskip("hydra_plugins.hydra_joblib_launcher")

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"
#: A tiny run: two epochs of ~500 steps, one evaluation episode at the end, CSV only.
TINY = ["trainer.max_env_steps=1000", "trainer.batch_size=500", "trainer.eval_episodes=1", "logger=[csv]",
        "trainer.progress=false"]
N_JOBS = 2


def corral_command() -> list[str]:
    """The ``corral`` console script of this environment."""
    script = Path(sys.executable).parent / "corral"
    return [str(script)] if script.exists() else [sys.executable, "-m", "corral.framework.cli"]


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals that contain one instant."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda t: (t[0], t[1]))
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The 6-job joblib sweep's directory and process."""
    root = tmp_path_factory.mktemp("joblib_sweep")
    cmd = [sys.executable, str(TRAIN), "-m", "hydra/launcher=joblib", f"hydra.launcher.n_jobs={N_JOBS}",
           "seed=1,2,3", "algo=vpg,ppo", *TINY, f"hydra.sweep.dir={root / 'multirun'}"]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return root / "multirun", proc


def test_six_jobs_each_with_its_own_directory_and_summary(sweep) -> None:
    sweep_dir, proc = sweep
    jobs = sorted(p for p in sweep_dir.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0", "1", "2", "3", "4", "5"]
    summaries = [json.loads((p / "summary.json").read_text()) for p in jobs]
    assert all(s["status"] == "completed" for s in summaries)
    assert sorted((s["config"]["algo"]["name"], s["config"]["seed"]) for s in summaries) == sorted(
        (a, s) for a in ("vpg", "ppo") for s in (1, 2, 3))
    for s, p in zip(summaries, jobs):
        assert s["job"]["num"] == int(p.name) and s["job"]["mode"] == "MULTIRUN"
        assert f"algo={s['config']['algo']['name']}" in s["overrides"]
        assert s["env_steps"] >= 1000 and s["final_eval_return"] is not None
        assert s["best_eval_return"] >= s["final_eval_return"]
        assert (p / "progress.csv").read_text().count("\n") == 3  # header + two epochs
    # The jobs ran in joblib's worker processes, never more than n_jobs at once.
    assert "Joblib.Parallel(n_jobs=2" in proc.stdout + proc.stderr
    assert len({s["pid"] for s in summaries}) <= N_JOBS * 2
    assert max_overlap([(s["started_at"], s["finished_at"]) for s in summaries]) <= N_JOBS


def test_corral_results_groups_seeds(sweep) -> None:
    sweep_dir, _ = sweep
    proc = subprocess.run([*corral_command(), "results", str(sweep_dir)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("| algo | n | final eval return")
    rows = {line.split("|")[1].strip(): line for line in lines[2:]}
    assert set(rows) == {"vpg", "ppo"}
    for line in rows.values():
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == "3" and " ± " in cells[2]

    data = json.loads(subprocess.run([*corral_command(), "results", str(sweep_dir), "--json"], capture_output=True,
                                     text=True, timeout=120, check=True).stdout)
    assert data["keys"] == ["algo"] and [r["n"] for r in data["rows"]] == [3, 3]
    summaries = [json.loads((sweep_dir / str(i) / "summary.json").read_text()) for i in range(6)]
    for row in data["rows"]:
        values = [s["final_eval_return"] for s in summaries if s["config"]["algo"]["name"] == row["key"]["algo"]]
        assert row["final_eval_return"][0] == pytest.approx(sum(values) / 3)


def test_corral_plot_draws_two_lines_of_three_runs(sweep, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from corral.results.plot import plot_dir

    sweep_dir, _ = sweep
    out = tmp_path / "curves.png"
    proc = subprocess.run([*corral_command(), "plot", str(sweep_dir), "-o", str(out)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes()[:4] == b"\x89PNG" and "2 line(s)" in proc.stdout
    result = plot_dir(sweep_dir, out=tmp_path / "again.png")
    assert result.n_lines == 2
    assert sorted((c.label, c.n_runs) for c in result.curves) == [("algo=ppo", 3), ("algo=vpg", 3)]


def test_corral_results_of_a_directory_without_runs(tmp_path: Path) -> None:
    proc = subprocess.run([*corral_command(), "results", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no completed run" in proc.stderr


def _processes_in_group(pgid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def test_ctrl_c_stops_the_jobs_and_keeps_finished_summaries(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "multirun"
    # Jobs 0 and 2 finish quickly; jobs 1 and 3 would run for hours.
    cmd = [sys.executable, str(TRAIN), "-m", "hydra/launcher=joblib", f"hydra.launcher.n_jobs={N_JOBS}", "seed=1,2",
           "trainer.max_env_steps=1000,100000000", "trainer.n_epochs=1000000", *TINY[1:],
           f"hydra.sweep.dir={sweep_dir}"]
    # Its own session, so the SIGINT reaches the whole process group as Ctrl-C in a terminal does;
    # SIGINT at its default disposition even when this suite runs with it ignored (`cmd &` in a script).
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=default_signal_dispositions)
    try:
        deadline = time.monotonic() + 180
        finished = [sweep_dir / "0" / "summary.json", sweep_dir / "2" / "summary.json"]
        running = [sweep_dir / "1" / "progress.csv", sweep_dir / "3" / "progress.csv"]
        while not all(p.exists() for p in finished + running) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert all(p.exists() for p in finished), "the short jobs did not finish"
        assert all(p.exists() for p in running), "the long jobs did not start"
        assert proc.poll() is None, "the sweep ended before the long jobs were interrupted"
        before = {p: p.read_bytes() for p in finished}
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # failed or timed out: stop the sweep's processes, remove their /dev/shm entries
            stop_session(proc)
            proc.communicate(timeout=30)
    assert proc.returncode == 130, out[-3000:]
    assert "corral: interrupted" in out
    for path, data in before.items():
        assert path.read_bytes() == data
        assert json.loads(data)["status"] == "completed"
    for job in ("1", "3"):  # interrupted: no summary, or one that says so
        path = sweep_dir / job / "summary.json"
        assert not path.exists() or json.loads(path.read_text())["status"] == "interrupted"
    deadline = time.monotonic() + 30
    while _processes_in_group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_in_group(proc.pid) == [], "joblib worker processes were left behind"
    # `corral results` reports the finished jobs and lists the others as unfinished.
    table = subprocess.run([*corral_command(), "results", str(sweep_dir)], capture_output=True, text=True,
                           timeout=60, check=True).stdout
    # grouped by the swept key even though its other value's jobs never finished: jobs 0 and 2, seeds 1 and 2
    assert table.splitlines()[0].startswith("| trainer.max_env_steps | n |")
    assert table.splitlines()[2].startswith("| 1000                  | 2 |")
    skipped = [line for line in table.splitlines() if line.startswith("skipped:")]
    assert sorted(line.split()[1].rsplit("/", 1)[1] for line in skipped) == ["1", "3"]


@pytest.mark.parametrize(("setting", "line"), [
    ("hydra.launcher.n_jobs=0", "hydra.launcher.n_jobs must be a whole number other than 0 (the jobs run at once; -1: "
                                "one per CPU core), got 0"),  # joblib's traceback
    ("hydra.launcher.backend=threading", "hydra.launcher.backend=threading: the launcher always runs the jobs in loky "
                                         "worker processes, so it would not change how the sweep runs; leave it out"),
    ("hydra.launcher.prefer=threads", "hydra.launcher.prefer=threads: joblib ignores prefer when the backend is given "
                                      "(the launcher gives loky), so it would not change how the sweep runs; leave it "
                                      "out"),
    ("hydra.launcher.batch_size=0", "hydra.launcher.batch_size=0: the launcher runs each job in a worker process of "
                                    "its own, handed one job at a time, and does not use joblib's batch_size (how many "
                                    "jobs joblib hands a worker at once), so it would not change how the sweep runs; "
                                    "leave it out (hydra.launcher.n_jobs sets how many jobs run at once)"),
], ids=["n_jobs", "backend", "prefer", "batch_size"])
def test_a_setting_joblib_would_refuse_or_ignore_is_one_line_before_any_job(tmp_path: Path, setting: str,
                                                                            line: str) -> None:
    """``n_jobs=0`` was joblib's traceback once the sweep had started; ``backend=threading`` and
    ``prefer=threads`` ran the jobs in loky processes as if they were not there (the launcher sets the
    backend itself)."""
    proc = subprocess.run([sys.executable, str(TRAIN), "-m", "seed=1,2", "hydra/launcher=joblib", setting, *TINY,
                           f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [f"corral: error: {line}"], proc.stderr[-3000:]
    assert not (tmp_path / "sweep").exists()
