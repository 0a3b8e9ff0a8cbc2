"""Other libraries' warnings in a run are one line each (``corral.framework.warning_lines``).

Before, a ``warnings.warn`` from an environment, gymnasium, torch or numpy came in Python's format:
``/path/file.py:25: UserWarning: message``, the message's further lines, then the source line that
warned. Now it is ``warning: <package> (<file in it>:<line>): UserWarning: <message>``; which
warnings are shown is still up to the filters (``-W``, ``PYTHONWARNINGS``).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from corral.framework.errors import warnings_as_lines
from corral.framework.warning_lines import format_warning_line, origin

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "train.py"
CONF = ROOT / "tests" / "conf"
#: A CartPole whose first reset warns (tests/conf/warning_env.py), one small epoch, in this process.
RUN = ["env=gym", "env.id=warning_env:corral_test/WarningCartPole-v1", "trainer.n_epochs=1", "trainer.batch_size=500",
       "trainer.eval_every=0", "logger=[csv]", "trainer.progress=false", "sampler=local"]


def warn_line() -> int:
    """The line of tests/conf/warning_env.py that warns."""
    (number,) = [n for n, text in enumerate((CONF / "warning_env.py").read_text().splitlines(), 1)
                 if "warnings.warn(MESSAGE" in text]
    return number


def train(tmp_path: Path, *overrides: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python train.py`` with tests/conf on ``PYTHONPATH`` (bounded)."""
    full_env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CONF), os.environ.get("PYTHONPATH")) if p)
    full_env.update(env)
    return subprocess.run([sys.executable, str(TRAIN), *RUN, *overrides, f"hydra.run.dir={tmp_path / 'run'}"],
                          cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=240)


def test_a_warning_in_a_run_is_one_line_with_its_origin_category_and_message(tmp_path: Path) -> None:
    proc = train(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    mine = [line for line in lines if "painted red" in line or "repaint it" in line or "warnings.warn(" in line]
    assert mine == [f"warning: warning_env (warning_env.py:{warn_line()}): UserWarning: test: the pole is "
                    "painted red repaint it before the next run"], proc.stderr[-3000:]


def test_the_filters_still_decide_which_warnings_are_shown(tmp_path: Path) -> None:
    proc = train(tmp_path, PYTHONWARNINGS="ignore::UserWarning")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "painted red" not in proc.stderr


def test_origin_names_the_package_and_the_file_in_it() -> None:
    import gymnasium

    registration = Path(gymnasium.__file__).parent / "envs" / "registration.py"
    assert origin(str(registration), 123) == "gymnasium (envs/registration.py:123)"
    assert origin(warnings.__file__, 7) == "warnings (warnings.py:7)"
    assert origin("<string>", 1) == "<string>:1"
    assert origin("sys", 1) == "sys:1"
    assert format_warning_line("two\n  lines\n", DeprecationWarning, "<string>", 3) == \
        "warning: <string>:3: DeprecationWarning: two lines"


def test_a_showwarning_someone_else_installed_still_shows_the_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    """``warnings.catch_warnings(record=True)`` (``pytest.warns``) still records them, and nothing is printed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with warnings_as_lines(io.StringIO()):
            warnings.warn("recorded", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["recorded"]
    assert capsys.readouterr().err == ""


def test_in_a_process_of_its_own_pythons_format_becomes_one_line_and_captured_warnings_stay_logged() -> None:
    code = """
import logging, sys, warnings
from corral.framework.errors import warnings_as_lines
with warnings_as_lines():
    warnings.warn("first\\nsecond", UserWarning)
logging.basicConfig(format="logged %(name)s %(message)s", stream=sys.stderr)
logging.captureWarnings(True)
with warnings_as_lines():
    warnings.warn("captured", RuntimeWarning)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == "warning: <string>:5: UserWarning: first second"
    assert lines[1].startswith("logged py.warnings <string>:9: RuntimeWarning: captured"), proc.stderr


@pytest.mark.parametrize("sampler", ["multiprocessing", "ray"])
def test_a_warning_in_a_samplers_worker_process_is_one_line_too(tmp_path: Path, sampler: str) -> None:
    """Each worker process (a Ray actor) makes the env and warns once: one line each, as in the job's
    process (Ray forwards an actor's lines with a ``(_RayWorker pid=...)`` prefix)."""
    if sampler == "ray":
        pytest.importorskip("ray")
    proc = train(tmp_path, f"sampler={sampler}", "sampler.n_workers=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    mine = [line for line in lines if "painted red" in line or "repaint it" in line or "warnings.warn(" in line]
    one_line = (f"warning: warning_env (warning_env.py:{warn_line()}): UserWarning: test: the pole is "
                "painted red repaint it before the next run")
    assert len(mine) >= 2 and all(line.endswith(one_line) for line in mine), proc.stderr[-3000:]
