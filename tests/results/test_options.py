"""``corral results`` / ``corral plot`` options: ``--ignore`` with no keys, ``--only KEY=VAL``, legend
labels that fit the image, and options that were accepted and then ignored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from corral.framework.cli import main
from corral.results.summary import write_summary

ROOT = Path(__file__).resolve().parents[2]


def make_run(root: Path, num: int, overrides: list[str], final: float = 1.0) -> Path:
    """A completed run with a three-row ``progress.csv`` of ``train/return_mean``."""
    d = root / str(num)
    write_summary(d, {"status": "completed", "overrides": overrides, "job": {"num": num}, "env_steps": 300})
    (d / "progress.csv").write_text(f"epoch,env_steps,train/return_mean\n0,100,0\n1,200,{num}\n2,300,{final}\n")
    return d


def lines(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> list[str]:
    """``corral <argv>``'s stdout lines; it must exit with ``code`` and, for 0, print nothing on stderr."""
    assert main(list(argv)) == code
    captured = capsys.readouterr()
    if code == 0:
        assert captured.err == "", captured.err
    return captured.out.splitlines()


def error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one stderr line of ``corral <argv>``, which must exit with 2 and print nothing else."""
    code = None
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "", captured
    assert len(captured.err.splitlines()) == 1 and "Traceback" not in captured.err, captured.err
    return captured.err.rstrip("\n")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real sweep, as a user starts it: seeds 1 and 2 of two learning rates, four jobs."""
    pytest.importorskip("matplotlib")
    where = tmp_path_factory.mktemp("options") / "sweep"
    proc = subprocess.run([sys.executable, "train.py", "-m", "trainer.n_epochs=2", "trainer.batch_size=200",
                           "seed=1,2", "algo.learning_rate=0.001,0.003", "logger=[csv]", f"hydra.sweep.dir={where}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in where.iterdir() if (p / "summary.json").is_file()) == ["0", "1", "2", "3"]
    yield where


def test_ignore_with_no_keys_merges_none_and_says_so(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--ignore`` alone merged no key, not even seed, with nothing in the output to say so (a sweep of
    one seed looks the same either way). Both commands now print it as their first line; the JSON
    names the keys merged; ``--help`` says it; the default prints no such line."""
    merged = "merged: no key (--ignore with no keys), not even seed: runs that differ in seed are separate"
    table = lines(capsys, "results", str(sweep), "--ignore")
    assert table[0] == f"{merged} rows"
    assert table[1].startswith("| seed | algo.learning_rate | n |") and len(table) == 2 + 1 + 4
    assert not any(line.startswith("merged:") for line in lines(capsys, "results", str(sweep)))
    assert json.loads("\n".join(lines(capsys, "results", str(sweep), "--ignore", "--json")))["ignore"] == []
    assert json.loads("\n".join(lines(capsys, "results", str(sweep), "--json")))["ignore"] == ["seed"]

    out = sweep.parent / "per_seed.png"
    plotted = lines(capsys, "plot", str(sweep), "--ignore", "-o", str(out))
    assert plotted[0] == f"{merged} lines"
    assert [line.split(":")[0] for line in plotted[1:5]] == [
        "seed=1 algo.learning_rate=0.001", "seed=1 algo.learning_rate=0.003",
        "seed=2 algo.learning_rate=0.001", "seed=2 algo.learning_rate=0.003"]

    for command, what in (("results", "group"), ("plot", "line")):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert f"--ignore with no keys merges none, not even seed (a {what} per seed)" in text
        assert "--only KEY=VAL [KEY=VAL ...]" in text


def test_only_keeps_the_runs_with_those_values(sweep: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--only``: the runs whose overrides have one of a key's values, for every key given; a number
    matches the same number written otherwise; the first line says how many runs are kept."""
    def lr(run: str) -> str:
        return dict(o.split("=", 1) for o in json.loads((Path(run) / "summary.json").read_text())["overrides"])[
            "algo.learning_rate"]

    table = lines(capsys, "results", str(sweep), "--only", "algo.learning_rate=1e-3", "--json")
    data = json.loads("\n".join(table))
    assert data["only"] == {"algo.learning_rate": ["1e-3"]}
    assert [r["n"] for r in data["rows"]] == [2] and {lr(run) for run in data["rows"][0]["runs"]} == {"0.001"}
    text = lines(capsys, "results", str(sweep), "--only", "algo.learning_rate=1e-3")
    assert text[0] == "only algo.learning_rate=1e-3: 2 of 4 run(s)" and text[1].startswith("| group    | n |")

    # several values of one key: any of them; several keys: all of them
    table = lines(capsys, "results", str(sweep), "--only", "seed=1", "seed=2", "--only", "algo.learning_rate=0.003")
    assert table[0] == "only seed=1 seed=2 algo.learning_rate=0.003: 2 of 4 run(s)"
    assert len(table) == 4 and table[3].split("|")[2].strip() == "2"  # n

    plotted = lines(capsys, "plot", str(sweep), "--only", "seed=2", "-o", str(sweep.parent / "seed2.png"))
    assert plotted[0] == "only seed=2: 2 of 4 run(s)"
    assert [line.split(":")[0] for line in plotted[1:3]] == ["algo.learning_rate=0.001", "algo.learning_rate=0.003"]
    assert plotted[1].split(": ")[1].startswith("1 run(s)") and plotted[3].startswith("wrote ")


def test_an_only_that_keeps_nothing_is_one_line_naming_what_the_runs_have(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A key no run overrides, a value no run has, values no run has together, an item that is not
    KEY=VAL, a directory taken by ``--only`` or ``--ignore``: each one line (not an empty table or plot)."""
    pytest.importorskip("matplotlib")
    sweep = tmp_path / "sweep"
    for num, (algo, seed) in enumerate([("ppo", 1), ("ppo", 2), ("vpg", 3)]):
        make_run(sweep, num, [f"algo={algo}", f"seed={seed}"])
    s = str(sweep)
    for command in ("results", "plot"):
        assert error(capsys, command, s, "--only", "alg=ppo") == (
            f"corral {command}: error: --only alg=ppo: no run under {s} overrides alg (did you mean algo?); the runs "
            "override: algo, seed")
        assert error(capsys, command, s, "--only", "algo=ppo", "algo=sac") == (
            f"corral {command}: error: --only algo=sac: no run under {s} has algo=sac; its values are ppo, vpg")
        assert error(capsys, command, s, "--only", "seed=3", "algo=ppo") == (
            f"corral {command}: error: --only seed=3 algo=ppo: no run under {s} has them all together; the runs "
            "with seed=3 have algo=vpg")
        assert error(capsys, command, s, "--only", "seed") == (
            f"corral {command}: error: --only seed: give KEY=VALUE, an override the runs were started with (--only "
            "algo.learning_rate=0.001 seed=1)")
        assert error(capsys, command, "--only", "seed=1", s) == (
            f"corral {command}: error: no directory given: --only took {s} as its own; give the directories first "
            f"(corral {command} {s} --only ...)")
        assert error(capsys, command, "--ignore", "seed", s) == (
            f"corral {command}: error: no directory given: --ignore took {s} as its own; give the directories first "
            f"(corral {command} {s} --ignore ...)")
        other = make_run(tmp_path / "other", 0, ["algo=sac", "seed=1"]).parent
        assert error(capsys, command, s, "--ignore", "seed", str(other)) == (
            f"corral {command}: error: --ignore took the directory {other} as an override key; give the directories "
            f"before --ignore (corral {command} {s} {other} --ignore ...)")
    assert not list(sweep.glob("*.png"))


def test_an_option_given_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``-o a.png -o b.png`` wrote b.png only, ``--ignore algo --ignore seed`` merged seed only: the
    first value was dropped in silence. An option of one value given twice is now an error line;
    ``--ignore`` and ``--only`` given twice take both."""
    pytest.importorskip("matplotlib")
    sweep = tmp_path / "sweep"
    for num, (algo, seed) in enumerate([("ppo", 1), ("ppo", 2), ("vpg", 1)]):
        make_run(sweep, num, [f"algo={algo}", f"seed={seed}"])
    s = str(sweep)
    table = lines(capsys, "results", s, "--ignore", "algo", "--ignore", "seed")
    assert table[0].startswith("| group    | n |") and table[2].startswith("| all runs | 3 |")
    for args, given in ((["-o", f"{tmp_path}/a.png", "-o", f"{tmp_path}/b.png"], f"-o given twice ({tmp_path}/a.png, "
                                                                                   f"then {tmp_path}/b.png)"),
                        (["--metric", "x", "--metric", "train/return_mean"],
                         "--metric given twice (x, then train/return_mean)"),
                        (["--legend", "3", "--legend", "4"], "--legend given twice (3, then 4)")):
        assert error(capsys, "plot", s, *args) == (
            f"corral plot: error: {given}; give it once (`corral plot --help` shows the usage)")
    assert not list(tmp_path.rglob("*.png"))


def test_a_pgf_image_without_its_tex_program_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``-o curves.pgf`` where matplotlib's TeX program (``pgf.texsystem``, xelatex by default) is not
    installed was a RuntimeError traceback, after the runs were read; it is one line, before."""
    matplotlib = pytest.importorskip("matplotlib")
    make_run(tmp_path / "sweep", 0, ["seed=1"])
    monkeypatch.setitem(matplotlib.rcParams, "pgf.texsystem", "lualatex")
    monkeypatch.setenv("PATH", str(tmp_path / "no-programs-here"))  # a machine without TeX
    assert error(capsys, "plot", str(tmp_path / "sweep"), "-o", str(tmp_path / "curves.pgf")) == (
        f"corral plot: error: -o {tmp_path / 'curves.pgf'}: matplotlib writes .pgf files with lualatex, which is not "
        "installed here; install it, or give -o a name ending in .pdf or .svg")
    assert not (tmp_path / "curves.pgf").exists()


@pytest.mark.parametrize("n_groups", [3, 12])
def test_long_legend_labels_stay_inside_the_image(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str], n_groups: int, saved_figures: list[Any]) -> None:
    """Groups of two long keys: their one-line labels made a legend wider than the axes, which ran off
    the right of the 7x4 image. Labels are wrapped (and a very long one shortened, still unique), and
    a legend that does not fit inside the axes goes beside them: the saved image holds it whole. The
    lines printed keep the full labels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.image import imread

    sweep = tmp_path / "sweep"
    value = "x" * 60
    for i in range(n_groups):
        make_run(sweep, i, [f"env.some_really_long_option_name={value}{i}",
                            f"algo.another_long_hyperparameter_name={i / 10000:.6f}", "seed=1"])
    saved = saved_figures
    printed = lines(capsys, "plot", str(sweep))
    fig = saved[-1]
    legend = fig.axes[0].get_legend()
    renderer = FigureCanvasAgg(fig).get_renderer()
    box = legend.get_window_extent(renderer)
    height, width = imread(sweep / "learning_curves.png").shape[:2]
    assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height, (box, width, height)
    if n_groups <= 10:  # inside the axes, which kept the image's size
        assert fig.axes[0].get_window_extent(renderer).contains(box.x0, box.y0)
        assert fig.axes[0].get_window_extent(renderer).contains(box.x1, box.y1)
        assert (width, height) == (700, 400)
    texts = [t.get_text() for t in legend.get_texts()]
    named = texts[:min(n_groups, 10)]
    assert len(set(named)) == len(named)
    assert all(len(line) <= 40 for text in named for line in text.splitlines())  # LABEL_WIDTH
    assert [line.split(": ")[0] for line in printed[:n_groups]] == [
        f"env.some_really_long_option_name={value}{i} algo.another_long_hyperparameter_name={i / 10000:.6f}"
        for i in range(n_groups)]


def test_legend_labels_are_shortened_and_stay_unique() -> None:
    from corral.results.labels import ELLIPSIS, LABEL_WIDTH, legend_labels, short_label

    assert short_label("algo=ppo (n=3)") == "algo=ppo (n=3)"
    long = "a.key=" + "v" * 100 + " b.key=0.001 (n=2)"
    short = short_label(long)
    assert len(short.splitlines()) == 3 and short.splitlines()[-1] == f"{ELLIPSIS}{long[-(LABEL_WIDTH - 1):]}"
    # two labels that differ only where the shortened ones leave out are wrapped whole instead, so they differ
    twins = [f"k={'x' * 100}{i}{'y' * 100}" for i in (1, 2)]
    assert short_label(twins[0]) == short_label(twins[1])
    out = legend_labels(twins)
    assert out[0] != out[1] and [o.replace("\n", "") for o in out] == twins


def test_the_legend_line_suggests_an_only_that_works(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Too many groups for the legend: the ``legend:`` line suggests ``--only`` with two values of the
    swept key of the most values, and that command names every line it draws."""
    pytest.importorskip("matplotlib")
    sweep = tmp_path / "sweep"
    for i in range(24):
        make_run(sweep, i, [f"algo={'ab'[i % 2]}", f"algo.lr={i // 2}", "seed=1"])
    note = [line for line in lines(capsys, "plot", str(sweep)) if line.startswith("legend: ")]
    assert len(note) == 1 and note[0].endswith(
        "or --only algo.lr=0 algo.lr=1 ... keeps the runs with those values of algo.lr")
    out = lines(capsys, "plot", str(sweep), "--only", "algo.lr=0", "algo.lr=1")
    assert out[0] == "only algo.lr=0 algo.lr=1: 4 of 24 run(s)"
    assert not any(line.startswith("legend: ") for line in out) and "(4 line(s)," in out[-1]
