"""End to end: evaluation keeps training's episode rules (issue 18's repro), ``corral eval`` on a
trained CartPole run (videos included) and its Python twin, and ``trainer.video_every``."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corral.framework.errors import ConfigError
from corral.testing.processes import file_size_limit

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 300


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A command as a user runs it (bounded)."""
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


def train(run_dir: Path, *overrides: str) -> None:
    proc = run([sys.executable, str(REPO / "train.py"), *overrides, "trainer.progress=false",
                f"hydra.run.dir={run_dir}"], run_dir.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]


def corral(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "corral.framework.cli", *args], cwd, **env)


def rows(path: Path) -> list[dict[str, str]]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_evaluation_keeps_the_configured_episode_limit(tmp_path: Path) -> None:
    """Issue 18's repro: Pendulum cut at 50 steps in training is cut at 50 in evaluation too."""
    train(tmp_path / "run", "env=pendulum", "env.max_episode_length=50", "algo=ppo", "trainer.n_epochs=1",
          "trainer.batch_size=200", "trainer.eval_every=1", "trainer.eval_episodes=2", "logger=[csv]")
    (row,) = rows(tmp_path / "run" / "progress.csv")
    assert float(row["train/episode_length"]) == 50
    assert float(row["eval/episode_length"]) == 50
    # Pendulum's reward is at most 0 and above -16.3 per step: 50 steps cannot reach the -1126 of 200
    assert -16.3 * 50 < float(row["eval/return_mean"]) <= 0


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small trained CartPole run (two PPO epochs, no evaluation)."""
    run_dir = tmp_path_factory.mktemp("eval_cli") / "run"
    train(run_dir, "env=cartpole", "algo=ppo", "trainer.n_epochs=2", "trainer.batch_size=500",
          "trainer.eval_every=0", "logger=[csv]")
    return run_dir


def test_corral_eval_gives_a_warning_while_it_builds_as_one_corral_line(cartpole_run: Path, tmp_path: Path) -> None:
    """A log record corral gives while ``corral eval`` builds the run is a ``corral: warning:`` line, as
    in ``train.py`` (nothing printed it in that format before: Python's last resort gave the bare message)."""
    proc = corral("eval", str(cartpole_run), "env.max_episode_length=1000", "--episodes", "1", "-o",
                  str(tmp_path / "eval.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "corral: warning: env.max_episode_length=1000 is above CartPole-v1's own time limit of 500 steps, which ends "
        "its episodes first; for longer episodes raise that limit too with env.kwargs.max_episode_steps=1000 "
        "(gymnasium.make's argument)"]


def test_corral_eval_prints_the_return_and_writes_five_videos(cartpole_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("moviepy", reason="the video extra (corral[video]) is not installed")
    from corral.framework.evaluation import read_video_frames

    out = tmp_path / "out"
    proc = corral("eval", str(cartpole_run), "--episodes", "5", "--video", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "5 deterministic episodes" in proc.stdout and "return " in proc.stdout and "±" in proc.stdout
    result = json.loads((cartpole_run / "eval.json").read_text())
    assert f"return {result['return_mean']:.2f} ± {result['return_std']:.2f}" in proc.stdout
    videos = sorted(out.glob("*.mp4"))
    assert len(videos) == 5 and sorted(result["videos"]) == [str(v) for v in videos]
    for i, length in enumerate(result["lengths"]):
        frames = read_video_frames(out / f"eval-w0-s0-episode-{i}.mp4")
        # one frame after the reset and one after every step; CartPole renders 600 x 400
        assert frames.shape[1:] == (400, 600, 3) and len(frames) == length + 1, (i, frames.shape, length)
        assert frames.std() > 0
    # recording again into the same directory replaces this recording's videos
    from corral.framework.eval_run import evaluate_run

    again = evaluate_run(cartpole_run, episodes=2, video_dir=out, output="")
    assert len(again.videos) == 2 and sorted(out.glob("*.mp4")) == [Path(v) for v in again.videos]


def test_python_api_is_the_command(cartpole_run: Path, tmp_path: Path) -> None:
    from corral.framework.eval_run import evaluate_run

    proc = corral("eval", str(cartpole_run), "--episodes", "3", "--seed", "7", "-o", str(tmp_path / "cli.json"),
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cli = json.loads((tmp_path / "cli.json").read_text())
    api = evaluate_run(cartpole_run, episodes=3, seed=7, output=tmp_path / "api.json")
    assert api.returns == cli["returns"] and api.lengths == cli["lengths"]
    assert api.to_json()["return_mean"] == cli["return_mean"]
    # seeded and reproducible; another seed, other episodes; sampling differs from the mode
    assert evaluate_run(cartpole_run, episodes=3, seed=7, output="").returns == api.returns
    assert evaluate_run(cartpole_run, episodes=3, seed=8, output="").returns != api.returns
    stochastic = evaluate_run(cartpole_run, episodes=3, seed=7, deterministic=False, output="")
    assert stochastic.returns != api.returns and not stochastic.deterministic
    # key=value overrides of the run's config, also after the options
    assert evaluate_run(cartpole_run, ["env.max_episode_length=20"], episodes=2, output="").lengths == [20, 20]
    proc = corral("eval", str(cartpole_run), "--episodes", "2", "env.max_episode_length=20", "--json", "-o", "",
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["lengths"] == [20, 20]
    missing = corral("eval", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip() == (f"corral eval: error: {tmp_path / 'nowhere'} does not exist: give corral eval a run "
                                      "directory (the one with snapshots/) or a snapshot file")
    (tmp_path / "empty").mkdir()
    empty = corral("eval", str(tmp_path / "empty"), cwd=tmp_path)
    assert empty.returncode == 2 and "no snapshot found in" in empty.stderr and "Traceback" not in empty.stderr
    nothing = corral("eval", cwd=tmp_path)  # the overrides are optional: only the run is asked for
    assert nothing.returncode == 2 and nothing.stderr == (
        "corral eval: error: the following arguments are required: run (`corral eval --help` shows the usage)\n")


@pytest.mark.parametrize(("override", "says"), [
    ("algo.clip_range=0.3", "algo.clip_range=0.3 would not change the evaluation: corral eval takes overrides of env.*, "
                            "worker.* and seed only"),
    ("sampler.n_workers=4", "sampler.n_workers=4: corral eval takes its sampler from its own options, not the run's: "
                            "give --n-workers 4"),
    ("sampler=ray", "sampler=ray: corral eval takes its sampler from its own options, not the run's: give --sampler ray"),
    ("+env.kwargs.x=1", "+env.kwargs.x=1: corral eval changes values of the run's config and adds no key with +; write "
                        "env.kwargs.x=1 (env.kwargs takes a new key without +)"),
    ("~env.kwargs", "~env.kwargs: corral eval changes values of the run's config and deletes none; leave it out"),
    ("word", "word: an override is key=value, a change of the run's env.*, worker.* or seed"),
    # train.py's line said to choose worker=vec for it, which corral eval refuses (the line above)
    ("worker.n_envs=4", "worker.n_envs is not a setting: worker=default has no setting 'n_envs' (it has no settings) "
                        "(`corral plugins` lists every option's settings)"),
    ("trainer.eval_episodes=3", "trainer.eval_episodes=3 would not change the evaluation"),  # --episodes does
    ("normalize.obs=true", "normalize.obs=true would not change the evaluation"),
    ("policy.hidden_sizes=[32]", "policy.hidden_sizes=[32] would not change the evaluation"),
    ("logger=[wandb]", "logger=[wandb] would not change the evaluation"),
    ("worker=vec", "worker=vec: corral eval cannot change the run's worker option (it was trained with worker=default)"),
    ("algo=vpg", "algo=vpg: corral eval cannot change the run's algo option (it was trained with algo=ppo)"),
    # the run's own option: said as that, not as a change to train a run with (the line contradicted itself)
    ("worker=default", "worker=default: the run was trained with worker=default already, and corral eval evaluates with "
                       "the run's own worker; leave it out (worker.* changes its settings)"),
    ("env.id=CartPole-v0", "env.id=CartPole-v0: use --env-id CartPole-v0"),
])
def test_an_override_that_would_not_change_the_evaluation_is_refused(cartpole_run: Path, override: str,
                                                                      says: str) -> None:
    from corral.framework.eval_run import evaluate_run

    with pytest.raises(ConfigError) as caught:
        evaluate_run(cartpole_run, [override], episodes=1, output="")
    assert str(caught.value).startswith(says) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("override", "says"), [
    # accepted before, and 1.5 became an episode limit of 1: the run's stored config is untyped YAML
    ("env.max_episode_length=1.5", "env.max_episode_length=1.5: env.max_episode_length takes a whole number, not 1.5"),
    ("env.max_episode_length=[1]", "env.max_episode_length=[1]: env.max_episode_length takes a whole number, not a "
                                   "list ([1])"),  # a traceback before
    ("seed=abc", "seed=abc: seed takes a whole number, not 'abc'"),  # a traceback before
    # a traceback before, then OmegaConf's 'Cannot merge DictConfig with ListConfig'; now train.py's line
    ("env.kwargs=[1]", "env.kwargs=[1]: env.kwargs takes a mapping, not a list ([1]); write it in braces, quoted for the "
                       "shell, e.g. 'env.kwargs={name: value}'"),
])
def test_an_override_of_the_wrong_type_is_refused_as_train_py_would(cartpole_run: Path, override: str,
                                                                    says: str) -> None:
    from corral.framework.eval_run import evaluate_run

    with pytest.raises(ConfigError) as caught:
        evaluate_run(cartpole_run, [override], episodes=1, output="")
    assert str(caught.value) == says


def test_a_key_given_twice_is_one_warning_line(cartpole_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``corral eval run env.max_episode_length=5 env.max_episode_length=7`` used the last value and
    dropped the first without a word."""
    from corral.framework.eval_run import evaluate_run

    result = evaluate_run(cartpole_run, ["env.max_episode_length=5", "env.max_episode_length=7"], episodes=1, output="")
    assert capsys.readouterr().err.splitlines() == [
        "corral eval: warning: env.max_episode_length is given twice (env.max_episode_length=5, then "
        "env.max_episode_length=7); the evaluation uses the last, env.max_episode_length=7"]
    assert result.lengths == [7]


def test_a_true_false_override_takes_true_or_false_only(tmp_path: Path) -> None:
    """``worker.carry_episodes=2`` was read as true in silence (the run's stored config is untyped
    YAML); train.py refuses it, and so does corral eval."""
    from corral.framework.eval_run import evaluate_run

    run_dir = tmp_path / "run"
    train(run_dir, "worker=vector", "worker.n_envs=4", "trainer.n_epochs=1", "trainer.batch_size=200",
          "trainer.eval_every=0", "logger=[csv]")
    for given in ("2", "yes", "0"):
        with pytest.raises(ConfigError) as caught:
            evaluate_run(run_dir, [f"worker.carry_episodes={given}"], episodes=1, output="")
        assert str(caught.value) == (f"worker.carry_episodes must be true or false, got {given}; give "
                                     "worker.carry_episodes=true or worker.carry_episodes=false")
    assert len(evaluate_run(run_dir, ["worker.carry_episodes=true"], episodes=2, output="").returns) == 2


def test_bad_eval_values_are_one_line_each(cartpole_run: Path, tmp_path: Path) -> None:
    for args, line in [
        (["--seed", "-3"], "corral eval: error: --seed must be >= 0 (a seed of numpy's SeedSequence, as the run's seed "
                           "is), got -3"),
        (["algo.clip_range=0.3"], "corral eval: error: algo.clip_range=0.3 would not change the evaluation: corral eval "
                                  "takes overrides of env.*, worker.* and seed only (the policy and normalisation come "
                                  "from the snapshot); --episodes, --stochastic, --sampler and --n-workers set the rest"),
        (["-o", str(tmp_path)], f"corral eval: error: -o {tmp_path} is a directory; give the file eval.json is "
                                f"written to (e.g. {tmp_path / 'eval.json'})"),
        # accepted before: --seed won and seed=5 was ignored
        (["seed=5", "--seed", "7"], "corral eval: error: seed=5 and --seed 7 both set the evaluation seed; give one "
                                    "of them"),
    ]:
        proc = corral("eval", str(cartpole_run), *args, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [line], proc.stderr
    # an unknown sampler is said before the run is built (it came after the build's warnings, here one
    # about the episode length above CartPole's time limit)
    proc = corral("eval", str(cartpole_run), "env.max_episode_length=1000", "--sampler", "nope", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("corral eval: error: no sampler named 'nope' is registered; available: "), proc.stderr
    proc = corral("eval", str(cartpole_run), "-o", "/proc/corral/eval.json", cwd=tmp_path)
    (line,) = proc.stderr.strip().splitlines()  # the reason in parentheses is the OS's (root or not)
    assert proc.returncode == 2 and line.startswith(
        "corral eval: error: -o /proc/corral/eval.json: cannot write eval.json there: /proc takes no new directory ("
    ) and line.endswith("); give a file in a directory you can write to"), proc.stderr


def test_a_default_eval_json_that_cannot_be_written_is_one_line_before_any_episode(cartpole_run: Path,
                                                                                  tmp_path: Path) -> None:
    import shutil

    run = tmp_path / "run"
    shutil.copytree(cartpole_run, run)
    (run / "eval.json").unlink(missing_ok=True)  # from another test's evaluation of the same run
    (run / "eval.json").mkdir()  # what is in the way of <run dir>/eval.json, where it goes by default
    proc = corral("eval", str(run), "--episodes", "1", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"corral eval: error: the run directory's {run / 'eval.json'} is a directory; give -o <file> elsewhere (or "
        "-o '' to write none)"], proc.stderr
    proc = corral("eval", str(run), "--episodes", "1", "-o", "", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["episodes"] == 1 and not list((run / "eval.json").iterdir())


def test_an_eval_json_and_a_plot_the_disk_has_no_room_for_are_one_line_each(cartpole_run: Path,
                                                                           tmp_path: Path) -> None:
    """Found only while writing (a full disk, a quota, ``ulimit -f``): one line naming the file, exit
    status 2; nothing half-written is left, and an earlier image stays as it was."""
    (tmp_path / "curves.png").write_bytes(b"the last image")
    for args, name in ((["eval", str(cartpole_run), "--episodes", "1", "-o", "ev.json"], "ev.json"),
                       (["plot", str(cartpole_run), "-o", "curves.png"], "curves.png")):
        proc = subprocess.run([sys.executable, "-m", "corral.framework.cli", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=TIMEOUT, env={**os.environ, "PYTHONPATH": str(REPO)},
                              preexec_fn=file_size_limit(100))
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert proc.stderr.splitlines()[-1] == (
            f"corral {args[0]}: error: could not write {name} (OSError: File too large); make room there, or write "
            "elsewhere (-o)"), proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "ev.json").exists() and (tmp_path / "curves.png").read_bytes() == b"the last image"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.png"]  # no temporary file


def test_a_video_directory_that_cannot_be_made_is_one_line_before_any_episode(cartpole_run: Path,
                                                                             tmp_path: Path) -> None:
    pytest.importorskip("moviepy", reason="the video extra (corral[video]) is not installed")
    (tmp_path / "a_file").write_text("")
    proc = corral("eval", str(cartpole_run), "--video", str(tmp_path / "a_file" / "videos"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"corral eval: error: --video {tmp_path / 'a_file' / 'videos'}: cannot create the directory for the videos: "
        f"{tmp_path / 'a_file'} is a file, not a directory; give a directory you can write to"], proc.stderr


@pytest.mark.parametrize("sampler", ["multiprocessing", "action_server"])
@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_ctrl_c_during_corral_eval_is_one_line_and_leaves_no_process(cartpole_run: Path, tmp_path: Path,
                                                                      sampler: str, signal_name: str) -> None:
    """Ctrl-C reaches the whole foreground job (the command and its worker processes): one line,
    exit status 130, no eval.json, and every worker process gone. SIGTERM (``kill``, a scheduler's
    preemption) takes the same path, with its own status, 143; it ended the command without a word."""
    import os
    import signal
    import time

    from corral.testing.processes import child_processes, session_processes, started_session, wait_gone

    out = tmp_path / "eval.json"
    cmd = [sys.executable, "-m", "corral.framework.cli", "eval", str(cartpole_run), "--episodes", "1000000",
           "--sampler", sampler, "--n-workers", "2", "-o", str(out)]
    with started_session(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}) as proc:
        deadline = time.monotonic() + 120
        while len(child_processes(proc.pid)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None and len(child_processes(proc.pid)) >= 2, "the workers never started"
        time.sleep(3)  # the workers are running episodes
        session = session_processes(proc.pid)
        os.killpg(proc.pid, getattr(signal, signal_name))
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == (130 if signal_name == "SIGINT" else 143), stderr[-3000:]
        by = "" if signal_name == "SIGINT" else " by SIGTERM"
        assert stderr.strip().splitlines()[-1] == (f"corral eval: interrupted{by}; no eval.json was written (it is "
                                                   "written once every episode is in)"), stderr[-3000:]
        assert "Traceback" not in stderr and stdout == "", stderr[-3000:]
        assert not out.exists()
        assert wait_gone(session, timeout=30) == set()


def test_default_seed_repeats_the_runs_own_evaluation(tmp_path: Path) -> None:
    """With the run's seed, ``corral eval`` runs the episodes the run's last evaluation ran."""
    from corral.framework.eval_run import evaluate_run

    run_dir = tmp_path / "run"
    train(run_dir, "env=cartpole", "algo=ppo", "trainer.n_epochs=1", "trainer.batch_size=300",
          "trainer.eval_every=1", "trainer.eval_episodes=3", "worker=vec", "worker.n_envs=2", "logger=[csv]")
    (row,) = rows(run_dir / "progress.csv")
    result = evaluate_run(run_dir, episodes=3)
    assert result.return_mean == pytest.approx(float(row["eval/return_mean"]), abs=1e-9)
    assert result.length_mean == pytest.approx(float(row["eval/episode_length"]), abs=1e-9)


def test_env_id_and_parallel_workers(cartpole_run: Path, tmp_path: Path) -> None:
    from corral.framework.eval_run import evaluate_run

    # CartPole-v0: the same spaces, episodes cut at 200 instead of 500
    v0 = evaluate_run(cartpole_run, episodes=2, env_id="CartPole-v0", output="")
    assert v0.env_id == "CartPole-v0" and max(v0.lengths) <= 200
    with pytest.raises(ConfigError, match="not compatible"):
        evaluate_run(cartpole_run, episodes=1, env_id="Pendulum-v1", output="")
    # two workers in parallel: four episodes, worker 0's two are the local two-worker evaluation's
    mp = evaluate_run(cartpole_run, episodes=4, sampler="multiprocessing", n_workers=2, output="")
    local = evaluate_run(cartpole_run, episodes=4, sampler="local", n_workers=2, output="")
    assert mp.returns == local.returns and len(mp.returns) == 4
    # the action server runs the policy in its own process; its workers' proxies carry the mode
    served = evaluate_run(cartpole_run, episodes=4, sampler="action_server", n_workers=2, output="")
    assert served.returns == local.returns
    proc = corral("eval", str(cartpole_run), "--env-id", "Pendulum-v1", cwd=tmp_path)
    assert proc.returncode == 2 and "corral eval: error:" in proc.stderr and "Traceback" not in proc.stderr


RAISING_CARTPOLE = "corral.testing.faulty_envs:corral/RaisingCartPole-v1"


def test_env_kwargs_overrides_are_of_the_env_id_environment(cartpole_run: Path, tmp_path: Path) -> None:
    """``--env-id <id> env.kwargs.k=v``: the keyword is the evaluated environment's. It was checked
    against the run's own (CartPole-v1) and refused, though RaisingCartPole takes ``fail_at``."""
    from corral.framework.eval_run import evaluate_run

    proc = corral("eval", str(cartpole_run), "--episodes", "1", "-o", "", "--env-id", RAISING_CARTPOLE,
                  "env.kwargs.fail_at=3", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == (  # it reached the environment: the third step raised
        "corral eval: error: worker 0 raised EnvironmentFailure: RaisingCartPole failed on purpose at step 3 while "
        "sampling (obtain_exact_episodes); the traceback above shows where it raised"), proc.stderr
    result = evaluate_run(cartpole_run, ["env.kwargs.fail_at=100000"], episodes=1, env_id=RAISING_CARTPOLE, output="")
    assert result.env_id == RAISING_CARTPOLE and len(result.returns) == 1
    # the reverse: a keyword the run's environment takes and --env-id's does not is refused, naming --env-id's
    proc = corral("eval", str(cartpole_run), "--episodes", "1", "-o", "", "--env-id", "Acrobot-v1",
                  "env.kwargs.sutton_barto_reward=true", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        "corral eval: error: environment EnvFactory('Acrobot-v1', kwargs={'sutton_barto_reward': True}) does not "
        "take the keyword argument 'sutton_barto_reward': AcrobotEnv takes render_mode (and gymnasium.make: "
        "max_episode_steps, disable_env_checker); check env.kwargs"], proc.stderr


def test_env_id_of_an_older_version_prints_no_gymnasium_warning(cartpole_run: Path, tmp_path: Path) -> None:
    """``--env-id CartPole-v0`` let gymnasium's two-line DeprecationWarning through, in ANSI colour;
    ``train.py env.id=CartPole-v0`` prints none, and neither does ``corral eval``."""
    proc = corral("eval", str(cartpole_run), "--episodes", "1", "-o", "", "--env-id", "CartPole-v0", "--json",
                  cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert json.loads(proc.stdout)["env_id"] == "CartPole-v0"


def test_an_env_id_gymnasium_cannot_make_points_at_env_id(cartpole_run: Path, tmp_path: Path) -> None:
    """The line advised training's ``env=gym env.id=Acrobot-v1``, which corral eval refuses."""
    proc = corral("eval", str(cartpole_run), "--episodes", "1", "-o", "", "--env-id", "Nope-v0", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        "corral eval: error: gymnasium cannot make environment 'Nope-v0': Environment `Nope` doesn't exist. Did you "
        "mean: `Hopper`?; check --env-id (any registered gymnasium id, or module:id, whose observation and action "
        "spaces are the run's)"], proc.stderr


def test_missing_video_extra_names_it(cartpole_run: Path, tmp_path: Path) -> None:
    fake = tmp_path / "no_moviepy" / "moviepy"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('moviepy is not installed')\n")
    proc = corral("eval", str(cartpole_run), "--episodes", "1", "--video", str(tmp_path / "v"), cwd=tmp_path,
                  PYTHONPATH=f"{fake.parent}{os.pathsep}{REPO}")
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'corral[video]'" in proc.stderr and "Traceback" not in proc.stderr
    # trainer.video_every says so before training starts
    proc = run([sys.executable, str(REPO / "train.py"), "trainer.video_every=1", "trainer.n_epochs=1",
                f"hydra.run.dir={tmp_path / 'train'}"], tmp_path, PYTHONPATH=f"{fake.parent}{os.pathsep}{REPO}")
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'corral[video]'" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "train" / "progress.csv").exists()


def test_videos_on_a_machine_without_display_or_sound_print_nothing_and_a_cut_video_is_one_line(
        tmp_path: Path) -> None:
    """No display and no audio device (no XDG_RUNTIME_DIR): SDL's `error: XDG_RUNTIME_DIR is invalid ...`
    line does not reach the console. A video the disk had no room for (ffmpeg leaves it without its
    index, and moviepy does not notice) is one line naming it, in training and in corral eval."""
    pytest.importorskip("moviepy", reason="the video extra (corral[video]) is not installed")
    from corral.framework.video import check_video_complete

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "XDG_RUNTIME_DIR", "SDL_AUDIODRIVER",
                                                              "SDL_VIDEODRIVER", "WAYLAND_DISPLAY")}
    # Pendulum: every episode is 200 frames, a video of ~50 kB
    command = [sys.executable, str(REPO / "train.py"), "env=pendulum", "trainer.n_epochs=1", "trainer.eval_every=1",
               "trainer.video_every=1", "trainer.batch_size=300", "trainer.progress=false", "logger=[csv]"]
    proc = subprocess.run([*command, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=TIMEOUT, env={**env, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.splitlines() == [line for line in proc.stderr.splitlines() if line.startswith("corral: ")]
    video = tmp_path / "run" / "videos" / "epoch_000001.mp4"
    check_video_complete(video)  # a whole video passes
    (tmp_path / "cut.mp4").write_bytes(video.read_bytes()[:5000])
    with pytest.raises(OSError, match=r"the MP4 file is incomplete \(cut short, or without its index\): was the "
                                      r"disk full\?: '.*cut.mp4'"):
        check_video_complete(tmp_path / "cut.mp4")

    proc = subprocess.run([*command, f"hydra.run.dir={tmp_path / 'full'}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=TIMEOUT, env={**env, "PYTHONPATH": str(REPO)},
                          preexec_fn=file_size_limit(10_000))  # the snapshot is written after the video
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[-1] == (
        "corral: error: could not record the video of epoch 1 (OSError: the MP4 file is incomplete (cut short, or "
        f"without its index): was the disk full?: {tmp_path / 'full' / 'videos' / 'epoch_000001.mp4'}); the run "
        "stopped there; fix that (space, permissions, the path) and start the run again (it has no snapshot yet)")
    proc = subprocess.run([sys.executable, "-m", "corral.framework.cli", "eval", str(tmp_path / "run"), "--episodes",
                           "1", "--video", "evv", "-o", ""], cwd=tmp_path, capture_output=True, text=True,
                          timeout=TIMEOUT, env={**env, "PYTHONPATH": str(REPO)}, preexec_fn=file_size_limit(10_000))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.splitlines() == [
        "corral eval: error: could not write the video evv/eval-w0-s0-episode-0.mp4 (the MP4 file is incomplete (cut "
        "short, or without its index): was the disk full?); make room there, or evaluate without --video"]


def test_video_every_records_to_the_run_and_tensorboard_without_changing_training(tmp_path: Path) -> None:
    pytest.importorskip("moviepy", reason="the video extra (corral[video]) is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    common = ["env=cartpole", "algo=ppo", "trainer.n_epochs=3", "trainer.batch_size=300", "trainer.eval_every=1",
              "trainer.eval_episodes=2", "seed=4"]
    train(tmp_path / "plain", *common, "logger=[csv]")
    train(tmp_path / "video", *common, "trainer.video_every=2", "logger=[csv,tensorboard]")
    videos = sorted((tmp_path / "video" / "videos").glob("*.mp4"))
    # evaluations after epochs 1, 2, 3: the 2nd is recorded (every 2 evaluations)
    assert [v.name for v in videos] == ["epoch_000002.mp4"]
    events = EventAccumulator(str(tmp_path / "video" / "tb"), size_guidance={"images": 0})
    events.Reload()
    assert "eval/video" in events.Tags()["images"]
    (image,) = events.Images("eval/video")
    assert (image.width, image.height) == (300, 200) and image.encoded_image_string[:3] == b"GIF"

    def strip(table: list[dict[str, str]]) -> list[dict[str, str]]:
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in table]

    plain, video = rows(tmp_path / "plain" / "progress.csv"), rows(tmp_path / "video" / "progress.csv")
    assert strip(plain) == strip(video)
    # the recorded episode is the evaluation's first one: its length is among that epoch's
    from corral.framework.evaluation import read_video_frames

    frames = read_video_frames(videos[0])
    assert float(video[1]["eval/return_min"]) <= len(frames) <= float(video[1]["eval/return_max"]) + 1


def test_a_run_shorter_than_eval_every_records_its_final_evaluation(tmp_path: Path) -> None:
    """Two epochs with trainer.eval_every=5: the final policy's evaluation is the run's only one, and
    trainer.video_every=3 recorded nothing without a word."""
    pytest.importorskip("moviepy", reason="the video extra (corral[video]) is not installed")
    train(tmp_path / "run", "env=cartpole", "algo=ppo", "trainer.n_epochs=2", "trainer.batch_size=300",
          "trainer.eval_every=5", "trainer.eval_episodes=1", "trainer.video_every=3", "logger=[csv]")
    assert [v.name for v in (tmp_path / "run" / "videos").glob("*.mp4")] == ["epoch_000002.mp4"]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["final_eval_return"] is not None


def test_trust_is_passed_to_the_snapshot_loader(cartpole_run: Path, tmp_path: Path) -> None:
    """A snapshot with an objects part (state only pickle can hold) loads only with ``--trust``."""
    import datetime
    import shutil

    from corral.framework.snapshot import load_snapshot, objects_path, save_snapshot
    from corral.framework.trainer import find_snapshot

    copy = tmp_path / "run"
    shutil.copytree(cartpole_run, copy)
    path = find_snapshot(copy)
    state = load_snapshot(path)
    state["last_stats"] = {**state["last_stats"], "note": datetime.date(2026, 1, 1)}  # not data: pickled
    save_snapshot(state, path)
    assert objects_path(path).is_file()
    refused = corral("eval", str(copy), "--episodes", "1", cwd=tmp_path)
    assert refused.returncode == 2 and "--trust" in refused.stderr and "Traceback" not in refused.stderr
    trusted = corral("eval", str(copy), "--episodes", "1", "--trust", cwd=tmp_path)
    assert trusted.returncode == 0, trusted.stderr


@pytest.mark.parametrize(("args", "line"), [
    (["eval", "run", "--episodes", "x"], "corral eval: error: argument --episodes: invalid int value: 'x'"),
    (["eval", "run", "--nope"], "corral eval: error: unrecognized arguments: --nope"),
    (["results"], "corral results: error: the following arguments are required: dir"),
    (["plot", "runs", "--metric"], "corral plot: error: argument --metric: expected one argument"),
    (["plugins", "--jsn"], "corral plugins: error: unrecognized arguments: --jsn"),
])
def test_a_commands_argument_mistake_is_one_line_that_points_at_help(tmp_path: Path, args: list[str], line: str) -> None:
    """argparse printed its whole usage block (three lines for ``corral eval``) before the mistake."""
    proc = corral(*args, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr == f"{line} (`corral {args[0]} --help` shows the usage)\n", proc.stderr
    assert proc.stdout == "" and not any(tmp_path.iterdir())
    assert corral(args[0], "--help", cwd=tmp_path).stdout.startswith(f"usage: corral {args[0]} ")


def test_an_unknown_command_is_one_line_with_the_commands(tmp_path: Path) -> None:
    """``corral <no command>`` is one line naming the commands (and the nearest one); overrides given
    without ``train`` say how to train with them. (It printed the whole usage after the line.)"""
    typo = corral("evla", "run", cwd=tmp_path)
    assert typo.returncode == 2 and typo.stderr == (
        "corral: error: unknown command 'evla' (did you mean `corral eval`?); the commands are train, plugins, results, "
        "plot and eval (`corral --help` says what each does)\n")
    overrides = corral("algo=vpg", "seed=2", cwd=tmp_path)
    assert overrides.returncode == 2 and overrides.stderr == (
        "corral: error: 'algo=vpg' is an override, not a command; to train with it: corral train algo=vpg seed=2\n")
    assert not any(tmp_path.iterdir())  # nothing ran


def test_a_snapshot_the_live_run_rotates_away_while_corral_eval_builds_is_replaced_by_its_latest(
        cartpole_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``corral eval`` on a run that is still training: between finding the latest snapshot and
    loading it (the run is rebuilt in between), the trainer may write a newer one and remove the old
    (``trainer.keep_snapshots``). Before, that was ``... epoch_000002.pt does not exist; check
    trainer.resume``; now the evaluation loads the run's latest snapshot."""
    import shutil

    from corral.framework import compose, eval_run

    live = tmp_path / "live"
    shutil.copytree(cartpole_run, live)
    snapshots = live / "snapshots"
    (old,) = [p for p in snapshots.glob("epoch_*.pt") if p.name == "epoch_000002.pt"]
    real_build = compose.build

    def build_while_the_run_rotates(cfg: object, **kwargs: object) -> object:
        built = real_build(cfg, **kwargs)  # type: ignore[arg-type]
        shutil.copy2(old, snapshots / "epoch_000003.pt")  # the trainer's next snapshot...
        (snapshots / "latest").write_text("epoch_000003.pt\n")
        old.unlink()  # ...and its rotation
        return built

    monkeypatch.setattr(compose, "build", build_while_the_run_rotates)
    result = eval_run.evaluate_run(live, episodes=1, output=tmp_path / "eval.json")
    assert result.snapshot == str(snapshots / "epoch_000003.pt")
