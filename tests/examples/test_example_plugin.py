"""examples/corral-plugin-example, installed for real: every option works from the command line,
the options disappear without it, and the example's own tests (the contract kit) pass.

The example is pip-installed offline (``--no-build-isolation --no-index --target``) into a
temporary directory, as ``tests/data/plugins/dists.py`` does for the test plugins, and made visible
to subprocesses through ``PYTHONPATH``: exactly what ``pip install`` produces, removed afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterator, Sequence

import pytest

from corral.testing.modules import import_path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "corral-plugin-example"
TRAIN = REPO / "train.py"
DIST = "corral-plugin-example"
TIMEOUT = 300
#: Two tiny epochs, no evaluation.
TINY = ["trainer.n_epochs=2", "trainer.batch_size=128", "trainer.eval_every=0"]


def _dists() -> ModuleType:
    """``tests/data/plugins/dists.py`` (its ``subprocess_env``), loaded by path."""
    return import_path(REPO / "tests" / "data" / "plugins" / "dists.py", "corral_tests_plugin_dists")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The example, pip-installed into its own ``--target`` directory (deleted with the temp dir)."""
    root = tmp_path_factory.mktemp("corral_plugin_example")
    src, target = root / "src", root / "site"
    # Build from a copy: setuptools writes build/ and *.egg-info/ into the source tree.
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache"))
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
           "PIP_NO_CACHE_DIR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(src)],
        env=env, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, f"pip install of the example failed:\n{proc.stdout}\n{proc.stderr}"
    entry_points = list(target.glob("*.dist-info/entry_points.txt"))
    assert entry_points and "[corral]" in entry_points[0].read_text()
    assert (target / "corral_plugin_example" / "conf" / "experiment" / "example_quick.yaml").exists()
    yield target
    shutil.rmtree(root, ignore_errors=True)


def run(args: Sequence[str], cwd: Path, site: Path | None, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a command with the example installed (``site``) or not (None); never hangs."""
    sites = {DIST: site} if site is not None else {}
    environment = _dists().subprocess_env(sites, *sites, PYTHONDONTWRITEBYTECODE="1", **env)
    return subprocess.run(list(args), cwd=cwd, env=environment, capture_output=True, text=True, timeout=TIMEOUT)


def train(tmp_path: Path, site: Path | None, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``python train.py <overrides>`` with its run directory in ``tmp_path/run``."""
    return run([sys.executable, str(TRAIN), *overrides, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path, site)


def output(proc: subprocess.CompletedProcess[str]) -> str:
    return f"--- rc={proc.returncode}\n--- stdout:\n{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-3000:]}"


@pytest.mark.parametrize(
    ("overrides", "chosen"),
    [
        (["worker=noisy_obs", "worker.noise_std=0.1", "worker.n_envs=2", "logger=[jsonl]"], {"worker": "noisy_obs"}),
        (["env=goal_chain", "env.n_states=5", "logger=[jsonl]"], {"env": "goal_chain"}),
        (["logger=[console,jsonl]"], {}),
        (["experiment=example_quick"], {"env": "goal_chain", "worker": "noisy_obs"}),
        (["algo=reinforce", "algo.vf_iters=5", "logger=[jsonl]"], {"algo": "reinforce"}),
    ],
    ids=["worker=noisy_obs", "env=goal_chain", "logger=jsonl", "experiment=example_quick", "algo=reinforce"],
)
def test_each_option_trains_from_the_command_line(
    tmp_path: Path, site: Path, overrides: list[str], chosen: dict[str, str]
) -> None:
    proc = train(tmp_path, site, *overrides, *TINY)
    assert proc.returncode == 0, output(proc)
    lines = [json.loads(line) for line in (tmp_path / "run" / "progress.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [0, 1], output(proc)
    assert all(line["env_steps"] >= 128 * (line["epoch"] + 1) for line in lines)
    assert all(isinstance(line["train/return_mean"], float) for line in lines)
    config = json.loads((tmp_path / "run" / "summary.json").read_text())["config"]
    for group, name in chosen.items():
        assert config[group]["name"] == name
    assert "jsonl" in config["logger"]
    if "console" in config["logger"]:
        assert "epoch    1" in proc.stdout, output(proc)
    if chosen.get("worker") == "noisy_obs" and "worker.noise_std=0.1" in overrides:
        assert config["worker"]["noise_std"] == 0.1 and config["worker"]["n_envs"] == 2


def test_without_the_example_its_options_are_absent(tmp_path: Path) -> None:
    proc = train(tmp_path, None, "worker=noisy_obs", *TINY)
    assert proc.returncode != 0, output(proc)
    assert "worker=noisy_obs: worker has no option 'noisy_obs'; choose one of " in proc.stderr, output(proc)
    available = proc.stderr.split("choose one of ", 1)[1].split(" (", 1)[0].split(", ")
    assert "vec" in available and "default" in available
    assert "noisy_obs" not in available
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "progress.jsonl").exists()

    listing = run([sys.executable, "-m", "corral.framework.cli", "plugins", "--json"], tmp_path, None)
    assert listing.returncode == 0, output(listing)
    assert DIST not in listing.stdout


def test_discovery_lists_the_example(tmp_path: Path, site: Path) -> None:
    listing = run([sys.executable, "-m", "corral.framework.cli", "plugins", "--json"], tmp_path, site)
    assert listing.returncode == 0, output(listing)
    data = json.loads(listing.stdout)
    mine = {(c["kind"], c["name"]): c for c in data["components"] if c["distribution"] == DIST}
    assert set(mine) == {("worker", "noisy_obs"), ("env", "goal_chain"), ("logger", "jsonl"), ("algo", "reinforce")}
    assert all(c["version"] == "0.1.0" and c["help"] for c in mine.values())
    fields = {f["name"]: f for f in mine[("worker", "noisy_obs")]["config"]}
    assert fields["noise_std"]["default"] == 0.05 and fields["noise_std"]["help"]
    assert fields["noise_std"]["accepts"] == ">= 0" and fields["noise_std"]["path"] == "worker.noise_std"

    check = run([sys.executable, "-m", "corral.framework.cli", "plugins", "--check"], tmp_path, site)
    assert check.returncode == 0, output(check)

    help_ = run([sys.executable, str(TRAIN), "--help"], tmp_path, site)
    assert help_.returncode == 0, output(help_)
    groups = help_.stdout.split("== Configuration groups ==", 1)[1].split("== Config ==", 1)[0]
    for line in ("worker: default, fragment, noisy_obs, vec", "experiment: example_quick"):
        assert any(row.startswith(line.split(":")[0] + ":") and all(o in row for o in line.split(": ")[1].split(", "))
                   for row in groups.splitlines()), groups

    disabled = run([sys.executable, "-m", "corral.framework.cli", "plugins", "--json"], tmp_path, site,
                   CORRAL_DISABLE_PLUGINS=DIST)
    assert disabled.returncode == 0 and DIST not in disabled.stdout


def test_the_examples_own_tests_pass(tmp_path: Path, site: Path) -> None:
    """The example's tests/ (corral's WorkerContract, fixtures, an end-to-end run) against the install."""
    proc = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")], tmp_path, site)
    assert proc.returncode == 0, output(proc)
    assert " passed" in proc.stdout and "failed" not in proc.stdout, output(proc)


def test_an_algorithm_that_needs_whole_episodes_refuses_fragments(tmp_path: Path, site: Path) -> None:
    """``accepts_fragments = False`` (REINFORCE's Monte-Carlo returns need whole episodes) is read by corral's
    composition check: one line naming both options and what to choose, before anything runs."""
    proc = train(tmp_path, site, "algo=reinforce", "worker=fragment", *TINY)
    assert proc.returncode == 2, output(proc)
    assert proc.stderr == ("corral: error: algo=reinforce needs whole episodes, but worker=fragment returns "
                           "fragments; choose worker=default or worker=vec\n"), output(proc)
    assert not (tmp_path / "run" / "progress.csv").exists()


def test_the_plugins_ranges_are_checked_like_corrals(tmp_path: Path, site: Path) -> None:
    """A third-party option gets corral's range checks and unknown-key errors for free."""
    proc = train(tmp_path, site, "algo=reinforce", "algo.learning_rate=-1", *TINY)
    assert proc.returncode == 2 and proc.stderr == "corral: error: algo.learning_rate must be > 0, got -1.0\n", output(proc)
    proc = train(tmp_path, site, "algo=reinforce", "+algo.vf_iter=5", *TINY)
    assert proc.returncode == 2, output(proc)
    assert "algo.vf_iter is not a setting: algo=reinforce has no setting 'vf_iter'" in proc.stderr
    assert "did you mean algo.vf_iters?" in proc.stderr
