"""The built-in composition checks: fragments, algorithm/policy pairs and action spaces, before any worker starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import hydra
import pytest
from omegaconf import DictConfig

from corral.framework.compose import validate
from corral.framework.entry import prepare
from corral.framework.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def compose(*overrides: str) -> DictConfig:
    """What ``python train.py <overrides>`` composes."""
    with hydra.initialize_config_module(config_module="corral.conf", version_base="1.3"):
        return hydra.compose(config_name="config", overrides=prepare(list(overrides)))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algo=sac", "env=pendulum", "policy=mlp"], "algo=sac cannot train policy=mlp; choose policy=tanh_gaussian "
                                                     "(a preset sets every part: experiment=sac_pendulum)"),
        (["algo=dqn", "policy=mlp"], "algo=dqn cannot train policy=mlp; choose policy=qnet (a preset sets every "
                                     "part: experiment=dqn_cartpole)"),
        (["algo=dqn", "env=pendulum", "policy=qnet"],
         "algo=dqn supports discrete actions only, but env=pendulum has continuous actions; choose an environment "
         "with discrete actions (a preset sets every part: experiment=dqn_cartpole), or algo=sac "
         "policy=tanh_gaussian for this one"),
        (["algo=sac", "env=cartpole", "policy=tanh_gaussian"],
         "algo=sac supports continuous actions only, but env=cartpole has discrete actions; choose an environment "
         "with continuous actions (a preset sets every part: experiment=sac_pendulum), or algo=dqn policy=qnet for "
         "this one"),
        # the environment is named first: with the policy named first, `algo=sac` on CartPole asked for
        # policy=tanh_gaussian, and only that command said that SAC cannot act in CartPole
        (["algo=sac"], "algo=sac supports continuous actions only, but env=cartpole has discrete actions"),
        (["algo=pearl"], "algo=pearl supports continuous actions only, but env=cartpole has discrete actions; choose "
                         "an environment with continuous actions (a preset sets every part: experiment=pearl_pointnav)"),
        (["algo=ppo", "policy=qnet"], "policy=qnet is made for algo=dqn, not algo=ppo"),
        # these three failed inside the run before (a run directory with a failed summary)
        (["env=gym", "env.id=Nope-v0"], "gymnasium cannot make environment 'Nope-v0': Environment `Nope` doesn't "
                                        "exist. Did you mean: `Hopper`?. Check env.id"),
        (["env=gym", "env.id=nomod:Nope-v0"], "gymnasium cannot make environment 'nomod:Nope-v0': 'nomod' cannot be "
                                              "imported (No module named 'nomod'), so it registers no id. Check env.id"),
        # failed inside the run before (the same problem, from the first environment made)
        (["env=pendulum", "+env.kwargs.gravity=9"], "environment EnvFactory('Pendulum-v1', kwargs={'gravity': 9}) does not "
                                                    "take the keyword argument 'gravity': PendulumEnv takes render_mode, g"),
        # accepted before: the run failed at its first video, after training up to it
        (["worker=vector", "trainer.video_every=1"],
         "trainer.video_every=1: worker.backend=native makes all its environments inside one VectorEnv, so corral "
         "cannot record them one by one; record with worker.backend=sync"),
        (["env=point_nav", "worker=vector", "worker.backend=native"],
         "worker.backend=native makes its environments from a gymnasium id, but env=point_nav is not one (it makes its "
         "environments itself); use worker.backend=sync (or async) for it"),
        (["algo=ppo", "env=pendulum", "policy=tanh_gaussian"], "policy=tanh_gaussian is made for algo=sac, not algo=ppo"),
    ],
)
def test_bad_compositions_are_config_errors_naming_the_parts(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(compose(*overrides))
    assert message in str(info.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["experiment=sac_pendulum"],
        ["experiment=dqn_cartpole"],
        ["algo=sac", "env=pendulum", "policy=tanh_gaussian", "worker=vec"],
        ["algo=dqn", "env=cartpole", "policy=qnet", "worker=default"],
        ["algo=ppo", "worker=vec"],
        ["env=gym", "env.id=corral.plugins.envs.cpu_heavy:corral/CPUHeavyCartPole-v1"],  # a module:id
        ["env=point_nav", "worker=vector", "worker.backend=sync", "algo=ppo", "policy=mlp"],
        ["worker=vector", "worker.backend=sync", "trainer.video_every=1"],
        ["worker=vector", "trainer.video_every=1", "trainer.eval_every=0"],  # no evaluation, no video
    ],
)
def test_good_compositions_pass(overrides: list[str]) -> None:
    validate(compose(*overrides))


def test_every_preset_an_algorithm_names_trains_it() -> None:
    """The presets named in these errors exist and compose with the algorithm that names them."""
    from corral.framework.plugins import get_registry
    from corral.plugins.validation import component_class

    prepare([])
    named = {name: tuple(getattr(component_class(get_registry().get("algo", name).factory), "presets", ()) or ())
             for name in get_registry().names("algo")}
    assert {name for name, presets in named.items() if presets} >= {"sac", "dqn", "pearl"}
    for name, presets in named.items():
        for preset in presets:
            cfg = compose(f"experiment={preset}")
            assert cfg.algo.name == name, (preset, cfg.algo.name)
            validate(cfg)


def test_train_py_reports_a_bad_composition_in_one_line_before_the_run_directory(tmp_path: Path) -> None:
    """Checked with the values, before Hydra makes the run directory: no failed run is left behind."""
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={tmp_path / 'run'}", "algo=dqn",
                           "env=pendulum", "policy=qnet"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "corral: error: algo=dqn supports discrete actions only, but env=pendulum has continuous actions; choose an "
        "environment with discrete actions (a preset sets every part: experiment=dqn_cartpole), or algo=sac "
        "policy=tanh_gaussian for this one"], proc.stderr
    assert not (tmp_path / "run").exists()


def test_train_py_reports_an_unknown_env_id_before_the_run_directory(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), f"hydra.run.dir={tmp_path / 'run'}", "env=gym",
                           "env.id=CartPol-v1"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "corral: error: gymnasium cannot make environment 'CartPol-v1': Environment `CartPol` doesn't exist. Did you "
        "mean: `CartPole`?. Check env.id (any registered gymnasium id works, e.g. env=gym env.id=Acrobot-v1)."
    ], proc.stderr
    assert not (tmp_path / "run").exists()
