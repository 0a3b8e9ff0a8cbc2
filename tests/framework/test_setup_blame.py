"""The trainer's ``setup`` makes the run's environment again (to read its spaces): an environment that
raises there is named as the environment (``env=``), as when the first making of it fails, not as
the trainer; a trainer's own failure in ``setup`` is still the trainer's. End to end through
``python train.py`` with ``tests/conf/faulty_run_parts.py`` installed as a plugin distribution on a
temporary path (``trainer=brokensetup``; the environment ``corral_test/FlakyCartPole-v1``, which raises from
its ``fail_from``-th making in the process on).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from corral.testing.modules import import_path

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 180
#: ``tests/conf/faulty_run_parts.py`` (``tests`` is not an importable package).
parts = import_path(REPO / "tests" / "conf" / "faulty_run_parts.py", "faulty_run_parts")
output = parts.output


def train(tmp_path: Path, name: str, *overrides: str) -> subprocess.CompletedProcess[str]:
    """``python train.py`` on the flaky CartPole (each making logged to ``tmp_path/<name>.log``) with
    the faulty parts installed; run directory ``tmp_path/<name>``."""
    return parts.run_train(
        tmp_path, "env=gym", f"env.id={parts.ENV_ID}", f"+env.kwargs.log={tmp_path / name}.log", "trainer.n_epochs=1",
        "trainer.batch_size=100", "trainer.eval_every=0", "trainer.progress=false", "logger=[csv]", "sampler=local",
        *overrides, f"hydra.run.dir={tmp_path / name}", timeout=TIMEOUT)


def makings(tmp_path: Path, name: str) -> list[tuple[int, str]]:
    """``(number, maker)`` of each making of the environment in the run ``name``'s main process."""
    lines = [line.split() for line in (tmp_path / f"{name}.log").read_text().splitlines()]
    main = lines[0][0]
    return [(int(number), maker) for pid, number, maker in lines if pid == main]


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The run's only ``corral: error:`` line, its last line on stderr (exit status 2)."""
    assert proc.returncode == 2, output(proc)
    errors = [line for line in proc.stderr.splitlines() if "corral: error:" in line]
    assert len(errors) == 1 and proc.stderr.rstrip("\n").splitlines()[-1] == errors[0], output(proc)
    return errors[0]


def test_an_environment_that_raises_when_the_trainer_makes_it_again_is_named_as_the_environment(
        tmp_path: Path) -> None:
    """Before: ``corral: error: trainer=default (corral's own): building it raised RuntimeError: licence
    server refused simulator 3 (at .../corral/framework/env.py:...): a bug in corral; please report it``."""
    # A trainer whose setup fails on its own, after making its probe environment: the trainer's failure,
    # and the log of this run says which making of the environment the trainer's setup is.
    proc = train(tmp_path, "own", "trainer=brokensetup")
    line = error_line(proc)
    assert line.startswith("corral: error: trainer=brokensetup (plugin faultyparts from corral-faultyparts 0.1.0): "
                           "building it raised ValueError: setup of the broken trainer failed on purpose"), output(proc)
    assert "env=" not in line, output(proc)
    made = makings(tmp_path, "own")
    in_setup = [number for number, maker in made if maker == "setup@trainer.py"]
    assert in_setup and in_setup[0] > 1, made  # the run made (and closed) the environment before setup did
    nth = in_setup[0]

    # The environment is made fine nth - 1 times, and raises from its nth making on: the trainer's probe.
    proc = train(tmp_path, "env", f"+env.kwargs.fail_from={nth}")
    line = error_line(proc)
    assert makings(tmp_path, "env")[-1] == (nth, "setup@trainer.py"), makings(tmp_path, "env")
    log = f"{tmp_path / 'env'}.log"
    assert line == (f"corral: error: env=gym: making the environment with env.kwargs {{'log': '{log}', 'fail_from': "
                    f"{nth}}} again, for the trainer's setup, raised RuntimeError: licence server refused "
                    f"simulator {nth}; fix the environment or its settings; the traceback above shows where it "
                    "raised"), output(proc)
    assert "trainer=" not in line, output(proc)
    assert "faulty_run_parts.py" in proc.stderr and "Error executing job" not in proc.stderr, output(proc)
