"""Environment adaptation: EnvSpec, EnvFactory, seeding helpers, and how real episodes end."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control import CartPoleEnv

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import (
    EnvFactory,
    EnvSpec,
    as_seed_sequence,
    child_seed,
    env_rng_state,
    is_new_env,
    make_env,
    seed_int,
    set_env_rng_state,
)
from corral.framework.errors import ConfigError
from corral.plugins.policies.mlp import MLPPolicy
from corral.plugins.workers.default import DefaultWorker
from corral.plugins.workers.vec import VecWorker


def cartpole_policy(seed: int = 0) -> MLPPolicy:
    torch.manual_seed(seed)
    return MLPPolicy(EnvSpec.from_env(gym.make("CartPole-v1")), hidden_sizes=(16, 16))


def always_right(policy: MLPPolicy) -> MLPPolicy:
    """The policy, made to push right every step (the pole falls within a few dozen steps)."""
    params = policy.get_param_values()
    last = max(k for k in params if k.endswith(".bias"))
    params[last] = np.array([-20.0, 20.0], dtype=np.float32)
    policy.set_param_values(params)
    return policy


def cartpole_without_spec(max_episode_steps: int) -> gym.Env:
    """CartPole whose only time limit is a TimeLimit wrapper (no spec tells the worker about it)."""
    return gym.wrappers.TimeLimit(CartPoleEnv(), max_episode_steps)


def fell(last_observations: np.ndarray) -> np.ndarray:
    """CartPole's own termination test (cart off the track or pole past 12 degrees)."""
    x, theta = last_observations[:, 0], last_observations[:, 2]
    return (np.abs(x) > 2.4) | (np.abs(theta) > 12 * 2 * np.pi / 360)


def check_ends(b: EpisodeBatch, limit: int) -> None:
    """TERMINAL exactly where the pole fell; every other episode was cut at ``limit`` (TIMEOUT)."""
    check_well_formed(b)
    ends = b.step_types[np.cumsum(b.lengths) - 1]
    down = fell(b.last_observations)
    np.testing.assert_array_equal(ends == StepType.TERMINAL, down)
    np.testing.assert_array_equal(ends == StepType.TIMEOUT, ~down)
    assert (b.lengths[~down] == limit).all() and (b.lengths <= limit).all()
    assert down.any() and (~down).any(), "want both cut and fallen episodes in this sample"


def check_well_formed(b: EpisodeBatch) -> None:
    for ep in b.split():
        st = ep.step_types
        if len(st) > 1:
            assert st[0] == StepType.FIRST
            assert (st[1:-1] == StepType.MID).all()
        assert st[-1] in (StepType.TERMINAL, StepType.TIMEOUT)


# ---------------------------------------------------------------------- EnvSpec / EnvFactory
def test_env_spec_from_env_takes_the_smaller_limit() -> None:
    env = gym.make("CartPole-v1")
    assert EnvSpec.from_env(env).max_episode_length == 500
    assert EnvSpec.from_env(env, 100).max_episode_length == 100
    assert EnvSpec.from_env(gym.make("CartPole-v1", max_episode_steps=15), 100).max_episode_length == 15
    assert EnvSpec.from_env(CartPoleEnv()).max_episode_length is None
    spec = EnvSpec.from_env(env)
    assert spec.is_discrete and spec.observation_space == env.observation_space
    assert not EnvSpec.from_env(gym.make("Pendulum-v1")).is_discrete


def test_env_factory_is_picklable_and_builds_fresh_envs() -> None:
    factory = pickle.loads(pickle.dumps(EnvFactory("CartPole-v1", {"max_episode_steps": 15})))
    a, b = factory(), factory()
    assert a is not b and a.spec.max_episode_steps == 15
    callable_factory = pickle.loads(pickle.dumps(EnvFactory(cartpole_without_spec, {"max_episode_steps": 7})))
    env = callable_factory()
    assert isinstance(env, gym.wrappers.TimeLimit) and env._max_episode_steps == 7


def test_env_factory_names_a_bad_id() -> None:
    with pytest.raises(ConfigError, match="NoSuchEnv-v0"):
        EnvFactory("NoSuchEnv-v0")()
    with pytest.raises(ConfigError) as raised:  # gymnasium's own sentence ends in a period: one, not two
        EnvFactory("CartPole-v9")()
    assert str(raised.value) == (
        "gymnasium cannot make environment 'CartPole-v9': Environment version `v9` for environment `CartPole` "
        "doesn't exist. It provides versioned environments: [ `v0`, `v1` ]. Check env.id (any registered gymnasium "
        "id works, e.g. env=gym env.id=Acrobot-v1).")


def test_check_env_id_says_what_making_the_id_would_without_making_it() -> None:
    import importlib.util

    from corral.framework.env import check_env_id

    for bad in ("NoSuchEnv-v0", "CartPole-v9", "no_such_module:CartPole-v1"):
        with pytest.raises(ConfigError) as made:
            EnvFactory(bad)()  # the module:id raised ModuleNotFoundError before, not a ConfigError
        with pytest.raises(ConfigError) as checked:
            check_env_id(bad)
        assert str(checked.value) == str(made.value) and "\n" not in str(made.value)
    assert "'no_such_module' cannot be imported (No module named 'no_such_module')" in str(checked.value)
    for good in ("CartPole-v1", "Pendulum-v1", "corral.plugins.envs.cpu_heavy:corral/CPUHeavyCartPole-v1"):
        check_env_id(good)
    if importlib.util.find_spec("Box2D") is None:  # an extra that is not installed: said before making it
        with pytest.raises(ConfigError, match="'LunarLander-v3': Box2D is not installed"):
            check_env_id("LunarLander-v3")


def test_check_env_id_names_a_module_the_environments_module_cannot_import(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An environment whose module imports something missing (a dependency of its own, not a gymnasium
    extra): one line naming the missing module, not a traceback from the check."""
    from corral.framework.env import check_env_id

    (tmp_path / "needs_missing.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    gym.register("corral_test/NeedsMissing-v0", entry_point="needs_missing:Env")
    try:
        with pytest.raises(ConfigError) as raised:
            check_env_id("corral_test/NeedsMissing-v0")
        assert str(raised.value) == ("gymnasium cannot make environment 'corral_test/NeedsMissing-v0': No module named "
                                     "'no_such_dependency_xyz'. Check env.id (any registered gymnasium id works, e.g. "
                                     "env=gym env.id=Acrobot-v1).")
    finally:
        gym.registry.pop("corral_test/NeedsMissing-v0", None)


def _point_env(size: int = 3) -> gym.Env:
    """A module-level environment factory with one keyword (``size``); a bad size fails inside."""
    if size < 0:
        raise TypeError("size must be a non-negative int")  # an error of the env's own, not of a keyword
    return gym.make("CartPole-v1")


def _forwarding_env(**kwargs: Any) -> gym.Env:
    """A factory that hands every keyword on (its signature cannot say which it takes)."""
    return gym.make("CartPole-v1", **kwargs)


def _failing_forwarding_env(**kwargs: Any) -> gym.Env:
    """A factory that takes any keyword and fails for a reason of its own."""
    raise RuntimeError("no display")


def test_env_factory_names_keyword_arguments_the_environment_does_not_take() -> None:
    cartpole = (r"^environment EnvFactory\('CartPole-v1', kwargs=\{'foo': 1, 'max_episode_steps': 9, 'bar': 2\}\) does "
                r"not take the keyword arguments 'foo', 'bar': CartPoleEnv takes sutton_barto_reward, render_mode \(and "
                r"gymnasium.make: max_episode_steps, disable_env_checker\); check env.kwargs$")
    for call in ("check", "__call__"):  # said before making it (a run's precheck), and when making it
        with pytest.raises(ConfigError, match=cartpole):
            getattr(EnvFactory("CartPole-v1", {"foo": 1, "max_episode_steps": 9, "bar": 2}), call)()
    with pytest.raises(ConfigError, match=r"does not take the keyword argument 'colour': _point_env takes size; "
                                          r"check env.kwargs$"):
        EnvFactory(_point_env, {"colour": "red"})()
    # **kwargs handed on (MuJoCo's constructors): the constructor's own TypeError, in one line, also from
    # check(), which makes one environment to find out (it passed, and the run failed after its directory)
    for call in ("check", "__call__"):
        with pytest.raises(ConfigError, match=r"does not take these keyword arguments: CartPoleEnv.__init__\(\) got "
                                              r"an unexpected keyword argument 'foo'; check env.kwargs$"):
            getattr(EnvFactory(_forwarding_env, {"foo": 1}), call)()
    EnvFactory(_forwarding_env, {"max_episode_steps": 5}).check()
    EnvFactory(_failing_forwarding_env, {"foo": 1}).check()  # another error in making it: the run's to report
    with pytest.raises(TypeError, match="size must be"):  # not a keyword problem: left as it is
        EnvFactory(_point_env, {"size": -1})()
    EnvFactory(_point_env, {"size": 2})().close()
    EnvFactory("CartPole-v1", {"max_episode_steps": 9, "render_mode": "rgb_array"}).check()


def test_make_env() -> None:
    live = gym.make("CartPole-v1")
    copy = make_env(live)
    assert copy is not live and copy.observation_space == live.observation_space
    assert isinstance(make_env(EnvFactory("Pendulum-v1")).action_space, gym.spaces.Box)
    with pytest.raises(ConfigError, match="not a gymnasium.Env"):
        make_env(lambda: 3)
    with pytest.raises(ConfigError):
        make_env(42)  # type: ignore[arg-type]
    assert is_new_env(live) and is_new_env(EnvFactory("CartPole-v1"))
    assert not is_new_env(lambda env: env)


# ---------------------------------------------------------------------- seeds
def test_child_seed_is_spawn() -> None:
    root = np.random.SeedSequence(1234)
    spawned = np.random.SeedSequence(1234).spawn(5)
    for i in range(5):
        assert np.array_equal(child_seed(root, i).generate_state(4), spawned[i].generate_state(4))
    grand = np.random.SeedSequence(1234).spawn(3)[2].spawn(4)[3]
    assert np.array_equal(child_seed(root, 2, 3).generate_state(4), grand.generate_state(4))
    # Stateless: asking twice gives the same child, unlike spawn().
    assert np.array_equal(child_seed(root, 0).generate_state(4), child_seed(root, 0).generate_state(4))
    # Not seed + i.
    assert not np.array_equal(child_seed(root, 1).generate_state(4), np.random.SeedSequence(1235).generate_state(4))


def test_seed_int_and_as_seed_sequence() -> None:
    s = as_seed_sequence(5)
    assert as_seed_sequence(s) is s
    assert seed_int(s) == seed_int(np.random.SeedSequence(5))
    assert 0 <= seed_int(s) < 2**32
    assert seed_int(as_seed_sequence(None)) != seed_int(as_seed_sequence(None))


def test_env_rng_state_round_trip() -> None:
    a = gym.make("CartPole-v1")
    assert env_rng_state(a) is None  # never seeded
    a.reset(seed=3)
    state = env_rng_state(a)
    expected = a.reset()[0]
    b = gym.make("CartPole-v1")
    b.reset(seed=99)
    set_env_rng_state(b, state)
    np.testing.assert_array_equal(b.reset()[0], expected)
    # The saved state is a copy: a's later draws did not change it.
    set_env_rng_state(b, state)
    np.testing.assert_array_equal(b.reset()[0], expected)


# ---------------------------------------------------------------------- how episodes end
def test_pole_falling_is_terminal() -> None:
    worker = DefaultWorker(seed=0, max_episode_length=500)
    worker.update_env(EnvFactory("CartPole-v1"))
    worker.update_agent(always_right(cartpole_policy()))
    b = worker.rollout(n_episodes=3)
    assert b.n_episodes == 3
    assert (b.lengths < 100).all()
    check_well_formed(b)
    ends = b.step_types[np.cumsum(b.lengths) - 1]
    assert (ends == StepType.TERMINAL).all() and fell(b.last_observations).all()
    assert b.terminals.sum() == 3 and not b.timeouts.any()


def test_worker_max_episode_length_cut_is_timeout() -> None:
    worker = VecWorker(seed=1, max_episode_length=20, n_envs=4)
    worker.update_env(EnvFactory("CartPole-v1"))
    worker.update_agent(cartpole_policy())
    b = worker.rollout(n_episodes=40)
    check_ends(b, 20)


@pytest.mark.parametrize(
    "factory",
    [EnvFactory("CartPole-v1", {"max_episode_steps": 15}), EnvFactory(cartpole_without_spec, {"max_episode_steps": 15})],
    ids=["gym.make-max_episode_steps", "TimeLimit-wrapper-only"],
)
def test_env_time_limit_is_timeout(factory: EnvFactory) -> None:
    # The worker's own limit (100) is larger: the cut comes from gymnasium's `truncated` flag.
    worker = VecWorker(seed=2, max_episode_length=100, n_envs=4)
    worker.update_env(factory)
    worker.update_agent(cartpole_policy(1))
    b = worker.rollout(n_episodes=40)
    check_ends(b, 15)


def test_env_without_any_time_limit_needs_max_episode_length() -> None:
    worker = DefaultWorker(seed=0, max_episode_length=None)
    with pytest.raises(ConfigError, match="max_episode_length"):
        worker.update_env(EnvFactory(CartPoleEnv))


def test_a_limit_above_the_environments_own_time_limit_is_named() -> None:
    from corral.framework.env import limit_above_time_limit

    env = gym.make("CartPole-v1")  # TimeLimit 500
    assert limit_above_time_limit(env, None) is None
    assert limit_above_time_limit(env, 500) is None and limit_above_time_limit(env, 200) is None
    assert "above CartPole-v1's own time limit of 500 steps" in str(limit_above_time_limit(env, 501))
    assert limit_above_time_limit(gym.make("CartPole-v1", max_episode_steps=1000), 1000) is None
