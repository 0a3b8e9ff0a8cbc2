"""The on-policy base's shared parts: how a batch is split into minibatches."""

from __future__ import annotations

from typing import Any, Callable

import pytest


@pytest.mark.parametrize(("algo", "setting"), [("trpo", "vf_minibatch_size"), ("ppo", "minibatch_size")])
def test_a_minibatch_larger_than_the_batch_is_said_once(corral_build: Callable[..., Any], caplog: pytest.LogCaptureFixture,
                                                        algo: str, setting: str) -> None:
    run = corral_build(f"algo={algo}", "trainer.batch_size=300", "seed=2", f"algo.{setting}=100000")
    episodes = run.algo.sample(0, 300)
    with caplog.at_level("WARNING", logger="corral.rl.on_policy"):
        run.algo.train_once(0, episodes)
        run.algo.train_once(1, episodes)
    said = [r.getMessage() for r in caplog.records if setting in r.getMessage()]
    assert said == [f"corral: algo.{setting}=100000 is larger than the batch of {len(episodes)} steps this update "
                    f"learns from, so each gradient step uses the whole batch; lower algo.{setting} or raise "
                    "trainer.batch_size"]
    caplog.clear()
    fitting = corral_build(f"algo={algo}", "trainer.batch_size=300", "seed=2", f"algo.{setting}=64")
    fitting.algo.train_once(0, fitting.algo.sample(0, 300))
    assert not [r for r in caplog.records if setting in r.getMessage()]
