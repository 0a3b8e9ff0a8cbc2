"""Every declared range of every built-in plugin is checked before anything starts.

Each numeric and enumerated field of every built-in option declares what it accepts next to the
field (``metadata=check(...)``). For every such field, ``python train.py`` with a value outside
that range must exit with code 2 and one ``corral: error: <full field name> must be ...`` line,
without a traceback. The cases run through the real ``train.py`` entry, many in one interpreter
(``train_many.py``), so the whole matrix costs one start-up; the cases named in the issues also
run as separate ``python train.py`` processes.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest

from corral.framework.checks import Check, check_defaults, field_check, unchecked_fields
from corral.framework.plugins import get_registry

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "train.py"


def builtin_registrations() -> list[Any]:
    return [reg for reg in get_registry() if reg.source.distribution == "corral"]


def out_of_range(spec: Check, hint: Any) -> str | None:
    """An override value (as typed on the command line) that ``spec`` rejects (None for a bool field,
    whose ``check`` can only say when it applies)."""
    if hint is bool:
        return None
    if spec.choices is not None:
        return "not_a_choice"
    if spec.pattern is not None:  # a value the pattern does not match in full, as written on the command line
        for written, value in (("not-a-valid-value", "not-a-valid-value"), ("''", "")):
            if re.fullmatch(spec.pattern, value) is None:
                return written
        return None
    if spec.gt is not None:
        value: float = spec.gt
    elif spec.ge is not None:
        value = spec.ge - 1
    elif spec.lt is not None:
        value = spec.lt
    elif spec.le is not None:
        value = spec.le + 1
    else:
        return "nan" if spec.finite else None  # "any finite number"
    return str(int(value)) if float(value).is_integer() else repr(value)


def cases() -> list[tuple[str, list[str]]]:
    """(full field name as the error names it, overrides) for every declared field of every built-in option."""
    out = []
    for reg in builtin_registrations():
        if reg.config is None:
            continue
        hints = typing.get_type_hints(reg.config)
        for f in dataclasses.fields(reg.config):
            spec = field_check(f)
            bad = out_of_range(spec, hints[f.name]) if spec is not None else None
            if bad is None:
                continue
            is_list = typing.get_origin(hints[f.name]) is list
            value = f"[{bad}]" if is_list else bad
            path = f"{reg.path}.{f.name}"
            choose = f"logger=[{reg.name}]" if reg.kind == "logger" else f"{reg.kind}={reg.name}"
            out.append((path + ("[0]" if is_list else ""), [choose, f"{path}={value}"]))
    out.append(("seed", ["seed=-1"]))
    return out


CASES = cases()


def train_all(tmp: Path, cases: list[tuple[str, list[str]]], timeout: float) -> dict[str, dict[str, Any]]:
    """Every case's command line run through train.py, all in one interpreter (``train_many.py``);
    each case's name mapped to its exit code, stdout and stderr."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("train_many.py")), str(tmp / "out.json"), str(tmp / "runs")],
        input=json.dumps([overrides for _, overrides in cases]), capture_output=True, text=True, timeout=timeout,
        cwd=tmp,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads((tmp / "out.json").read_text())
    return {name: result for (name, _), result in zip(cases, got)}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every out-of-range case run through train.py."""
    return train_all(tmp_path_factory.mktemp("ranges"), CASES, timeout=900)


def test_the_matrix_covers_every_kind() -> None:
    kinds = {name.split(".")[0] for name, _ in CASES}
    assert {"trainer", "algo", "env", "policy", "sampler", "worker", "logger", "seed"} <= kinds
    assert len(CASES) > 120


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=[name for name, _ in CASES])
def test_out_of_range_value_is_named_before_anything_starts(
        name: str, overrides: list[str], results: dict[str, dict[str, Any]]) -> None:
    result = results[name]
    text = result["stderr"]
    assert result["code"] == 2, (overrides, result)
    assert f"corral: error: {name} must be " in text, (overrides, text)
    assert "Traceback" not in text, text


#: The command line that trains with each algorithm (and the PEARL worker), small.
ALGO_RUNS = {
    "ppo": [], "vpg": ["algo=vpg"], "trpo": ["algo=trpo"],
    "sac": ["experiment=sac_pendulum", "algo.min_buffer_size=50"],
    "dqn": ["experiment=dqn_cartpole", "algo.min_buffer_size=50"],
    "rl2_ppo": ["experiment=rl2_bandits", "algo.n_train_tasks=4", "algo.n_test_tasks=2"],
    "pearl": ["experiment=pearl_pointnav", "algo.n_train_tasks=4", "algo.n_test_tasks=2", "algo.meta_batch=2",
              "algo.batch_size=16", "algo.context_size=8", "algo.min_buffer_size=20", "algo.gradient_steps=2"],
}
SMALL_RUN = ["trainer.n_epochs=2", "trainer.batch_size=120", "trainer.eval_every=1", "trainer.eval_episodes=1",
             "trainer.progress=false", "logger=[csv]"]


def edge_cases() -> list[tuple[str, list[str]]]:
    """(override, command line) for every inclusive end of a declared range (``ge=0``, ``le=1``) of
    the algorithms', the trainer's and the PEARL worker's numeric fields, where the default sits
    elsewhere: a value the check accepts must also train."""
    out = []
    for reg in builtin_registrations():
        if reg.config is None or reg.kind not in ("algo", "trainer") and (reg.kind, reg.name) != ("worker", "pearl"):
            continue
        base = {"algo": ALGO_RUNS.get(reg.name, []), "trainer": [], "worker": ALGO_RUNS["pearl"]}[reg.kind]
        for f in dataclasses.fields(reg.config):
            spec = field_check(f)
            if spec is None or spec.choices is not None or f.default is dataclasses.MISSING:
                continue
            for edge in (spec.ge, spec.le):
                if edge is None or f.default is None or edge == f.default:
                    continue
                value = str(int(edge)) if float(edge).is_integer() and not isinstance(f.default, float) else repr(
                    float(edge))
                key = f"{reg.path}.{f.name}"
                rest = [o for o in [*base, *SMALL_RUN] if o.split("=", 1)[0] != key]
                choose = [] if reg.kind == "trainer" or base else [f"{reg.kind}={reg.name}"]
                out.append((f"{reg.kind}={reg.name} {key}={value}", [*choose, *rest, f"{key}={value}"]))
    return out


EDGES = edge_cases()


@pytest.fixture(scope="module")
def edge_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every edge case trained through train.py."""
    return train_all(tmp_path_factory.mktemp("edges"), EDGES, timeout=1200)


def test_the_edges_cover_every_algorithm() -> None:
    assert {name.split()[0] for name, _ in EDGES} >= {f"algo={a}" for a in ALGO_RUNS} | {"trainer=default"}
    assert len(EDGES) >= 60


@pytest.mark.parametrize(("name", "command"), EDGES, ids=[name for name, _ in EDGES])
def test_a_value_at_the_edge_of_its_range_trains_or_says_why_not(name: str, command: list[str],
                                                                edge_results: dict[str, dict[str, Any]]) -> None:
    """A value its own range accepts trains (``algo=vpg algo.vf_iters=0`` was an UnboundLocalError),
    or, where another setting rules it out (``algo.buffer_size=1`` below ``algo.min_buffer_size``),
    stops with one ``corral: error:`` line: never a traceback."""
    result = edge_results[name]
    err = result["stderr"]
    assert "Traceback" not in err, (command, err[-3000:])
    if result["code"] != 0:
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[")]
        assert result["code"] == 2 and len(lines) == 1 and lines[0].startswith("corral: error: "), (command, err[-3000:])


@pytest.mark.parametrize("reg", builtin_registrations(), ids=lambda reg: f"{reg.kind}={reg.name}")
def test_every_numeric_field_declares_its_range(reg: Any) -> None:
    if reg.config is not None:
        assert unchecked_fields(reg.config) == [], (
            f"{reg.kind}={reg.name}: declare the range of these fields with metadata=check(...)")


@pytest.mark.parametrize("reg", builtin_registrations(), ids=lambda reg: f"{reg.kind}={reg.name}")
def test_builtin_defaults_satisfy_their_own_ranges(reg: Any) -> None:
    if reg.config is not None:
        assert check_defaults(reg.config, reg.path, get_registry()) == []  # with the registry: applies_if keys too


# ------------------------------------------------------------------ the issues' cases, one process each
def train(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TRAIN), *overrides, f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("override", "message"), [
    ("algo.learning_rate=-1", "corral: error: algo.learning_rate must be > 0, got -1.0\n"),
    ("trainer.max_env_steps=0", "corral: error: trainer.max_env_steps must be >= 1, got 0\n"),
])
def test_issue_examples_in_their_own_process(tmp_path: Path, override: str, message: str) -> None:
    proc = train(tmp_path, override)
    assert proc.returncode == 2 and proc.stderr == message, proc.stderr
    assert not (tmp_path / "run" / "summary.json").exists()


def test_unknown_key_names_the_options_fields(tmp_path: Path) -> None:
    proc = train(tmp_path, "+algo.not_a_field=5")
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("corral: error: algo.not_a_field is not a setting: algo=ppo has no setting 'not_a_field'; "
                           "its settings are algo.discount, algo.gae_lambda, algo.learning_rate,"), line


def test_n_envs_on_the_default_worker_points_at_worker_vec(tmp_path: Path) -> None:
    proc = train(tmp_path, "worker.n_envs=abc")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("corral: error: worker.n_envs is not a setting: worker=default has no setting "
                                  "'n_envs' (it has no settings); worker=vec,"), proc.stderr
    assert "e.g. worker=vec worker.n_envs=..." in proc.stderr
