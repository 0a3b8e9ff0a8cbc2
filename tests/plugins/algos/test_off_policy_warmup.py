"""SAC's and DQN's ``algo.min_buffer_size`` counts in whole epochs: the workers' policy (and its
random-action flag or epsilon) changes only between epochs of ``trainer.batch_size`` steps. A given
value that is not a multiple of the batch is one ``corral: warning:`` line at the first epoch, saying
how many steps really act at random and how to get what was asked; a multiple says nothing, and so
does the default (null: the first epoch, what always runs)."""

from __future__ import annotations

from pathlib import Path

from off_policy_helpers import rows, train, warning_lines

# One epoch of 1,000 Pendulum steps (five whole episodes), one gradient step, no evaluation.
SAC_RUN = ["algo=sac", "env=pendulum", "policy=tanh_gaussian", "policy.hidden_sizes=[32,32]",
           "algo.qf_hidden_sizes=[32,32]", "algo.batch_size=32", "algo.gradient_steps=1", "trainer.batch_size=1000",
           "trainer.n_epochs=1", "trainer.max_env_steps=null", "trainer.eval_every=0", "logger=[csv]"]


def sac_run(*changes: str) -> list[str]:
    """SAC_RUN with ``changes`` in place of its own values of the same keys (a key given twice is a
    warning line of its own)."""
    changed = {change.split("=", 1)[0]: change for change in changes}
    return [changed.pop(o.split("=", 1)[0], o) for o in SAC_RUN] + list(changed.values())


def test_a_min_buffer_size_below_the_batch_is_one_warning_line_and_a_multiple_none(tmp_path: Path) -> None:
    """``algo.min_buffer_size=100`` with ``trainer.batch_size=1000``: the first 1,000 steps act uniformly at
    random, exactly as with ``algo.min_buffer_size=1000`` (the same first epoch), and the run says so once,
    before training; 1000, a multiple, is what runs and is not warned about, nor is a resumed run."""
    asked = train(tmp_path / "asked100", *sac_run("algo.min_buffer_size=100"))
    assert asked.returncode == 0, asked.stderr[-3000:]
    assert warning_lines(asked) == [
        "corral: warning: algo.min_buffer_size=100 counts in whole epochs (the workers' policy changes only "
        "between epochs, and this run's first epoch collected 1,000 steps), so the first 1,000 environment steps (1 epoch) act uniformly "
        "at random, not the first 100; for 100, make trainer.batch_size a divisor of it (trainer.batch_size=100), or "
        "set algo.min_buffer_size to a multiple of the epoch's steps (1000 is what runs now)"], asked.stderr
    lines = asked.stderr.splitlines()
    assert lines.index(warning_lines(asked)[0]) < next(i for i, line in enumerate(lines) if "completed" in line)

    multiple = train(tmp_path / "asked1000", *sac_run("algo.min_buffer_size=1000"))
    assert multiple.returncode == 0, multiple.stderr[-3000:]
    assert warning_lines(multiple) == [], multiple.stderr
    # what the warning says: the same random first epoch (and the same update after it) either way
    assert rows(tmp_path / "asked100") == rows(tmp_path / "asked1000")

    resumed = train(tmp_path / "asked100", f"trainer.resume={tmp_path / 'asked100'}", "trainer.n_epochs=2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "after 2 epochs" in resumed.stderr, resumed.stderr
    assert warning_lines(resumed) == [], resumed.stderr  # said when the run started, not again


def test_dqn_names_epsilon_and_the_initial_epsilon_the_first_epoch_cannot_honour(tmp_path: Path) -> None:
    """``algo.exploration_initial_eps=0.0 algo.exploration_final_eps=0.0``: the first epoch still acts at
    epsilon 1 (``algo.min_buffer_size=100`` is reached only at its end), and the line says so, and how much
    of the epsilon schedule (counted from step 0) the warm-up takes."""
    proc = train(tmp_path / "run", "algo=dqn", "env=cartpole", "policy=qnet", "policy.hidden_sizes=[32,32]",
                 "algo.min_buffer_size=100",
                 "worker=fragment", "worker.n_envs=1", "worker.timesteps_per_call=500", "trainer.batch_size=500",
                 "algo.exploration_initial_eps=0.0", "algo.exploration_final_eps=0.0", "algo.gradient_steps=1",
                 "trainer.n_epochs=1", "trainer.max_env_steps=null", "trainer.eval_every=0", "logger=[csv]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert warning_lines(proc) == [
        "corral: warning: algo.min_buffer_size=100 counts in whole epochs (the workers' policy changes only "
        "between epochs, and this run's first epoch collected 500 steps), so the first 500 environment steps (1 epoch) act at epsilon 1 "
        "(uniformly random actions), not the first 100, and they use the first 500 of the epsilon schedule's 10,000 "
        "steps (it counts from step 0, from algo.exploration_initial_eps=0), so the first learned epoch acts at "
        "epsilon 0; for 100, make trainer.batch_size a divisor of it (trainer.batch_size=100), or set "
        "algo.min_buffer_size to a multiple of the epoch's steps (500 is what runs now)"], proc.stderr


def test_zero_says_the_first_epoch_always_acts_at_random(tmp_path: Path) -> None:
    """``algo.min_buffer_size=0`` (SB3's ``learning_starts=0``) cannot make the first epoch learned:
    no update comes before it ends."""
    proc = train(tmp_path / "run", *sac_run("algo.min_buffer_size=0", "trainer.batch_size=400"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert warning_lines(proc) == [
        "corral: warning: algo.min_buffer_size=0 counts in whole epochs (the workers' policy changes only "
        "between epochs, and this run's first epoch collected 400 steps), so the first 400 environment steps (1 epoch) act uniformly "
        "at random; no update comes before the first epoch ends, so lower trainer.batch_size for fewer, or set "
        "algo.min_buffer_size=400 to ask for what runs"], proc.stderr


def test_the_warning_comes_under_running_normalisation_too(tmp_path: Path) -> None:
    """normalize.obs/reward wrap the algorithm (it must sample through ``Algorithm.sample``): the check
    lives in the algorithm's own update, so a normalised SAC run trains and says it as well."""
    proc = train(tmp_path / "run", *sac_run("algo.min_buffer_size=100", "normalize.obs=true", "normalize.reward=true"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(warning_lines(proc)) == 1 and "algo.min_buffer_size=100 counts in whole epochs" in \
        warning_lines(proc)[0], proc.stderr


def test_the_default_is_the_first_epoch_and_says_nothing(tmp_path: Path) -> None:
    """``algo.min_buffer_size`` not given (null): the first epoch explores, exactly the run of a given
    1000 with epochs of 1,000 steps, and nothing is said about a value the user never chose (SAC and
    DQN); the presets' own values are multiples of their epochs and say nothing either."""
    default = train(tmp_path / "default", *SAC_RUN)
    assert default.returncode == 0, default.stderr[-3000:]
    assert warning_lines(default) == [], default.stderr
    given = train(tmp_path / "given", *sac_run("algo.min_buffer_size=1000"))
    assert given.returncode == 0, given.stderr[-3000:]
    assert rows(tmp_path / "default") == rows(tmp_path / "given")

    dqn = train(tmp_path / "dqn", "algo=dqn", "env=cartpole", "policy=qnet", "policy.hidden_sizes=[32,32]",
                "worker=fragment", "worker.n_envs=1", "worker.timesteps_per_call=500", "trainer.batch_size=500",
                "algo.gradient_steps=1", "trainer.n_epochs=1", "trainer.max_env_steps=null", "trainer.eval_every=0",
                "logger=[csv]")
    assert dqn.returncode == 0, dqn.stderr[-3000:]
    assert warning_lines(dqn) == [], dqn.stderr
    preset = train(tmp_path / "preset", "experiment=dqn_cartpole", "policy.hidden_sizes=[32,32]", "trainer.n_epochs=1",
                   "trainer.max_env_steps=null", "trainer.eval_every=0", "logger=[csv]")
    assert preset.returncode == 0, preset.stderr[-3000:]
    assert warning_lines(preset) == [], preset.stderr


def test_sac_pendulum_explores_the_same_steps_as_with_its_old_default(tmp_path: Path) -> None:
    """``experiment=sac_pendulum`` leaves ``algo.min_buffer_size`` at the default: its epochs of 100 steps
    run exactly as with the former default, 100 (one epoch at random, then the same updates)."""
    common = ["experiment=sac_pendulum", "trainer.n_epochs=3", "trainer.max_env_steps=null", "trainer.eval_every=0",
              "algo.utd_ratio=0.1", "logger=[csv]"]
    now = train(tmp_path / "now", *common)
    assert now.returncode == 0, now.stderr[-3000:]
    assert warning_lines(now) == [], now.stderr
    before = train(tmp_path / "before", *common, "algo.min_buffer_size=100")
    assert before.returncode == 0, before.stderr[-3000:]
    assert rows(tmp_path / "now") == rows(tmp_path / "before")


def test_the_default_below_100_steps_an_epoch_is_sb3s_100_rounded_up(tmp_path: Path) -> None:
    """With epochs of 50 steps the default (null) explores for the first two epochs, exactly as a given
    100 (SB3's ``learning_starts``) does, and says nothing (100 is a multiple of 50, so neither does the
    given value): the default keeps SB3's warm-up however small the epochs."""
    small = ["worker=fragment", "worker.n_envs=1", "worker.timesteps_per_call=50", "trainer.batch_size=50",
             "trainer.n_epochs=3"]
    default = train(tmp_path / "default", *sac_run(*small))
    assert default.returncode == 0, default.stderr[-3000:]
    assert warning_lines(default) == [], default.stderr
    given = train(tmp_path / "given", *sac_run(*small, "algo.min_buffer_size=100"))
    assert given.returncode == 0, given.stderr[-3000:]
    assert rows(tmp_path / "default") == rows(tmp_path / "given")
    first = train(tmp_path / "first", *sac_run(*small, "algo.min_buffer_size=50"))
    assert first.returncode == 0, first.stderr[-3000:]
    assert rows(tmp_path / "first") != rows(tmp_path / "default")  # the test can tell one epoch from two
