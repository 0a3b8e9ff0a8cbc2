"""``env=halfcheetah``: MuJoCo HalfCheetah-v5 by preset (skipped when the mujoco extra is missing)."""

from __future__ import annotations

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
