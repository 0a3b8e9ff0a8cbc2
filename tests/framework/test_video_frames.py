"""A recorded episode's video shows the whole episode: an episode of ``N`` steps is ``N + 1`` frames
(the reset state, then the state after each step, the terminal or truncated one last), decoded
with the reader the video extra installs (imageio with ffmpeg), for every worker that records.

gymnasium's ``RecordVideo`` captures those ``N + 1`` frames, but its writer (moviepy's
``ImageSequenceClip``) wrote one fewer for most lengths (``int(duration * fps)`` of a duration summed
from ``1 / fps`` per frame: at CartPole's 50 fps every length from 207 steps on lost the episode's
last frame), and picked frames by float32 start times, showing some twice and skipping the next."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from corral.framework.batch import EpisodeBatch
from corral.framework.env import EnvFactory, EnvSpec
from corral.framework.evaluation import evaluation_episodes, evaluation_factory, record_video
from corral.framework.plugins import get_registry
from corral.framework.worker import WorkerFactory

pytest.importorskip("moviepy", reason="the video extra (corral[video]) is not installed")

from corral.framework.video import read_video_frames, recorded_videos, recording_envs  # noqa: E402

#: CartPole steps before its time limit in the truncated episodes: 211 frames, which moviepy cut to 210.
TRUNCATE_AT = 210
#: The policies' weights on (x, x_dot, theta, theta_dot): push the way the pole falls. The first
#: balances past the time limit (every episode truncated); the second falls after 149 to 259 steps.
BALANCES = [0.0, 0.0, 1.0, 1.0]
FALLS = [0.0, 0.0, 0.0, 1.0]

#: ``vector-async``: each environment in its own process (before: both processes recorded as slot 1, so
#: one slot's videos overwrote the other's and slot 0 had none).
WORKERS = [("default", {}), ("vec", {"n_envs": 2}), ("vector", {"n_envs": 2, "backend": "sync"}),
           ("vector", {"n_envs": 2, "backend": "async"})]
IDS = ["default", "vec", "vector", "vector-async"]


def _policy(env: EnvFactory, weights: list[float]) -> Any:
    """A deterministic CartPole policy: action 1 when ``weights . obs > 0``, else 0."""
    from corral.plugins.policies.mlp import MLPPolicy

    policy = MLPPolicy(EnvSpec.from_env(env()), hidden_sizes=[1])
    with torch.no_grad():
        policy.net[0].weight.copy_(torch.tensor([weights]))
        policy.net[0].bias.zero_()
        policy.net[2].weight.copy_(torch.tensor([[-1.0], [1.0]]))
        policy.net[2].bias.zero_()
    return policy


def _recorded(tmp_path: Path, worker: str, worker_args: dict[str, Any], ending: str,
              n_episodes: int) -> EpisodeBatch:
    """CartPole evaluation episodes ending by ``ending``, recorded to ``tmp_path`` (``corral eval --video``'s path)."""
    env = EnvFactory("CartPole-v1", {"max_episode_steps": TRUNCATE_AT} if ending == "truncated" else {})
    factory = WorkerFactory(seed=5, max_episode_length=None, worker_class=get_registry().get("worker", worker).factory,
                            worker_args=worker_args)
    return evaluation_episodes(_policy(env, BALANCES if ending == "truncated" else FALLS),
                               recording_envs(env, tmp_path), evaluation_factory(factory), n_episodes)


def _cartpole_frame(state: np.ndarray) -> np.ndarray:
    """CartPole's ``rgb_array`` frame of ``state`` (it draws the cart and the pole from the state alone)."""
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    env.reset(seed=0)
    env.unwrapped.state = np.asarray(state, dtype=np.float64)  # type: ignore[attr-defined]
    try:
        return np.asarray(env.render(), dtype=np.float64)
    finally:
        env.close()


def test_gymnasium_record_video_captures_the_reset_frame_and_one_per_step(tmp_path: Path) -> None:
    """The reference: gymnasium's RecordVideo on the same environment captures ``N + 1`` frames for an
    episode of ``N`` steps (here truncated at the time limit)."""
    from gymnasium.wrappers import RecordVideo

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = RecordVideo(gym.make("CartPole-v1", render_mode="rgb_array", max_episode_steps=TRUNCATE_AT),
                          str(tmp_path), episode_trigger=lambda _: True, disable_logger=True)
    obs, _ = env.reset(seed=5)
    steps, done, truncated = 0, False, False
    while not done:
        obs, _, terminated, truncated, _ = env.step(int(np.dot(BALANCES, obs) > 0))
        steps, done = steps + 1, bool(terminated or truncated)
    assert truncated and steps == TRUNCATE_AT
    assert len(env.recorded_frames) == TRUNCATE_AT + 1
    env.close()


@pytest.mark.parametrize("ending", ["truncated", "terminated"])
@pytest.mark.parametrize(("worker", "worker_args"), WORKERS, ids=IDS)
def test_every_episode_video_has_one_frame_per_state(tmp_path: Path, worker: str, worker_args: dict[str, Any],
                                                     ending: str) -> None:
    """Each episode's MP4 decodes to ``length + 1`` frames, whether it ended by termination or
    truncation, for every worker that records (before: ``length`` frames for episodes of 207+ steps)."""
    episodes = _recorded(tmp_path, worker, worker_args, ending, n_episodes=4)
    lengths = episodes.lengths.tolist()
    if ending == "truncated":
        assert lengths == [TRUNCATE_AT] * 4
    else:
        assert any(n >= 207 for n in lengths) and max(lengths) < 500, lengths  # lengths the old writer cut short
    videos = recorded_videos(tmp_path)
    assert len(videos) == 4, videos
    if worker != "default":  # two slots, two episodes each: each slot's own videos
        assert [v.name for v in videos] == [f"eval-w0-s{s}-episode-{e}.mp4" for s in (0, 1) for e in (0, 1)]
    frames = sorted(len(read_video_frames(v)) for v in videos)  # slot order, not the episodes' order
    assert frames == sorted(n + 1 for n in lengths), (frames, lengths)


@pytest.mark.parametrize("ending", ["truncated", "terminated"])
def test_the_video_starts_at_the_reset_state_and_ends_at_the_last_state(tmp_path: Path, ending: str) -> None:
    """The first frame shows the reset observation, the last the episode's final observation (the
    terminal or truncated state): the frame the old writer dropped."""
    episodes = _recorded(tmp_path, "default", {}, ending, n_episodes=3)
    ends = np.cumsum(episodes.lengths)
    for e, video in enumerate(recorded_videos(tmp_path)):  # the default worker: videos in episode order
        frames = read_video_frames(video).astype(np.float64)
        first, last = episodes.observations[ends[e] - episodes.lengths[e]], episodes.last_observations[e]
        before_last = episodes.observations[ends[e] - 1]
        assert len(frames) == episodes.lengths[e] + 1
        assert np.abs(frames[0] - _cartpole_frame(first)).mean() < 2.0, video.name  # compression noise only
        end_error = np.abs(frames[-1] - _cartpole_frame(last)).mean()
        assert end_error < 2.0, (video.name, end_error)
        if ending == "terminated":  # the falling pole moves a lot in the last step: the last state, not the one before
            assert end_error < np.abs(frames[-1] - _cartpole_frame(before_last)).mean() / 2, video.name


def test_trainer_video_every_video_shows_the_whole_episode(tmp_path: Path) -> None:
    """``trainer.video_every``'s recording (``record_video``, the first evaluation episode) holds every frame."""
    env = EnvFactory("CartPole-v1", {"max_episode_steps": TRUNCATE_AT})
    path, episode = record_video(_policy(env, BALANCES), env, WorkerFactory(seed=5, max_episode_length=None),
                                 tmp_path / "videos")
    assert episode.lengths.tolist() == [TRUNCATE_AT]
    assert len(read_video_frames(path)) == TRUNCATE_AT + 1


class _FrameCounter(gym.Env):  # type: ignore[misc]
    """An episode of ``n`` steps whose frame shows the step number in binary (9 black or white bars)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}
    observation_space = gym.spaces.Box(0.0, 1.0, (1,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, n: int = 150, render_mode: str | None = None) -> None:
        self.n, self.t, self.render_mode = n, 0, render_mode

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.full(1, self.t / self.n, np.float32), 0.0, self.t >= self.n, False, {}

    def render(self) -> np.ndarray:
        return _counter_frame(self.t)


def _counter_frame(t: int) -> np.ndarray:
    frame = np.zeros((32, 9 * 32, 3), np.uint8)
    for bit in range(9):
        frame[:, bit * 32:(bit + 1) * 32] = 255 * ((t >> bit) & 1)
    return frame


@pytest.mark.parametrize(("worker", "worker_args"), WORKERS, ids=IDS)
def test_each_state_is_shown_once_in_order(tmp_path: Path, worker: str, worker_args: dict[str, Any]) -> None:
    """Decoded frame ``k`` is the state after step ``k``, for every ``k``: no frame twice, none skipped
    (before: frames 118 and 143 twice, 124 and 149 never, in a 150-step episode at 50 fps)."""
    from corral.plugins.policies.mlp import MLPPolicy

    n = 150
    env = EnvFactory(_FrameCounter, {"n": n})
    factory = WorkerFactory(seed=0, max_episode_length=n + 10, worker_class=get_registry().get("worker", worker).factory,
                            worker_args=worker_args)
    episodes = evaluation_episodes(MLPPolicy(EnvSpec.from_env(env()), hidden_sizes=[2]), recording_envs(env, tmp_path),
                                   evaluation_factory(factory), 1)
    assert episodes.lengths.tolist() == [n]
    video = recorded_videos(tmp_path)[0]
    frames = read_video_frames(video).astype(np.float64)
    shown = [int(np.argmin([np.abs(f - _counter_frame(t)).mean() for t in range(n + 1)])) for f in frames]
    assert shown == list(range(n + 1)), [(k, t) for k, t in enumerate(shown) if k != t]
