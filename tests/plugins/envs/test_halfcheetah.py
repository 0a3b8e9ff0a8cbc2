"""``env=halfcheetah``: MuJoCo HalfCheetah-v5 by preset (skipped when the mujoco extra is missing)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from corral.framework.config import config_of
from corral.framework.env import EnvSpec, make_env
from corral.framework.plugins import get_registry

pytest.importorskip("mujoco", reason="needs the MuJoCo extra: pip install 'corral[mujoco]'")


def test_halfcheetah_preset_builds_and_steps() -> None:
    reg = get_registry().get("env", "halfcheetah")
    env = make_env(reg.factory(config_of(reg, {})))
    try:
        spec = EnvSpec.from_env(env)
        assert spec.observation_space.shape == (17,) and spec.action_space.shape == (6,)
        assert spec.max_episode_length == 1000 and not spec.is_discrete
        env.reset(seed=0)
        obs2, reward, terminated, truncated, _ = env.step(np.zeros(6, np.float32))
        assert obs2.shape == (17,) and np.isfinite(reward) and not terminated and not truncated
    finally:
        env.close()


def test_sac_halfcheetah_preset_composes_and_validates() -> None:
    import hydra

    from corral.framework.compose import validate
    from corral.framework.entry import prepare

    with hydra.initialize_config_module(config_module="corral.conf", version_base="1.3"):
        cfg = hydra.compose(config_name="config", overrides=prepare(["experiment=sac_halfcheetah"]))
    assert (cfg.algo.name, cfg.env.name, cfg.policy.name, cfg.worker.name) == ("sac", "halfcheetah", "tanh_gaussian", "fragment")
    assert cfg.trainer.max_env_steps == 300000 and cfg.algo.min_buffer_size == 10000
    validate(cfg)


MUJOCO_WARNINGS = """
import logging, sys
from pathlib import Path

import numpy as np
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(levelname)s %(name)s %(message)s")
from corral.framework.env import EnvFactory
from corral.meta.task_envs import make_task_env
for env in (EnvFactory("HalfCheetah-v5")(),  # by id, and by one of corral's own MuJoCo task factories
            EnvFactory(make_task_env, {"entry_point": "corral.meta.half_cheetah_tasks:HalfCheetahVelEnv",
                                       "max_episode_steps": 10})()):
    env.reset(seed=0)
    for _ in range(3):
        env.unwrapped.data.qvel[:] = np.nan  # the simulation blows up: a warning the user must see
        env.step(env.action_space.sample())
    env.close()
"""


def test_mujocos_warnings_are_corral_log_records_and_no_file_is_left(tmp_path: Path) -> None:
    """MuJoCo's own handler printed ``WARNING: ...`` and a blank line to stderr for each model (with
    MuJoCo 4, eight lines per HalfCheetah run for gymnasium's deprecated ``settotalmass``) and
    appended them to MUJOCO_LOG.TXT in the directory the run was started from. Now each is a
    ``corral.env`` log record, an unstable simulation at warning level; nothing is written there."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", MUJOCO_WARNINGS], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and list(tmp_path.iterdir()) == [], proc.stderr
    warnings = [line for line in proc.stdout.splitlines() if line.startswith("WARNING")]
    assert warnings == ["WARNING corral.env MuJoCo: Nan, Inf or huge value in QVEL at DOF 0. The simulation is "
                        "unstable. Time = 0.0000."], proc.stdout  # once per process, not once per model or step
    assert all(line.startswith(("DEBUG corral.env MuJoCo: ", "WARNING corral.env MuJoCo: "))
               for line in proc.stdout.splitlines()), proc.stdout


RENDER_PROBE = """
from corral.framework.env import EnvFactory
from corral.framework.errors import ConfigError
from corral.framework.video import check_recordable
try:
    check_recordable(EnvFactory("HalfCheetah-v5"))
except ConfigError as exc:
    print(exc)
"""


def test_a_mujoco_environment_that_cannot_render_here_is_one_line_before_recording(tmp_path: Path) -> None:
    """MuJoCo's renderer starts at the first frame: ``corral eval --video`` on a machine without a
    display ended in a ``mujoco.FatalError`` traceback after the evaluation had begun. The check
    before recording now renders one frame and says why it cannot, with what to set."""
    import os
    import subprocess
    import sys

    pytest.importorskip("moviepy", reason="needs the video extra")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["MUJOCO_GL"] = "glfw"  # a windowing backend, with no display to open: it cannot start
    proc = subprocess.run([sys.executable, "-c", RENDER_PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr  # nor glfw's warnings on the way
    line = proc.stdout.strip()
    assert line.startswith("environment HalfCheetah-v5 cannot render a frame on this machine (") and line.endswith(
        "so its episodes cannot be recorded (MuJoCo renders without a display with MUJOCO_GL=egl on a GPU, or "
        "MUJOCO_GL=osmesa with OSMesa installed); evaluate it without --video / trainer.video_every"), proc.stdout
    assert "\n" not in line
