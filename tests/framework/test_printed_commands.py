"""Every override corral prints for the user to paste works when pasted into a POSIX shell.

A run directory may hold a space, a non-ASCII letter, a quote, ``$``, ``=``, ``,`` or a backslash:
each printed ``key=value`` must come through the shell (:func:`shlex.split`) and Hydra's override
grammar (and OmegaConf's interpolation) back to exactly that directory; a plain path stays as it
was. The end-to-end case interrupts a real ``train.py`` run and pastes its resume command into bash.
"""

from __future__ import annotations

import csv
import os
import random
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from corral.framework.precheck import check_no_hydra_sweep, check_output_dir, run_only_warnings
from corral.framework.resume import absolute_resume, finished_message, resume_arg
from corral.framework.run_lock import in_use_message
from corral.framework.shell_words import hydra_override, hydra_value, shell_override, value_of
from corral.framework.sweep_jobs import SweepPlan

ROOT = Path(__file__).resolve().parents[2]

NASTY = [
    "/tmp/runs ü/live", "/tmp/it's", '/tmp/say "hi"', "/tmp/a\\", "/tmp/a\\\\", "\\", '\\"', "/tmp/$HOME",
    "/tmp/${x}", "/tmp/\\${x}", "/tmp/a\\${oc.env:HOME}", "/tmp/$(touch x)", "/tmp/`x`", "/tmp/a=b", "/tmp/a,b",
    "/tmp/a:b", "/tmp/[1]", "/tmp/{a: 1}", "/tmp/f(x)", "~/x", "/tmp/*?", "/tmp/a\tb", "/tmp/a\nb", "", " ",
    " lead", "trail ", "1", "null", "true", "1.5", "nan", "ünï", "日本/実行", "/tmp/a;b", "/tmp/a|b&c", "'", '"',
    "#x", "%x", "@x", "!x", "/tmp/a'\"\\$", "/tmp/a b/' OR '1'='1", "-m", "--cfg",
]
PLAIN = ["/tmp/x/live", "outputs/2024-01-01/12-00-00", "multirun/a_b/c-rest2", "/tmp/x+y/run.1", "relative"]


def _hydra_reads(word: str) -> tuple[str, str]:
    """``(key, value)`` as Hydra's override parser and OmegaConf's interpolation give the config them."""
    override = OverridesParser.create().parse_override(word)
    value = override.value()
    assert isinstance(value, str), f"{word!r}: Hydra reads {value!r}, not a string"
    return override.get_key_element(), OmegaConf.create({"v": value}).v


def _pasted(text: str) -> list[str]:
    """The words a POSIX shell makes of ``text`` (``shlex.split``, which follows its quoting rules)."""
    return shlex.split(text)


def _round_trip(key: str, value: str) -> None:
    word = shell_override(key, value)
    words = _pasted(f"python train.py {word} seed=1")
    assert len(words) == 4 and words[-1] == "seed=1", f"{value!r} -> {word!r} -> {words!r}"
    assert _hydra_reads(words[2]) == (key, value), f"{value!r} -> {word!r}"
    assert value_of(words[2].split("=", 1)[1]) == value
    assert _hydra_reads(hydra_override(key, value)) == (key, value)


@pytest.mark.parametrize("value", NASTY + PLAIN)
def test_an_override_comes_back_through_the_shell_and_hydra_exactly(value: str) -> None:
    _round_trip("trainer.resume", value)
    _round_trip("hydra.sweep.dir", value)


def test_random_paths_come_back_exactly() -> None:
    chars = "ab/ .\\'\"$`{}[]()=,:;~!*?#%@&|<>\t\nü日-+_0"
    rng = random.Random(0)
    for _ in range(3000):
        _round_trip("trainer.resume", "".join(rng.choice(chars) for _ in range(rng.randint(0, 14))))


@pytest.mark.parametrize("value", PLAIN)
def test_a_plain_path_is_printed_as_it_is(value: str) -> None:
    assert hydra_value(value) == value
    assert shell_override("trainer.resume", value) == f"trainer.resume={value}"


def test_a_path_with_a_space_and_a_non_ascii_letter_is_quoted_for_hydra_and_the_shell() -> None:
    assert shell_override("trainer.resume", Path("/tmp/runs ü/live")) == "'trainer.resume=\"/tmp/runs ü/live\"'"


def test_value_of_leaves_what_is_not_one_string() -> None:
    assert [value_of(text) for text in ("a,b", "[1,2]", "1", "null", "${now:%H}", "'\\\\${x}'", "ü")] == [None] * 7
    assert value_of("'/tmp/a b'") == "/tmp/a b"


def _word_after(line: str, lead: str, end: str = "") -> str:
    """The one shell word of ``line`` between ``lead`` and ``end`` (the printed override, as a user
    selects it: the comma or parenthesis of the sentence after it left out)."""
    text = line.split(lead, 1)[1]
    (word,) = _pasted(text.split(end, 1)[0] if end else text)
    return word


@pytest.mark.parametrize("path", ["/tmp/runs ü/live", "/tmp/it's, $x = 1", "/tmp/plain"])
def test_the_run_lock_and_resume_messages_print_overrides_that_paste(path: str) -> None:
    line = in_use_message(path, "123")
    assert _hydra_reads(_word_after(line, "resume it with ", ", or branch")) == ("trainer.resume", path)
    assert _hydra_reads(_word_after(line, "new directory now: ", " hydra.run.dir=")) == ("trainer.resume", path)

    line = finished_message(path, "n_epochs=3", 3, 1200, branch=path + "/b")
    words = _pasted(line.split("e.g. ", 1)[1].split(" (and ", 1)[0])
    assert [_hydra_reads(w) for w in words[:2]] == [("trainer.resume", path), ("hydra.run.dir", path + "/b")]
    assert words[2:] == ["trainer.n_epochs=6"]


@pytest.mark.parametrize("path", ["/tmp/runs ü/live", "/tmp/it's, $x = 1"])
def test_precheck_suggestions_paste(path: str, tmp_path: Path) -> None:
    (warning,) = run_only_warnings([hydra_override("hydra.run.dir", path)])
    assert _hydra_reads(_word_after(warning, "; give ", " instead")) == ("hydra.sweep.dir", path)

    run = tmp_path / Path(path).name
    (run / "snapshots").mkdir(parents=True)
    with pytest.raises(Exception) as raised:
        check_output_dir([hydra_override("hydra.run.dir", run)], False, OmegaConf.create({"run": {"dir": str(run)}}))
    assert _hydra_reads(_word_after(str(raised.value), "continue it with ", ", or give")) == ("trainer.resume", str(run))

    space = "choice('a b',\"c\")"
    with pytest.raises(Exception) as raised:
        check_no_hydra_sweep([f"hydra.sweeper.params.algo.name={space}"])
    said = str(raised.value)
    assert _hydra_reads(_word_after(said[:-1], "(or quote it: ")) == ("hydra.sweeper.params.algo.name", space)
    assert _pasted(said.split("search space as ", 1)[1].split(" (or", 1)[0]) == [f"algo.name={space}"]


def test_a_relative_resume_is_made_absolute_as_one_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ["runs ü/live", "it's", 'a"b\\']:
        (item,) = absolute_resume([hydra_override("trainer.resume", name)])
        assert _hydra_reads(item) == ("trainer.resume", str(tmp_path / name))
        assert resume_arg([item]) == str(tmp_path / name)


def test_a_sweeps_rerun_commands_paste(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep ü, it's"
    plan = SweepPlan(keys=["seed"], items=[["seed=1", "seed=2", "seed=3"]], params=[], hydra=[])
    said = plan.commands(range(1, 3), "python train.py", sweep, tmp_path)
    command = re.fullmatch(r"`(.*)`", said)
    assert command is not None, said
    words = _pasted(command.group(1))
    assert words[:4] == ["python", "train.py", "-m", "seed=2,3"]
    assert _hydra_reads(words[4]) == ("hydra.sweep.dir", str(sweep.with_name(sweep.name + "-rest")))


def _default_signals() -> None:
    """In the child: SIGINT and SIGTERM as a terminal delivers them, whatever the test run ignores."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _rows(path: Path) -> int:
    with open(path, newline="") as f:
        return sum(1 for _ in csv.DictReader(f))


@pytest.mark.parametrize("name", ["runs ü", "runs ü, it's $HOME"])
def test_the_resume_command_of_an_interrupted_run_in_an_odd_directory_resumes_it(tmp_path: Path, name: str) -> None:
    """SIGTERM stops a run in ``<name>/live``; its line's ``resume with ...`` pasted after
    ``python train.py`` in bash continues that run in place, to more epochs."""
    from corral.testing import wait_for_path

    run = tmp_path / name / "live"
    small = ["trainer.batch_size=200", "trainer.eval_every=0", "trainer.max_env_steps=null", "trainer.progress=false",
             "seed=3"]
    cmd = [sys.executable, str(ROOT / "train.py"), f'hydra.run.dir="{run}"', *small, "trainer.n_epochs=1000"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_signals)
    try:
        wait_for_path(proc, run / "snapshots" / "latest", timeout=180)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 143, err[-2000:]
    (line,) = [line for line in err.splitlines() if "corral: interrupted by SIGTERM" in line]
    found = re.search(r"; resume with (.*?)(?:, which runs .*)?$", line)
    assert found is not None, line
    done = _rows(run / "progress.csv")

    pasted = f"{shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'train.py'))} {found.group(1)} " \
             f"trainer.n_epochs={done + 2}"
    resumed = subprocess.run(["bash", "-c", pasted], cwd=tmp_path, capture_output=True, text=True, timeout=240,
                             preexec_fn=_default_signals)
    assert resumed.returncode == 0, f"{line}\n{resumed.stderr[-2000:]}"
    assert "corral: resuming the run in" in resumed.stderr
    assert _rows(run / "progress.csv") == done + 2
    assert not (tmp_path / "outputs").exists(), "the run continued in place, not in a new directory"


def _in_bash(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` pasted into bash in ``cwd``, with this interpreter's ``corral`` and ``python`` first on
    the PATH, run to its end (bounded)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PATH": path}, preexec_fn=_default_signals)


@pytest.mark.parametrize("batched", [False, True])
def test_a_failed_sweeps_corral_results_hint_in_an_odd_directory_lists_the_sweep(tmp_path: Path, batched: bool) -> None:
    """A sweep in ``my swéep's dir`` (relative, as typed) whose job 0 fails: the last line's
    ``corral results <dir>``, pasted into bash, lists that sweep (job 0 failed, job 1 completed). In
    batches of 2 (``hydra.sweeper.max_batch_size=2``: jobs 2-3 never start) its ``run them with `...```
    command, pasted too, runs jobs 2-3 alone into ``my swéep's dir-rest``."""
    name = "my swéep's dir"
    env = "env.id=corral.testing.faulty_envs:corral/RaisingCartPole-v1"
    small = ["trainer.n_epochs=1", "trainer.batch_size=200", "trainer.eval_every=0", "logger=[csv]"]
    swept = ["seed=1,2", "+env.kwargs.fail_at=30,1000000"] if batched else ["+env.kwargs.fail_at=30,1000000"]
    batches = ["hydra.sweeper.max_batch_size=2"] if batched else []
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", env, *swept, *small, *batches,
                           f'hydra.sweep.dir="{name}"'], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    last = proc.stderr.splitlines()[-1] if proc.stderr else ""
    assert proc.returncode == 1, proc.stderr[-3000:]
    found = re.search(r"\(`(corral results .*)` lists each one's status\)", last)
    assert found is not None and last.startswith("corral: job 0 ("), last
    listed = _in_bash(found.group(1), tmp_path)
    assert listed.returncode == 0, f"{last}\n{listed.stdout[-2000:]}\n{listed.stderr[-2000:]}"
    said = listed.stdout + listed.stderr
    assert f"skipped: {name}/0 (failed: " in said, f"{last}\n{said[-3000:]}"  # the sweep, as the line named it
    assert "| 1000000 " in said and "| 30 " not in said, f"{last}\n{said[-3000:]}"  # job 1's row, job 0 skipped
    if not batched:
        assert "; the sweep ran its other jobs (`corral results " in last, last
        return
    command = re.search(r"; run them with `python (\S+) (.*)`$", last)
    assert command is not None, last
    ran = _in_bash(f"{shlex.quote(sys.executable)} {shlex.quote(command.group(1))} {command.group(2)}", tmp_path)
    assert ran.returncode == 1, ran.stderr[-3000:]  # its job 0 is the old job 2, which fails again
    rest = tmp_path / f"{name}-rest"
    assert sorted(p.name for p in rest.iterdir() if p.is_dir()) == ["0", "1"], ran.stderr[-3000:]
    assert [yaml.safe_load((rest / n / ".hydra" / "overrides.yaml").read_text())[1:3] for n in ("0", "1")] == \
        [["seed=2", "+env.kwargs.fail_at=30"], ["seed=2", "+env.kwargs.fail_at=1000000"]], ran.stderr[-3000:]
