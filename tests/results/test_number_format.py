"""The finals ``corral plot`` prints and the cells of ``corral results``: one shared format, with
enough significant digits for small metrics (``ppo/approx_kl``), returns as before (``1,875.3``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.framework.cli import main
from corral.results.summary import write_summary
from corral.results.table import format_mean_std, format_number


def test_format_number_and_mean_std() -> None:
    assert [format_number(x) for x in (1875.25, -36.66, 1.0, 0.0009216, -0.004413, 1.234e-5, 0.5, -0.0, 0.0)] == [
        "1,875.2", "-36.7", "1.0", "0.0009216", "-0.004413", "1.234e-05", "0.5000", "0.0", "0.0"]
    assert format_mean_std(1875.3, 12.34) == "1,875.3 ± 12.3"
    assert format_mean_std(22.0, 0.5657) == "22.0 ± 0.6"
    assert format_mean_std(0.0009216, 0.0003514) == "0.0009216 ± 0.0003514"
    assert format_mean_std(-0.004413) == "-0.004413"


def test_plot_and_results_show_small_finals_that_differ(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    sweep = tmp_path / "sweep"
    for num, (kl, ret) in enumerate([(0.0010, 0.02), (0.0012, 0.03)]):
        d = sweep / str(num)
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text(f"- seed={num}\n")
        (d / "progress.csv").write_text(f"epoch,env_steps,train/return_mean,ppo/approx_kl\n0,100,{ret},{kl * 10}\n"
                                        f"1,200,{ret},{kl}\n")
        write_summary(d, {"status": "completed", "overrides": [f"seed={num}"], "job": {"num": num},
                          "final_train_return": ret, "env_steps": 200})
    assert main(["plot", str(sweep), "--metric", "ppo/approx_kl", "-o", str(tmp_path / "p.png")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "all runs: 2 run(s), final ppo/approx_kl 0.001100 ± 0.0001414"
    assert main(["results", str(sweep)]) == 0
    assert "| 0.02500 ± 0.007071 |" in capsys.readouterr().out  # final train return
