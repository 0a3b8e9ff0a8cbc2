"""experiments/peers/sb3_runner.py gives SB3 the dqn_cartpole preset's ``target_update_interval``
(256, one epoch), and that is rl-baselines3-zoo's run: with ``train_freq`` of one 256-step rollout,
SB3's copies during a rollout all take the network of the last ``train()``, so its 10 and 256 train
the same networks. The default (null) maps to SB3's own 10,000.

Needs the ``bench`` extra (stable-baselines3); without it the SB3 run skips."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from corral.testing.modules import import_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runner() -> ModuleType:
    """experiments/peers/sb3_runner.py as a module."""
    return import_path(ROOT / "experiments" / "peers" / "sb3_runner.py", "corral_experiments_sb3_runner")


def composed(*overrides: str) -> dict[str, Any]:
    """The resolved config ``python train.py <overrides>`` runs, as plain containers."""
    from omegaconf import OmegaConf

    from corral.testing.plugin import compose_config

    return OmegaConf.to_container(compose_config(list(overrides)), resolve=True)  # type: ignore[return-value]


def test_the_preset_and_the_default_map_to_sb3s_target_update_interval(runner: ModuleType) -> None:
    preset = runner.sb3_spec(composed("experiment=dqn_cartpole"))
    assert preset.kwargs["target_update_interval"] == 256 and preset.kwargs["train_freq"] == (256, "step")
    default = runner.sb3_spec(composed("algo=dqn", "policy=qnet", "env=cartpole"))
    assert default.kwargs["target_update_interval"] == 10_000


def test_sb3_trains_the_same_networks_with_rl_zoos_10_and_the_presets_256(runner: ModuleType, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Five 256-step rollouts of the preset's SB3 mapping (smaller networks, fewer gradient steps) with
    target_update_interval 10 and 256: the same target and online networks; 512 is another run."""
    pytest.importorskip("stable_baselines3")
    monkeypatch.setenv("SB3_LOGDIR", str(tmp_path))  # SB3's default logger makes a /tmp/SB3-<time> directory
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.env_util import make_vec_env

    spec = runner.sb3_spec(composed("experiment=dqn_cartpole"))
    kwargs = {**spec.kwargs, "learning_starts": 256, "gradient_steps": 16,
              "policy_kwargs": {**spec.kwargs["policy_kwargs"], "net_arch": [32, 32]}}

    def networks(interval: int) -> list[torch.Tensor]:
        env = make_vec_env(lambda: runner.make_env(spec), n_envs=1, seed=1)
        try:
            model = DQN("MlpPolicy", env, seed=1, device="cpu", **{**kwargs, "target_update_interval": interval})
            model.learn(5 * 256)
            return [p.detach().clone() for net in (model.q_net_target, model.q_net) for p in net.parameters()]
        finally:
            env.close()

    zoo, preset, other = networks(10), networks(256), networks(512)
    assert all(torch.equal(a, b) for a, b in zip(zoo, preset, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(preset, other, strict=True))
