"""Camera frames → mp4, the way LeRobot encodes its ``video`` features, without its PNG round trip.

LeRobot 0.6's defaults (``lerobot.configs.video.RGBEncoderConfig``): SVT-AV1 (``libsvtav1``, which
the FFmpeg bundled in PyAV's wheel has), ``yuv420p``, a keyframe every 2 frames (``g=2``),
``crf=30``, ``preset=12`` (SVT-AV1 maps it to its fastest, M10), ``fast-decode=0``::

    enc = VideoEncoder()                               # LeRobot's defaults
    enc = VideoEncoder(codec="h264", crf=23)           # libx264
    with Mp4Writer(path, fps=20, width=W, height=H, encoder=enc) as mp4:
        mp4.write(frames)                              # uint8 [n, H, W, 3]
    mp4.frames                                         # frames written so far

A writer sets every frame's ``pts`` to its running frame number (time base ``1/fps``), so
frame ``k`` of a file is at ``k / fps`` seconds: what LeRobot's ``from_timestamp`` /
``to_timestamp`` and its decoders' timestamp lookup assume.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from odsd.errors import ConfigError

CODECS: dict[str, tuple[str, str]] = {
    "libsvtav1": ("libsvtav1", "av1"),
    "av1": ("libsvtav1", "av1"),
    "libaom-av1": ("libaom-av1", "av1"),
    "h264": ("libx264", "h264"),
    "libx264": ("libx264", "h264"),
    "hevc": ("libx265", "hevc"),
    "libx265": ("libx265", "hevc"),
}
"""``--video-codec`` names → (FFmpeg encoder, the stream's canonical codec name LeRobot records)."""


@dataclass(frozen=True)
class VideoEncoder:
    """Encoder settings with LeRobot 0.6's defaults (``RGBEncoderConfig``)."""

    codec: str = "libsvtav1"
    pix_fmt: str = "yuv420p"
    g: int | None = 2
    crf: int | None = 30
    preset: int | str | None = 12
    fast_decode: int = 0
    extra_options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ConfigError(f"--video-codec must be one of {sorted(CODECS)}, not {self.codec!r}")
        if self.crf is not None and not 0 <= self.crf <= 63:
            raise ConfigError(f"--video-crf must be in 0..63, not {self.crf}")
        if self.g is not None and self.g < 1:
            raise ConfigError(f"the keyframe interval (g) must be >= 1, not {self.g}")

    @property
    def encoder_name(self) -> str:
        return CODECS[self.codec][0]

    @property
    def canonical_name(self) -> str:
        return CODECS[self.codec][1]

    def options(self, threads: int | None = None) -> dict[str, str]:
        """FFmpeg codec options, as LeRobot's ``VideoEncoderConfig.get_codec_options`` builds them."""
        opts: dict[str, str] = {}
        if self.g is not None:
            opts["g"] = str(self.g)
        name = self.encoder_name
        if self.crf is not None:
            opts["crf"] = str(self.crf)
        if name == "libsvtav1":
            if self.preset is not None:
                opts["preset"] = str(self.preset)
            params = [f"fast-decode={max(0, min(2, self.fast_decode))}"]
            if threads is not None:
                params.append(f"lp={threads}")
            opts["svtav1-params"] = ":".join(params)
        else:
            if self.preset is not None and name != "libaom-av1":
                opts["preset"] = str(self.preset)
            if self.fast_decode and name in ("libx264", "libx265"):
                opts["tune"] = "fastdecode"
            if threads is not None:
                opts["threads"] = str(threads)
        for k, v in self.extra_options.items():
            opts.setdefault(k, str(v))
        return opts

    def check_available(self) -> None:
        """ConfigError (one line) when the FFmpeg in PyAV's wheel has no such encoder."""
        import av

        try:
            av.codec.Codec(self.encoder_name, "w")
        except Exception as exc:
            raise ConfigError(
                f"video codec {self.codec!r}: encoder {self.encoder_name} is not in this FFmpeg ({exc})"
            ) from exc


DEFAULT_ENCODER = VideoEncoder()


def encoder_info(encoder: VideoEncoder) -> dict[str, Any]:
    """The ``video.*`` keys LeRobot records for an encoder (codec as the stream names it)."""
    fields = asdict(encoder)
    fields.pop("codec")
    info: dict[str, Any] = {"video.codec": encoder.canonical_name, "video.is_depth_map": False}
    info.update({f"video.{k}": v for k, v in fields.items()})
    info["video.video_backend"] = "pyav"
    return info


def quiet_encoders() -> None:
    """SVT-AV1 prints its configuration per encoder unless told otherwise (errors only)."""
    os.environ.setdefault("SVT_LOG", "1")


class Mp4Writer:
    """One mp4 file with one video stream; frames are appended in order (``write``)."""

    def __init__(self, path: Path, *, fps: int, width: int, height: int, encoder: VideoEncoder) -> None:
        import av

        quiet_encoders()
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.frames = 0
        self.bytes = 0
        self._av = av
        self._out = av.open(str(self.path), "w")
        try:
            stream = self._out.add_stream(encoder.encoder_name, fps, options=encoder.options(threads=1))
            stream.pix_fmt = encoder.pix_fmt
            stream.width = width
            stream.height = height
            stream.codec_context.time_base = Fraction(1, fps)
        except Exception:
            self._out.close()
            raise
        self._stream = stream

    def write(self, frames: np.ndarray) -> None:
        """Append ``[n, H, W, 3]`` uint8 RGB frames."""
        for img in frames:
            frame = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
            frame.pts = self.frames
            self.frames += 1
            self._mux(self._stream.encode(frame))

    def _mux(self, packets: Any) -> None:
        for packet in packets:
            self.bytes += packet.size
            self._out.mux(packet)

    def close(self) -> None:
        if self._out is None:
            return
        try:
            self._mux(self._stream.encode())
        finally:
            self._out.close()
            self._out = None

    def __enter__(self) -> Mp4Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
