"""env=cpu_heavy: CartPole with fixed extra work per step, usable in spawned worker processes."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


def test_default_id_imports_its_registration_in_a_fresh_process(corral_build) -> None:
    """Spawned workers have not imported corral's plugins; the module-qualified id registers the env."""
    run = corral_build("env=cpu_heavy", "env.kwargs.work=10", "sampler=multiprocessing", "sampler.n_workers=2",
                       "sampler.start_method=spawn")
    try:
        batch = run.sampler.obtain_samples(0, 200, run.algo.get_agent_update())
        assert batch.lengths.sum() >= 200
    finally:
        run.close()


def test_steps_like_cartpole() -> None:
    """The extra work changes nothing the agent sees."""
    heavy = gym.make("corral.plugins.envs.cpu_heavy:corral/CPUHeavyCartPole-v1", work=10)
    plain = gym.make("CartPole-v1")
    o1, _ = heavy.reset(seed=3)
    o2, _ = plain.reset(seed=3)
    for _ in range(20):
        o1, r1, t1, u1, _ = heavy.step(1)
        o2, r2, t2, u2, _ = plain.step(1)
        np.testing.assert_array_equal(o1, o2)
        assert (r1, t1, u1) == (r2, t2, u2)
        if t1 or u1:
            break
