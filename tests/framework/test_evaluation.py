"""Evaluation goes through the run's workers: for every built-in worker and a Box and a Discrete
environment, one deterministic policy gets the same episode from evaluation and from sampling
(episode limit, action clipping, wrappers); evaluation has seeds of its own and never changes
training episodes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from corral.framework.batch import EpisodeBatch, StepType
from corral.framework.env import EnvFactory, EnvSpec
from corral.framework.errors import ConfigError, CorralError
from corral.framework.evaluation import (
    EVAL_BRANCH,
    episode_statistics,
    evaluate,
    evaluation_episodes,
    evaluation_factory,
)
from corral.framework.plugins import get_registry
from corral.framework.policy import Policy
from corral.framework.worker import WorkerFactory
from corral.meta.rl2_env import RL2Env

#: The episode limit of every run here (``env.max_episode_length``); the Box env never ends by itself.
LIMIT = 40


class LineEnv(gym.Env):
    """A point on a line; deterministic, whatever the seed. Box: never ends by itself, the reward
    depends on the action the environment receives (so clipping shows). Discrete: ends (TERMINAL)
    when the point reaches 6."""

    def __init__(self, discrete: bool = False) -> None:
        self.discrete = discrete
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.x = 0.0
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.x, self.t / 10], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.x, self.t = 0.0, 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = float(int(action) - 1) if self.discrete else float(np.asarray(action).reshape(-1)[0])
        if not self.discrete and not -1.0 <= a <= 1.0:
            raise AssertionError(f"the environment received an unclipped action {a}")
        self.x += a
        self.t += 1
        reward = -a * a + 0.1 * self.x
        return self._obs(), reward, self.discrete and self.x >= 6, False, {}


def line_env(discrete: bool = False, rl2: bool = False) -> gym.Env:
    """A LineEnv, wrapped for RL2 when asked."""
    env: gym.Env = LineEnv(discrete)
    return RL2Env(env) if rl2 else env


class LinearPolicy(Policy):
    """Deterministic: a fixed linear function of the observation (Box: far outside the bounds, so the
    worker must clip; Discrete: its argmax). Not deterministic: noise on top, so a forgotten
    ``deterministic`` shows."""

    def __init__(self, spec: EnvSpec) -> None:
        self.discrete = isinstance(spec.action_space, gym.spaces.Discrete)
        n_out = int(spec.action_space.n) if self.discrete else 1
        obs_dim = int(np.prod(spec.observation_space.shape))
        scale = 1.0 if self.discrete else 0.01  # Box: the action stays above the upper bound (1)
        self.w = scale * np.linspace(-0.3, 0.5, obs_dim * n_out, dtype=np.float32).reshape(obs_dim, n_out)
        self.b = np.array([0.0, 0.1, 0.2], np.float32)[:n_out] if self.discrete else np.array([3.0], np.float32)
        self.rng = np.random.default_rng(0)

    def get_actions(self, observations: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        out = observations.reshape(len(observations), -1) @ self.w + self.b
        if not self.deterministic:
            out = out + self.rng.normal(size=out.shape).astype(np.float32)
        if self.discrete:
            return out.argmax(axis=1), {}
        return out.astype(np.float32), {}

    def get_param_values(self) -> dict[str, np.ndarray]:
        return {"w": self.w, "b": self.b}

    def set_param_values(self, params: dict[str, np.ndarray]) -> None:
        self.w, self.b = params["w"], params["b"]


def pearl_policy(spec: EnvSpec) -> Policy:
    from corral.plugins.policies.pearl import PEARLPolicy

    torch.manual_seed(0)
    return PEARLPolicy(spec, hidden_sizes=[8], encoder_hidden_sizes=[8], latent_size=2)


#: (worker, worker settings, environments it runs, wraps for RL2, policy).
WORKER_CASES: dict[str, tuple[dict[str, Any], tuple[bool, ...], bool, Any]] = {
    "default": ({}, (False, True), False, LinearPolicy),
    "vec": ({"n_envs": 3}, (False, True), False, LinearPolicy),
    "fragment": ({"n_envs": 1, "timesteps_per_call": LIMIT}, (False, True), False, LinearPolicy),
    "rl2": ({"n_episodes_per_trial": 2, "n_envs": 2}, (False, True), True, LinearPolicy),
    # PEARL's agent is a tanh-Gaussian actor: Box actions only.
    "pearl": ({"n_episodes_per_trial": 2, "n_envs": 1}, (False,), False, pearl_policy),
    "vector": ({"n_envs": 3, "backend": "sync"}, (False, True), False, LinearPolicy),
}


def worker_cases() -> list[Any]:
    registered = {r.name for r in get_registry() if r.kind == "worker"}
    cases = []
    for name, (args, envs, rl2, make_policy) in WORKER_CASES.items():
        for discrete in envs:
            marks = [] if name in registered else [pytest.mark.skip(reason=f"worker={name} is not registered")]
            cases.append(pytest.param(name, args, discrete, rl2, make_policy, marks=marks,
                                      id=f"{name}-{'discrete' if discrete else 'box'}"))
            if name == "vector":  # its fragment mode (off-policy) too
                cases.append(pytest.param(name, {**args, "n_envs": 1, "timesteps_per_call": LIMIT}, discrete, rl2,
                                          make_policy, marks=marks,
                                          id=f"vector_fragments-{'discrete' if discrete else 'box'}"))
    return cases


def test_every_registered_worker_is_covered() -> None:
    registered = {r.name for r in get_registry() if r.kind == "worker" and r.source.distribution == "corral"}
    assert registered <= set(WORKER_CASES), f"add a case for {sorted(registered - set(WORKER_CASES))}"


def same_steps(a: EpisodeBatch, b: EpisodeBatch) -> list[str]:
    """What differs between two episodes (step arrays and the last observation)."""
    diffs = []
    for name in ("observations", "actions", "rewards", "step_types", "lengths", "last_observations"):
        x, y = getattr(a, name), getattr(b, name)
        if x.shape != y.shape or not np.array_equal(x, y):
            diffs.append(f"{name}: {x.tolist()[:6]}... vs {y.tolist()[:6]}...")
    return diffs


@pytest.mark.parametrize("worker, args, discrete, rl2, make_policy", worker_cases())
def test_evaluation_runs_the_episodes_sampling_runs(worker: str, args: dict, discrete: bool, rl2: bool,
                                                    make_policy: Any) -> None:
    env = EnvFactory(line_env, {"discrete": discrete, "rl2": rl2})
    spec = EnvSpec.from_env(env(), LIMIT)
    policy = make_policy(spec)
    run_factory = WorkerFactory(seed=5, max_episode_length=LIMIT, n_workers=1,
                                worker_class=get_registry().get("worker", worker).factory, worker_args=args)
    sampler_cls = get_registry().get("sampler", "local").factory

    # Sampling, as training samples (the policy put in deterministic mode by hand).
    agent = copy.deepcopy(policy)
    agent.deterministic = True
    with sampler_cls.from_worker_factory(run_factory, agents=agent, envs=env) as sampler:
        sampled = sampler.obtain_samples(0, 2 * LIMIT, None).split()

    # Evaluation: the policy as the algorithm holds it (stochastic); evaluation makes it deterministic.
    assert not policy.deterministic
    evaluated = evaluation_episodes(policy, env, evaluation_factory(run_factory), 2).split()
    assert not policy.deterministic, "evaluation must act with a copy"
    assert len(evaluated) == 2 and all(e.complete.all() for e in evaluated)

    # a fragment worker's second piece continues nothing here
    n_compare = 1 if worker == "fragment" or args.get("timesteps_per_call") else 2
    for i in range(n_compare):
        assert same_steps(evaluated[i], sampled[i]) == [], f"episode {i} differs"
    first = evaluated[0]
    # an RL2 trial ends TERMINAL (the meta-episode is over); its episodes' own ends are in env_infos
    last = first.env_infos["rl2_step_type"][-1] if rl2 else first.step_types[-1]
    if discrete:
        assert last == StepType.TERMINAL
    else:  # cut by the configured limit, actions clipped as the workers clip them
        assert last == StepType.TIMEOUT
        assert first.lengths[0] == (2 * LIMIT if rl2 else LIMIT)
        if make_policy is LinearPolicy:
            assert (first.actions > 1).all()  # the policy's own action is recorded ...
            assert first.rewards[0] == pytest.approx(-1.0 + 0.1)  # ... the environment got the clipped one

    stats = evaluate(policy, env, n_episodes=2, worker_factory=run_factory)
    expected = episode_statistics(EpisodeBatch.concatenate(*evaluated))
    assert stats == expected


def test_fragment_worker_evaluation_stitches_whole_episodes() -> None:
    """Slots of a fragment worker are cut every few steps; evaluation joins the pieces and takes each
    slot's first, then second, episode, whatever their lengths."""
    env = EnvFactory(line_env, {"discrete": False})
    spec = EnvSpec.from_env(env(), LIMIT)
    fragment = get_registry().get("worker", "fragment").factory
    factory = WorkerFactory(seed=5, max_episode_length=LIMIT, worker_class=fragment,
                            worker_args={"n_envs": 2, "timesteps_per_call": 7})
    episodes = evaluation_episodes(LinearPolicy(spec), env, evaluation_factory(factory), 3)
    assert episodes.lengths.tolist() == [LIMIT] * 3
    assert "prior_length" not in episodes.episode_infos
    one = evaluation_episodes(LinearPolicy(spec), env, evaluation_factory(
        WorkerFactory(seed=5, max_episode_length=LIMIT, worker_class=fragment,
                      worker_args={"n_envs": 1, "timesteps_per_call": 100})), 1)
    assert same_steps(episodes.split()[0], one) == []


def test_no_limit_is_a_clear_error_not_a_hang() -> None:
    env = EnvFactory(line_env, {"discrete": False})
    with pytest.raises(CorralError, match="set env.max_episode_length"):
        evaluate(LinearPolicy(EnvSpec.from_env(env())), env, n_episodes=1, seed=1)


def first_observations(batch: EpisodeBatch) -> np.ndarray:
    return batch.observations[batch.starts]


def test_evaluation_has_its_own_seeds_and_leaves_training_episodes_alone() -> None:
    from corral.plugins.policies.mlp import MLPPolicy

    env = EnvFactory("CartPole-v1")
    spec = EnvSpec.from_env(env())
    torch.manual_seed(0)
    policy = MLPPolicy(spec, hidden_sizes=[8])
    vec = get_registry().get("worker", "vec").factory
    local = get_registry().get("sampler", "local").factory
    factory = WorkerFactory(seed=3, max_episode_length=None, worker_class=vec, worker_args={"n_envs": 2})

    def train_batches(evaluate_between: bool) -> list[EpisodeBatch]:
        with local.from_worker_factory(factory, agents=policy, envs=env) as sampler:
            out = [sampler.obtain_samples(0, 300, None)]
            if evaluate_between:
                evaluate(policy, env, n_episodes=3, worker_factory=factory)
            out.append(sampler.obtain_samples(1, 300, None))
        return out

    plain, with_eval = train_batches(False), train_batches(True)
    for a, b in zip(plain, with_eval):
        assert a.differences(b) == []
    evaluated = evaluation_episodes(policy, env, evaluation_factory(factory), 2)
    # evaluation starts from other states than training's slots (its own seed branch) ...
    assert not np.isin(first_observations(evaluated)[:, 0], first_observations(plain[0])[:, 0]).any()
    # ... the same ones every call, and other ones for another seed
    again = evaluation_episodes(policy, env, evaluation_factory(factory), 2)
    assert evaluated.differences(again) == []
    other = evaluation_episodes(policy, env, evaluation_factory(factory, seed=4), 2)
    assert not np.array_equal(first_observations(other), first_observations(evaluated))
    assert evaluation_factory(factory).worker_seed(0).spawn_key == (EVAL_BRANCH, 0)


def test_parallel_evaluation_spreads_episodes_over_workers() -> None:
    env = EnvFactory("CartPole-v1")
    spec = EnvSpec.from_env(env())
    policy = LinearPolicy(spec)
    factory = WorkerFactory(seed=3, max_episode_length=None)
    two = evaluation_episodes(policy, env, evaluation_factory(factory, n_workers=2), 3)
    assert two.n_episodes == 3
    one = evaluation_episodes(policy, env, evaluation_factory(factory, n_workers=1), 2)
    # worker 0 of the two-worker evaluation is the one-worker evaluation's worker
    assert EpisodeBatch.concatenate(*two.split()[:2]).differences(one) == []


def test_issue_example_mountain_car_scores_the_clipped_action() -> None:
    """Issue 18: a policy whose mean is 3.0 on MountainCarContinuous (bounds +-1) scored -899.5 in
    evaluation, -99.9 when clipped as the workers clip: 999 steps of -0.1 * 1.0**2."""
    from corral.plugins.policies.mlp import MLPPolicy

    env = EnvFactory("MountainCarContinuous-v0")
    policy = MLPPolicy(EnvSpec.from_env(env()), hidden_sizes=[4])
    with torch.no_grad():
        for p in policy.net.parameters():
            p.zero_()
        policy.net[-1].bias.fill_(3.0)
    stats = evaluate(policy, env, n_episodes=2, seed=1)
    assert stats["eval/return_mean"] == pytest.approx(-99.9, abs=1e-4)  # float32 rewards
    assert stats["eval/episode_length"] == 999


def _recorded_evaluation(tmp_path: Path, worker: str, worker_args: dict[str, Any], n_episodes: int,
                         n_workers: int = 1) -> tuple[Any, Any, WorkerFactory, EpisodeBatch]:
    """``(policy, env, factory, episodes)`` of a CartPole evaluation recorded to ``tmp_path``."""
    pytest.importorskip("moviepy", reason="the video extra (corral[video]) is not installed")
    from corral.framework.evaluation import recording_envs
    from corral.plugins.policies.mlp import MLPPolicy

    env = EnvFactory("CartPole-v1")
    torch.manual_seed(0)
    policy = MLPPolicy(EnvSpec.from_env(env()), hidden_sizes=[8])
    factory = WorkerFactory(seed=5, max_episode_length=None, worker_class=get_registry().get("worker", worker).factory,
                            worker_args=worker_args)
    episodes = evaluation_episodes(policy, recording_envs(env, tmp_path, n_workers=n_workers),
                                   evaluation_factory(factory, n_workers=n_workers), n_episodes)
    return policy, env, factory, episodes


def _assert_only_these_videos(tmp_path: Path, names: list[str], lengths: list[int]) -> None:
    """``tmp_path`` holds exactly the videos ``names``, of episodes of ``lengths``: one frame after the
    reset and one per step, each written once (corral.framework.video)."""
    from corral.framework.evaluation import read_video_frames

    assert sorted(p.name for p in tmp_path.glob("*.mp4")) == sorted(names)
    for name, length in zip(names, lengths):
        assert len(read_video_frames(tmp_path / name)) == length + 1, name


def test_fragment_worker_videos_are_the_episodes_taken(tmp_path: Path) -> None:
    """The slots of a fragment worker run on past the episodes evaluation takes; only the taken
    episodes keep their videos, one frame after the reset and one per step."""
    *_, episodes = _recorded_evaluation(tmp_path, "fragment", {"n_envs": 2, "timesteps_per_call": 7}, 3)
    # taken: slot 0's first, slot 1's first, slot 0's second
    names = ["eval-w0-s0-episode-0.mp4", "eval-w0-s1-episode-0.mp4", "eval-w0-s0-episode-1.mp4"]
    _assert_only_these_videos(tmp_path, names, episodes.lengths.tolist())


def test_vector_worker_videos_are_the_episodes_taken(tmp_path: Path) -> None:
    """All of a VectorEnv's environments step together, so every slot recorded, and ``corral eval
    --video --episodes 2`` on a run with 16 environments left 21 videos. Now only the taken episodes
    keep theirs: each worker's slots in the order the episodes were taken, per worker."""
    from corral.framework.video import VIDEO_SLOT_INFO

    policy, env, factory, episodes = _recorded_evaluation(tmp_path, "vector", {"n_envs": 3, "backend": "sync"}, 8,
                                                          n_workers=2)
    slots = episodes.episode_infos[VIDEO_SLOT_INFO].tolist()
    names, seen = [], {}
    for i, slot in enumerate(slots):  # 4 episodes per worker: each slot's first, then the earliest to end
        w = i // 4
        k = seen[(w, slot)] = seen.get((w, slot), -1) + 1
        names.append(f"eval-w{w}-s{slot}-episode-{k}.mp4")
    assert sorted(slots[:3]) == [0, 1, 2] and sorted(slots[4:7]) == [0, 1, 2]
    _assert_only_these_videos(tmp_path, names, episodes.lengths.tolist())
    plain = evaluation_episodes(policy, env, evaluation_factory(factory, n_workers=2), 8)
    assert VIDEO_SLOT_INFO not in plain.episode_infos  # only a recording says which slot
    assert plain.episode_returns.tolist() == episodes.episode_returns.tolist()  # the same episodes, recorded


def _no_render_mode_env(size: int = 3) -> Any:
    """An environment whose recipe takes a keyword of its own (``size``) but no ``render_mode``."""
    import gymnasium as gym

    class Plain(gym.Env):
        observation_space = gym.spaces.Box(-1, 1, (size,))
        action_space = gym.spaces.Discrete(2)

    return Plain()


def test_an_environment_that_takes_no_render_mode_is_named_as_not_rendering() -> None:
    """corral passes ``render_mode`` to record: a recipe with keywords of its own that takes none was
    "does not take these keyword arguments: ... 'render_mode'; check env.kwargs", a setting the user
    never gave."""
    pytest.importorskip("moviepy", reason="the video extra (corral[video]) is not installed")
    from corral.framework.video import check_recordable

    with pytest.raises(ConfigError) as info:
        check_recordable(EnvFactory(_no_render_mode_env, {"size": 4}))
    assert "does not render rgb_array frames" in str(info.value), str(info.value)
    assert "env.kwargs" not in str(info.value)
    with pytest.raises(ConfigError) as other:  # another keyword it does not take stays the env.kwargs line
        check_recordable(EnvFactory(_no_render_mode_env, {"sise": 4}))
    assert "check env.kwargs" in str(other.value) and "sise" in str(other.value)
