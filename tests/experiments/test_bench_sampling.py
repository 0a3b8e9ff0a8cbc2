"""Smoke tests of experiments/bench_sampling.py: it runs, prints every row and writes its tables,
and leaves no process behind.

Timings are never asserted (the machine is shared); only that the benchmark completes and reports.
The main smoke test leaves the Ray rows out (``--no-ray``: Ray's start-up would dominate it); a
second test runs only the Ray rows and their local baselines.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from corral.testing.modules import import_path
from corral.testing.processes import cmdline, processes_with_environment

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "bench_sampling.py"
ENVS = ["CartPole-v1", "corral/CPUHeavyCartPole-v1"]
QUICK = ["--quick", "--budget", "0.02", "--batch-size", "64", "--calls", "2"]


def load_bench() -> ModuleType:
    """The benchmark module, loaded by path (``experiments`` is not a package)."""
    return import_path(SCRIPT, "corral_bench_sampling")


def marked_processes(marker: str) -> list[str]:
    """Running processes whose environment holds ``marker`` (inherited from the benchmark run)."""
    return [f"{pid}: {cmdline(pid)[:150]}"
            for pid in sorted(processes_with_environment(f"CORRAL_BENCH_TEST_MARKER={marker}"))]


def run_bench(tmp_path: Path, *args: str, timeout: float = 240) -> tuple[subprocess.CompletedProcess, str, str]:
    """Run the benchmark in a subprocess; return (process, written markdown, marker)."""
    out = tmp_path / "bench.md"
    marker = f"corral-bench-test-{uuid.uuid4().hex}"
    env = dict(os.environ, CORRAL_BENCH_TEST_MARKER=marker)
    cmd = [sys.executable, str(SCRIPT), *QUICK, *args, "--out", str(out)]
    try:
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        if sys.platform.startswith("linux"):  # nothing the run started may outlive it
            deadline = time.monotonic() + 15
            while (left := marked_processes(marker)) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert not left, f"processes left by the benchmark: {left}"
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, out.read_text(), marker


def table_lines(section: str) -> list[list[str]]:
    """The cells of the first markdown table of ``section`` (header and rule excluded)."""
    lines = ("\n" + section).split("\n\n| ", 1)[1].split("\n\n", 1)[0].splitlines()
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines[2:]]


def section_of(text: str, title: str) -> str:
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def check_rows(section: str, rows: list) -> None:
    """Every row in order, labelled, with a positive rate; ratios and CPU columns where expected."""
    bench = load_bench()
    assert bench.TABLE_HEADER in section
    lines = table_lines(section)
    assert len(lines) == len(rows), section
    keys = {row.key for row in rows}
    for row, cells in zip(rows, lines):
        assert cells[0] == row.method and cells[1] == str(row.n), cells
        assert "failed" not in cells[2], cells
        assert float(cells[2].replace(",", "")) > 0, cells
        if row.vs_local in keys:  # a parallel row: compared with its local baseline
            assert cells[4].endswith("x"), cells
        if row.kind == "gym_async" or (row.sampler not in (None, "local")):
            # CPU time summed over this process and the row's processes (Linux /proc), never one process's
            assert cells[7] == "n/a" or cells[7].endswith("†"), cells
            if sys.platform.startswith("linux"):
                assert cells[7].endswith("†"), cells


def test_quick_run_prints_every_row_and_writes_the_table(tmp_path: Path) -> None:
    proc, written, _ = run_bench(tmp_path, "--no-ray", "--envs", *ENVS, timeout=480)
    text = proc.stdout
    assert "cpu_count=" in text and "gymnasium" in text and "torch" in text
    assert "--quick" in text  # the exact command is printed
    assert "Ray runtime started" not in text  # --no-ray: no Ray runtime
    bench = load_bench()
    rows = [row for row in bench.default_rows() if row.sampler != "ray"]
    assert rows and len(rows) < len(bench.default_rows())
    assert any(row.sampler == "multiprocessing" for row in rows) and any(row.kind == "gym_async" for row in rows)
    assert written.startswith("# Sampling throughput") and "Command: `" in written and "Date: " in written
    for env_id in ENVS:
        section = section_of(written, env_id)
        check_rows(section, bench.rows_for(env_id, rows))
        assert "Speed targets" in section and "| multiprocessing 2 workers x vec(16) vs local vec(32) |" in section
        assert f"## {env_id}" in text  # and the same table went to stdout
        assert "Where one step of 32 environments goes" in section and "S / (E + P) = " in section
    # worker=vector rows (issue 20) where a backend has the environment: native CartPole, beside its floor
    cartpole = section_of(written, "CartPole-v1")
    assert "| corral local + vector(native, 256) |" in cartpole and "| floor: bare loop over the VectorEnv(native, 256)" in cartpole
    assert "worker=vector beside its floor (CartPole-v1)" in cartpole
    assert "| local + vector(native, 256) vs its bare loop | >= 0.8x |" in cartpole
    assert "vector" not in section_of(written, "corral/CPUHeavyCartPole-v1").split("Speed targets", 1)[0]
    costs = table_lines(section_of(written, "Fixed cost of one obtain_samples call"))
    labels = [spec.label for spec in bench.call_cost_specs() if spec.sampler != "ray"]
    assert [cells[0] for cells in costs] == labels
    for cells in costs:
        assert float(cells[2]) > 0 and float(cells[4]) > 0, cells
    heavy = section_of(written, bench.heavy_label("CartPole-v1", bench.HEAVY_HIDDEN))
    check_rows(heavy, [row for row in rows if row.key in bench.HEAVY_ROW_KEYS])
    assert "| alternating vs action_server, 2 workers x vec(16), 512x512 policy |" in heavy
    for section in (section_of(written, "CartPole-v1"), heavy):
        steps = table_lines(section.split("Action servers' synchronised step", 1)[1])
        labels = [cells[0] for cells in steps]
        assert {"corral action_server + vec(16) (2 workers)", "corral alternating + vec(16) (2 workers)"} <= set(labels)
        assert all(float(cells[3]) > 0 for cells in steps), steps
    assert "left after shutdown: none" in written


def test_ray_rows_share_one_runtime_and_leave_nothing_running(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    bench = load_bench()
    baselines = [bench.corral_key("local", "default"), bench.corral_key("local", "vec", 32)]
    proc, written, _ = run_bench(tmp_path, "--envs", "CartPole-v1", "--rows", "ray", *baselines)
    assert proc.stdout.count("Ray runtime started") == 1  # one runtime for every Ray row and the cost table
    # ... started only once every other row has been measured: none of them runs beside Ray's processes
    out = proc.stdout
    assert "(without Ray) ..." in out and out.rindex("(without Ray) ...") < out.index("Ray runtime started")
    assert out.index("Ray runtime started") < out.index("CartPole-v1 (Ray) ...")
    rows = bench.select(bench.default_rows(), ["ray", *baselines], no_ray=False)
    assert [row.sampler for row in rows].count("ray") == 2
    check_rows(section_of(written, "CartPole-v1"), rows)
    costs = table_lines(section_of(written, "Fixed cost of one obtain_samples call"))
    specs = bench.select(bench.call_cost_specs(), ["ray", *baselines], no_ray=False)
    assert [cells[0] for cells in costs] == [spec.label for spec in specs]
    assert [spec.sampler for spec in specs].count("ray") == 2
    assert "left after shutdown: none" in written


def test_rows_have_unique_keys_and_parallel_rows_a_local_baseline() -> None:
    bench = load_bench()
    rows = bench.default_rows()
    keys = [row.key for row in rows]
    assert len(set(keys)) == len(keys)
    for row in rows:
        if row.sampler in ("multiprocessing", "ray", "action_server", "alternating"):
            assert row.vs_local in keys, row
    for target in bench.default_targets():
        assert target.row in keys and target.base in keys, target
    assert bench.select(rows, None, no_ray=True) == [row for row in rows if row.sampler != "ray"]
    assert [row.key for row in bench.select(rows, ["gym_async"], no_ray=False)] == ["gym_async/2x16", "gym_async/32x1"]


def test_box_action_environments_run_every_vector_row(tmp_path: Path) -> None:
    """Continuous actions (Pendulum here, HalfCheetah where MuJoCo is installed) pass through the
    gymnasium vector rows, the nested AsyncVectorEnv included, and through the floor row."""
    bench = load_bench()
    keys = ["raw", "gym", "floor", bench.corral_key("local", "vec", 32)]
    _, written, _ = run_bench(tmp_path, "--no-ray", "--envs", "Pendulum-v1", "--heavy-envs", "--calls", "0",
                              "--rows", *keys)
    rows = bench.select(bench.default_rows(), keys, no_ray=True)
    assert {row.kind for row in rows} >= {"raw_random", "gym_sync", "gym_async", "floor"}
    check_rows(section_of(written, "Pendulum-v1"), rows)


def test_floor_row_is_compared_with_sync_vector_env_of_the_same_size() -> None:
    bench = load_bench()
    floor = [row for row in bench.default_rows() if row.kind == "floor"]
    assert len(floor) == 1 and floor[0].compare_n == 32
    assert any(row.kind == "gym_sync" and row.n == 32 for row in bench.default_rows())


def test_halfcheetah_is_measured_by_default_exactly_when_mujoco_is_installed() -> None:
    bench = load_bench()
    assert (bench.HALF_CHEETAH_ID in bench.DEFAULT_ENVS) == bench.MUJOCO_INSTALLED
    cheetah = [t for t in bench.default_targets() if t.env_id == bench.HALF_CHEETAH_ID and t not in bench.vector_targets()]
    heavy = [t for t in bench.default_targets() if t.env_id == bench.CPU_HEAVY_ID]
    assert [(t.row, t.base, t.minimum) for t in cheetah] == [(t.row, t.base, t.minimum) for t in heavy]


def _result(bench: ModuleType, kind: str, steps_per_s: float, key: str = "") -> object:
    spec = bench.RowSpec(kind, 32, lambda ctx: None, kind=kind, key=key)
    return bench.Result(spec, rates=[steps_per_s])


def test_step_parts_table_turns_rates_into_microseconds_and_bounds_the_ratio() -> None:
    """32 steps at 320,000 steps/s are 100 µs: E = 100, P = 25, S = 150 -> the bound is 1.20x."""
    bench = load_bench()
    results = [
        _result(bench, "gym_sync", 32 / 150e-6),
        _result(bench, "floor", 32 / 130e-6),
        _result(bench, "env_steps", 32 / 100e-6),
        _result(bench, "env_unwrapped", 32 / 90e-6),
        _result(bench, "policy_only", 32 / 25e-6),
        _result(bench, "corral", 32 / 140e-6, key=bench.corral_key("local", "vec", 32)),
    ]
    text = bench.step_parts_table(results)
    cells = {row[0]: row[1:] for row in table_lines("\n\n" + text)}
    assert cells["E: env.step calls"] == ["100.0", ""]
    assert cells["P: one policy.get_actions call (batch 32)"] == ["25.0", ""]
    assert cells["floor: minimal loop"] == ["130.0", "+5.0"]
    assert cells["gym SyncVectorEnv(32) + policy"] == ["150.0", "+25.0"]
    assert cells["corral local + vec(32)"] == ["140.0", "+15.0"]
    assert "leaves 115.4 µs" in text and "E + P alone take 125.0 µs" in text
    assert "S / (E + P) = 1.20x" in text and "S / (E_u + P) = 1.30x" in text
    assert "corral local + vec(32): 1.07x SyncVectorEnv(32)" in text
    # without one of the parts there is nothing to say
    assert bench.step_parts_table([r for r in results if r.spec.kind != "policy_only"]) == ""


def test_part_rows_step_every_environment_and_call_the_policy_alone() -> None:
    bench = load_bench()
    ctx = bench.BenchContext(env_id="CartPole-v1", seed=3, batch_size=64)
    wrapped = bench.EnvStepsRunner(ctx, 4)
    bare = bench.EnvStepsRunner(ctx, 4, unwrapped=True)
    policy = bench.PolicyOnlyRunner(ctx, 4)
    try:
        assert wrapped.limit is None and bare.limit == 500  # TimeLimit's own count, kept by hand when unwrapped
        assert all(env is not env.unwrapped for env in wrapped.targets)
        assert all(env is env.unwrapped for env in bare.targets)
        space = wrapped.envs[0].action_space
        assert all(len(row) == 4 and all(space.contains(a) for a in row) for row in wrapped.actions)
        # with a time limit of one step every step ends in a reset
        resets = []
        for env in bare.targets:
            env.reset = lambda env=env, **kw: resets.append(env) or type(env).reset(env, **kw)
        bare.limit = 1
        assert bare._unit() == bare.vec_steps * 4
        assert len(resets) == bare.vec_steps * 4 and bare.t == [0, 0, 0, 0]
        assert wrapped._unit() == wrapped.vec_steps * 4
        assert policy._unit() == policy.calls * 4
        assert all(batch.shape == (4, 4) and batch.dtype == np.float32 for batch in policy.batches)
    finally:
        wrapped.close()
        bare.close()


def test_vector_rows_only_where_their_backend_has_the_environment() -> None:
    bench = load_bench()
    rows = bench.vector_rows()
    native = [r for r in rows if "native" in r.key]
    assert native and all(r.envs == ("CartPole-v1",) for r in native)
    assert {r.key for r in native} >= {"local/vector-native/1x32", "bare/native/32", "local/vector-native/1x256",
                                       "local/vector-native/1x1024", "multiprocessing/vector-native/2x128"}
    # every CartPole size in the three modes: whole episodes, fragments, carried whole episodes
    for n in (32, 256, 1024):
        keys = {r.key: r for r in native}
        assert {f"local/vector-native-frag/1x{n}", f"local/vector-native-carry/1x{n}"} <= set(keys)
        assert keys[f"local/vector-native-carry/1x{n}"].method == f"corral local + vector(native, {n}) carried whole episodes"
    assert "multiprocessing/vector-native-carry/2x128" in {r.key for r in native}
    carry_targets = [t for t in bench.vector_targets() if "carried whole episodes" in t.label]
    assert {t.row for t in carry_targets} >= {"local/vector-native-carry/1x32", "local/vector-native-carry/1x256",
                                              "multiprocessing/vector-native-carry/2x128"}
    assert bench.rows_for("corral/CPUHeavyCartPole-v1", rows) == []
    pool = [r for r in rows if "envpool" in r.key]
    assert bool(pool) == bench.ENVPOOL_INSTALLED
    if pool:
        assert bench.HALF_CHEETAH_POOL_N == (16, 64)
        assert {r.key for r in bench.rows_for(bench.HALF_CHEETAH_ID, rows)} == {
            key for n in (16, 64) for key in (f"bare/envpool-t1/{n}", f"bare/envpool-t2/{n}",
                                              f"local/vector-envpool-t1/1x{n}", f"local/vector-envpool-t2/1x{n}")}
        threads_targets = [t for t in bench.vector_targets() if "2 threads vs 1 thread" in t.label]
        assert {(t.row, t.base) for t in threads_targets} == {
            pair for n in (16, 64) for pair in ((f"local/vector-envpool-t2/1x{n}", f"local/vector-envpool-t1/1x{n}"),
                                                (f"bare/envpool-t2/{n}", f"bare/envpool-t1/{n}"))}


def test_vector_batch_keeps_the_per_environment_share() -> None:
    bench = load_bench()
    ctx = bench.BenchContext(env_id="CartPole-v1", seed=1, batch_size=4096)
    assert bench.vector_batch(ctx, 32) == 4096 and bench.vector_batch(ctx, 256) == 256 * 128
    assert bench.vector_batch(ctx, 128, n_workers=2) == 256 * 128
