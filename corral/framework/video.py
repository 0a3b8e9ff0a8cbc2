"""Videos of evaluation episodes: environments that record MP4 files, and reading them back.

Recording needs the ``corral[video]`` extra (moviepy, the writer behind gymnasium's
``RecordVideo``); :func:`require_video` and :func:`check_recordable` fail with one line before any
work when it is missing or the environment renders no ``rgb_array`` frames. A
:class:`RecordedEnvFactory` is an environment recipe that records every episode; evaluation
(:mod:`corral.framework.evaluation`, whose :func:`~corral.framework.evaluation.record_video` records
the first evaluation episode) runs its workers on them. :func:`read_video_frames` and
:func:`encode_gif` read a video back for the loggers (TensorBoard shows GIFs).
"""

from __future__ import annotations

import errno
import gc
import io
import os
import re
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import RecordVideo

from corral.framework.env import EnvFactory, make_env
from corral.framework.errors import ConfigError

#: The extra that brings what gymnasium's RecordVideo needs to write MP4 files.
VIDEO_EXTRA = "corral[video]"


#: The ``episode_infos`` key of a worker whose environments all step together (so every slot records,
#: taken episode or not): the slot each episode came from. A slot's taken episodes are its first ones,
#: so an evaluation keeps slot ``s``'s first ``n`` videos, ``n`` the taken episodes from ``s``.
VIDEO_SLOT_INFO = "video_slot"


@dataclass
class RecordedEnvFactory(EnvFactory):
    """An environment recipe whose environments render ``rgb_array`` frames and record every episode
    to MP4 files in ``video_folder`` through gymnasium's ``RecordVideo``.

    ``fn`` is the run's environment (an EnvFactory, a callable or a live Env). Slot ``j`` of worker
    ``w`` writes ``{name_prefix}-w{w}-s{j}-episode-{k}.mp4`` for its ``k``-th episode. ``slot`` fixes
    the slot (:meth:`for_slot`; a VectorEnv's slot ``j``, made in a process of its own under
    ``worker.backend=async``); None: each environment made is the next slot.
    """

    video_folder: str = "videos"
    name_prefix: str = "eval"
    worker: int = 0
    slot: int | None = None
    _made: int = field(default=0, repr=False)

    def for_slot(self, slot: int) -> RecordedEnvFactory:
        """This recipe for slot ``slot`` only: every environment it makes records as that slot."""
        return replace(self, slot=slot)

    def __call__(self) -> gym.Env:
        """A fresh recording environment (the fixed slot, else the next one)."""
        require_video()
        env = _rgb_array_env(self.fn, self.kwargs)
        slot = self._made if self.slot is None else self.slot
        self._made += 1
        with warnings.catch_warnings():  # the folder is shared by every slot, and may hold earlier videos
            warnings.filterwarnings("ignore", message=".*Overwriting existing videos.*")
            return _WholeEpisodeVideo(env, self.video_folder, episode_trigger=_always, disable_logger=True,
                                      name_prefix=f"{self.name_prefix}-w{self.worker}-s{slot}")


class _WholeEpisodeVideo(RecordVideo):  # type: ignore[misc]
    """gymnasium's ``RecordVideo``, writing each frame it captured once, in order.

    RecordVideo captures the reset frame and one frame per step (``N + 1`` for an episode of ``N``
    steps, ended by termination or truncation alike), but hands them to moviepy's ``ImageSequenceClip``,
    which writes ``int(duration * fps)`` frames of a ``duration`` summed from ``1 / fps`` per frame (one
    short for most lengths: the episode's last frame lost) and finds the frame for each time against
    float32 start times (with numpy 2, some frames shown twice and the next one skipped: at
    CartPole's 50 fps, frame 118 twice and no frame 124). Here the frames go to moviepy's ffmpeg writer
    as they are (the same encoder and settings ``write_videofile`` uses): the video holds all ``N + 1``."""

    def stop_recording(self) -> None:
        """Write the captured frames, each once, to ``{video_folder}/{video name}.mp4``."""
        frames, self.recorded_frames = self.recorded_frames, []
        if frames:
            _write_mp4(os.path.join(self.video_folder, f"{self._video_name}.mp4"), frames, self.frames_per_sec)
        self.recording = False
        self._video_name = None
        if self.gc_trigger and self.gc_trigger(self.episode_id):  # as RecordVideo does after a video
            gc.collect()


def _write_mp4(path: str, frames: list[Any], fps: float) -> None:
    """``frames`` (``[H, W, 3+]`` arrays) as an H.264 MP4 at ``fps``, one video frame per frame."""
    from moviepy.video.io.ffmpeg_writer import FFMPEG_VideoWriter

    height, width = np.shape(frames[0])[:2]
    with FFMPEG_VideoWriter(path, (width, height), fps, codec="libx264", preset="medium") as writer:
        for frame in frames:
            writer.write_frame(np.ascontiguousarray(np.asarray(frame)[:, :, :3], dtype=np.uint8))


def recording_envs(env: Any, video_folder: str | Path, n_workers: int = 1, name_prefix: str = "eval") -> Any:
    """``env`` as recording environments for :func:`~corral.framework.evaluation.evaluation_episodes`
    (one recipe per worker). Videos an earlier recording left under the same names are deleted first
    (they would be overwritten or, from a longer run, mistaken for this one's); see :func:`recorded_videos`."""
    Path(video_folder).mkdir(parents=True, exist_ok=True)
    for old in recorded_videos(video_folder, name_prefix):
        old.unlink(missing_ok=True)
    recipes = [RecordedEnvFactory(env, {}, video_folder=str(video_folder), name_prefix=name_prefix, worker=w)
               for w in range(n_workers)]
    return recipes if n_workers > 1 else recipes[0]


def recorded_videos(video_folder: str | Path, name_prefix: str = "eval") -> list[Path]:
    """The videos :func:`recording_envs` recipes named ``name_prefix`` wrote, by worker, slot and episode."""
    pattern = re.compile(rf"{re.escape(name_prefix)}-w(\d+)-s(\d+)-episode-(\d+)\.mp4")
    found = []
    for path in Path(video_folder).glob(f"{name_prefix}-w*-s*-episode-*.mp4"):
        m = pattern.fullmatch(path.name)
        if m:
            found.append((tuple(int(g) for g in m.groups()), path))
    return [path for _, path in sorted(found)]


def require_video() -> None:
    """Raise a one-line ConfigError naming the extra when gymnasium's RecordVideo cannot write MP4s."""
    try:
        import moviepy  # noqa: F401  (gymnasium's RecordVideo writes MP4 files with it)
    except ImportError:
        raise ConfigError(
            f"recording videos needs moviepy, which is not installed; install the extra: pip install '{VIDEO_EXTRA}'"
        ) from None


def check_recordable(env: Any, worker_class: Any = None, worker_args: Mapping[str, Any] | None = None) -> None:
    """Fail early, with one clear line, when videos of ``env`` cannot be recorded: the extra is
    missing, the workers (``worker_class`` with ``worker_args``) cannot wrap their environments one by
    one (a worker class's ``recording_problem(worker_args)`` says why, else None), the environment
    does not render ``rgb_array`` frames, or it cannot render one here (MuJoCo without an OpenGL it
    can use: a machine without a display needs ``MUJOCO_GL``)."""
    require_video()
    problem = getattr(worker_class, "recording_problem", None)
    if callable(problem) and (why := problem(dict(worker_args or {}))):
        raise ConfigError(why)
    probe = _rgb_array_env(env.fn if isinstance(env, RecordedEnvFactory) else env, {})
    with warnings.catch_warnings():  # a MuJoCo renderer that cannot start: glfw's notes on the way
        warnings.filterwarnings("ignore", module="glfw")
        try:
            probe.reset(seed=0)
            probe.render()
        except Exception as exc:  # noqa: BLE001 - whatever the renderer raises, said in one line
            name = getattr(probe.spec, "id", None) or type(probe.unwrapped).__name__
            why = (str(exc).strip().splitlines() or [""])[0]
            hint = (" (MuJoCo renders without a display with MUJOCO_GL=egl on a GPU, or MUJOCO_GL=osmesa with OSMesa "
                    "installed)" if "mujoco" in type(probe.unwrapped).__module__ else "")
            raise ConfigError(f"environment {name} cannot render a frame on this machine ({type(exc).__name__}: "
                              f"{why}), so its episodes cannot be recorded{hint}; evaluate it without --video / "
                              "trainer.video_every") from None
        finally:
            probe.close()


def check_video_complete(path: str | Path) -> None:
    """Raise an ``OSError`` naming ``path`` when the MP4 file is incomplete: cut short, or without the
    index (the ``moov`` box) that ffmpeg writes last. A disk that fills up while a video is written
    leaves such a file, and the writer (moviepy) does not notice. Reads the boxes' headers only."""
    size = os.path.getsize(path)
    found_index, offset = False, 0
    with open(path, "rb") as f:
        while offset < size:
            f.seek(offset)
            header = f.read(16)
            if len(header) < 8:
                break
            length, kind = int.from_bytes(header[:4], "big"), header[4:8]
            if length == 1 and len(header) == 16:  # a 64-bit size follows the type
                length = int.from_bytes(header[8:16], "big")
            elif length == 0:  # the box runs to the end of the file
                length = size - offset
            if length < 8 or offset + length > size:
                break
            found_index = found_index or kind == b"moov"
            offset += length
    if offset != size or not found_index:
        raise OSError(errno.EIO, "the MP4 file is incomplete (cut short, or without its index): was the disk full?",
                      str(path))


def read_video_frames(path: str | Path) -> np.ndarray:
    """The frames of an MP4 file as a ``[T, H, W, 3]`` uint8 array (imageio with ffmpeg)."""
    import imageio.v2 as imageio

    reader: Any = imageio.get_reader(str(path), format="ffmpeg")  # type: ignore[arg-type]
    try:
        return np.stack([np.asarray(frame) for frame in reader])
    finally:
        reader.close()


def encode_gif(frames: np.ndarray, fps: int = 30) -> bytes:
    """``[T, H, W, 3]`` uint8 frames as an animated GIF (what TensorBoard's video panel shows)."""
    from PIL import Image

    images = [Image.fromarray(np.ascontiguousarray(f)) for f in frames]
    buf = io.BytesIO()
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=max(1, round(1000 / fps)),
                   loop=0)
    return buf.getvalue()


def _always(episode_id: int) -> bool:
    return True


def _rgb_array_env(source: Any, kwargs: Mapping[str, Any]) -> gym.Env:
    """An environment from ``source`` that renders ``rgb_array`` frames, or a clear error."""
    if not os.environ.get("DISPLAY"):  # rgb_array frames need no display; keep SDL from looking for one
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    # nor sound: pygame.init() opens an audio device (`error: XDG_RUNTIME_DIR is invalid ...` where there is none)
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    with warnings.catch_warnings():  # gymnasium warns about a render mode the env lacks; we say it once
        warnings.filterwarnings("ignore", message=".*render_mode.*")
        if isinstance(source, EnvFactory) and not isinstance(source, RecordedEnvFactory):
            try:
                env = EnvFactory(source.fn, {**dict(source.kwargs), "render_mode": "rgb_array"})()
            except (TypeError, ConfigError) as exc:  # a callable recipe that takes no render_mode
                if isinstance(exc, ConfigError) and "render_mode" not in str(exc):
                    raise  # another keyword of env.kwargs: its own line
                env = source()  # without frames: said below, not as an env.kwargs problem
        elif isinstance(source, str):
            env = EnvFactory(source, {**dict(kwargs), "render_mode": "rgb_array"})()
        else:
            env = make_env(source)
    if env.render_mode not in ("rgb_array", "rgb_array_list"):
        name = getattr(env.spec, "id", None) or type(env.unwrapped).__name__
        modes = list(env.metadata.get("render_modes", []))
        env.close()
        raise ConfigError(
            f"environment {name} does not render rgb_array frames (its render modes: {modes}), so its episodes "
            "cannot be recorded; evaluate it without --video / trainer.video_every"
        )
    return env


__all__ = [
    "RecordedEnvFactory", "VIDEO_EXTRA", "VIDEO_SLOT_INFO", "check_recordable", "check_video_complete", "encode_gif",
    "read_video_frames", "recorded_videos",
    "recording_envs", "require_video",
]
