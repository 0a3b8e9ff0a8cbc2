"""algo=reinforce: corral's algorithm contract, and it learns CartPole."""

from __future__ import annotations

import numpy as np

from corral import EnvFactory
from corral.testing import AlgorithmContract, LoggerContract
from corral.testing.contracts import env_spec_of, make_test_policy
from corral_plugin_example.reinforce import Reinforce


class TestReinforceContract(AlgorithmContract):
    """Finite float statistics, a policy that changes, a state_dict round trip that trains identically,
    config defaults inside their declared ranges."""

    algo_name = "reinforce"
    algo_config = {"vf_iters": 5}


class TestReinforceOnAcrobot(AlgorithmContract):
    """The same contract on another environment, given as a factory."""

    algo_name = "reinforce"
    algo_config = {"vf_iters": 5}
    env = EnvFactory("Acrobot-v1")
    max_episode_length = 100


class TestJSONLinesLoggerContract(LoggerContract):
    """The example's logger, including resume (a resumed run drops the lines after its snapshot)."""

    logger = "jsonl"


def test_networks_depend_on_the_seed_alone() -> None:
    spec = env_spec_of(EnvFactory("CartPole-v1"))
    weights = []
    for draws_before in (0, 5):
        np.random.seed(draws_before)
        __import__("torch").rand(draws_before)  # whatever ran before the algorithm was built
        algo = Reinforce(spec, make_test_policy(spec), seed=3)
        weights.append([p.detach().clone() for p in algo.value_function.parameters()])
    assert all((a == b).all() for a, b in zip(*weights))


def test_learns_cartpole(corral_build) -> None:
    """25 epochs of 2,000 steps (seed 1): the deterministic evaluation return reaches CartPole-v1's 500."""
    run = corral_build("algo=reinforce", "env=cartpole", "policy=mlp", "trainer.n_epochs=25",
                       "trainer.batch_size=2000", "trainer.max_env_steps=null", "trainer.eval_every=25",
                       "trainer.eval_episodes=5", "logger=[csv]", "trainer.progress=false")
    stats = run.train()
    assert stats["eval/return_mean"] >= 400, stats
