"""Image codecs of the episode store: what each can store, frame encode/decode, encoding names.

Pure functions over imagecodecs, without zarr (readers decode with them through
:mod:`odsd.store.layout`); the zarr codec class built on them is :mod:`odsd.store.codecs`.

>>> from odsd.store.frame_codecs import parse_encoding, encode_frame, decode_frame
>>> enc = parse_encoding("jpeg:90")
>>> data = encode_frame(frame, enc)  # frame: uint8 (H, W, C)
>>> decode_frame(data, enc, frame.shape, frame.dtype).shape == frame.shape
True

Codecs (all through imagecodecs): ``png`` (lossless, uint8 and uint16: the default, and the one
for depth), ``webp`` (lossless WebP), ``qoi`` (lossless, 3 or 4 channels), ``zstd`` (the raw
frame bytes, zstd level 1), and lossy ``jpeg``, ``webp-lossy``, ``avif`` and ``jpegxl`` with a
quality from 1 to 100. docs/store.md says how the default was chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import imagecodecs
import numpy as np

from odsd.errors import ConfigError
from odsd.schema import FeatureSpec, ImageEncoding

ZARR_CODEC_NAME = "odsd.image"
"""Name of the zarr codec (:class:`odsd.store.codecs.ImageCodec`) in ``zarr.json``."""


@dataclass(frozen=True)
class CodecInfo:
    """What one image codec can store and how it is called."""

    lossy: bool
    dtypes: tuple[str, ...]
    channels: tuple[int, ...]
    default_quality: int | None
    encode: Callable[[np.ndarray, int | None], bytes]
    decode: Callable[[bytes], np.ndarray]


def _png(frame: np.ndarray, _quality: int | None) -> bytes:
    return imagecodecs.png_encode(frame, level=3)


def _webp(frame: np.ndarray, _quality: int | None) -> bytes:
    return imagecodecs.webp_encode(frame, lossless=True, method=0)


def _webp_lossy(frame: np.ndarray, quality: int | None) -> bytes:
    return imagecodecs.webp_encode(frame, level=quality, lossless=False)


def _qoi(frame: np.ndarray, _quality: int | None) -> bytes:
    return imagecodecs.qoi_encode(frame)


def _zstd(frame: np.ndarray, _quality: int | None) -> bytes:
    return imagecodecs.zstd_encode(np.ascontiguousarray(frame), level=1)


def _jpeg(frame: np.ndarray, quality: int | None) -> bytes:
    return imagecodecs.jpeg8_encode(frame, level=quality)


def _avif(frame: np.ndarray, quality: int | None) -> bytes:
    return imagecodecs.avif_encode(frame, level=quality, speed=8)


def _jpegxl(frame: np.ndarray, quality: int | None) -> bytes:
    return imagecodecs.jpegxl_encode(frame, level=quality, effort=3)


CODECS: dict[str, CodecInfo] = {
    "png": CodecInfo(False, ("uint8", "uint16"), (1, 3, 4), None, _png, imagecodecs.png_decode),
    "webp": CodecInfo(False, ("uint8",), (3, 4), None, _webp, imagecodecs.webp_decode),
    "qoi": CodecInfo(False, ("uint8",), (3, 4), None, _qoi, imagecodecs.qoi_decode),
    "zstd": CodecInfo(False, ("uint8", "uint16"), (1, 3, 4), None, _zstd, imagecodecs.zstd_decode),
    "jpeg": CodecInfo(True, ("uint8",), (1, 3), 90, _jpeg, imagecodecs.jpeg8_decode),
    "webp-lossy": CodecInfo(True, ("uint8",), (3, 4), 90, _webp_lossy, imagecodecs.webp_decode),
    "avif": CodecInfo(True, ("uint8",), (3, 4), 80, _avif, imagecodecs.avif_decode),
    "jpegxl": CodecInfo(True, ("uint8",), (1, 3, 4), 90, _jpegxl, imagecodecs.jpegxl_decode),
}
"""Every codec odsd knows (a codec whose library imagecodecs was built without is left out)."""

for _name, _attr in (("webp", "WEBP"), ("qoi", "QOI"), ("avif", "AVIF"), ("jpegxl", "JPEGXL")):
    if not getattr(imagecodecs, _attr).available:  # pragma: no cover - depends on the wheel
        CODECS.pop(_name, None)
        CODECS.pop(f"{_name}-lossy", None)

DEFAULT_IMAGE_ENCODING = ImageEncoding(codec="qoi")
"""Lossless QOI for colour frames: on rendered frames as small as zstd on the raw bytes and as
fast, about half PNG's size and several times its speed on noisy ones (docs/store.md, "Image storage")."""
DEFAULT_DEPTH_ENCODING = ImageEncoding(codec="png")
"""Depth (uint16 millimetres) and 1-channel frames, which QOI cannot store: lossless PNG."""


def _choices() -> str:
    lossless = [n for n, c in CODECS.items() if not c.lossy]
    lossy = [f"{n}[:1-100]" for n, c in CODECS.items() if c.lossy]
    return ", ".join(lossless + lossy)


def parse_encoding(text: str) -> ImageEncoding:
    """``"png"``, ``"jpeg"`` or ``"jpeg:90"`` → :class:`ImageEncoding`; one-line ConfigError otherwise."""
    name, sep, quality_text = text.strip().partition(":")
    name = name.strip().lower()
    quality: int | None = None
    if sep:
        try:
            quality = int(quality_text)
        except ValueError:
            raise ConfigError(
                f"image encoding {text!r}: quality {quality_text!r} is not an integer (valid: {_choices()})"
            ) from None
    info = CODECS.get(name)
    if info is not None and info.lossy and quality is None:
        quality = info.default_quality
    return check_encoding(ImageEncoding(codec=name, quality=quality), where=f"image encoding {text!r}")


def check_encoding(
    encoding: ImageEncoding, *, dtype: str | None = None, channels: int | None = None, where: str = ""
) -> ImageEncoding:
    """``encoding`` if odsd can store it (for a field of ``dtype``/``channels``), else a ConfigError."""
    prefix = f"{where}: " if where else ""
    info = CODECS.get(encoding.codec)
    if info is None:
        raise ConfigError(f"{prefix}unknown image codec {encoding.codec!r} (valid: {_choices()})")
    if info.lossy:
        if encoding.quality is None or not 1 <= encoding.quality <= 100:
            raise ConfigError(
                f"{prefix}{encoding.codec} quality {encoding.quality} is not within 1..100 (valid: {_choices()})"
            )
    elif encoding.quality is not None:
        raise ConfigError(f"{prefix}{encoding.codec} is lossless and takes no quality (valid: {_choices()})")
    if dtype is not None and np.dtype(dtype).name not in info.dtypes:
        raise ConfigError(
            f"{prefix}{encoding.codec} cannot store {dtype} frames (it stores {list(info.dtypes)})"
        )
    if channels is not None and channels not in info.channels:
        raise ConfigError(
            f"{prefix}{encoding.codec} cannot store {channels}-channel frames (it stores {list(info.channels)})"
        )
    return encoding


def encode_frame(frame: np.ndarray, encoding: ImageEncoding) -> bytes:
    """One frame ``(H, W, C)`` (or ``(k, H, W, C)``: stacked vertically) as the codec's bytes."""
    info = CODECS[encoding.codec]
    return bytes(info.encode(_as_image(frame), encoding.quality))


def decode_frame(
    data: bytes | memoryview, encoding: ImageEncoding, shape: tuple[int, ...], dtype: np.dtype | str
) -> np.ndarray:
    """The frame(s) of ``shape`` that :func:`encode_frame` encoded; ValueError if ``data`` is not one."""
    info = CODECS[encoding.codec]
    dtype = np.dtype(dtype)
    try:
        image = info.decode(bytes(data) if isinstance(data, memoryview) else data)
    except Exception as exc:
        raise ValueError(f"cannot decode {encoding.codec} frame ({exc})") from exc
    if encoding.codec == "zstd":
        image = np.frombuffer(image, dtype=dtype.newbyteorder("<"))
    image = np.asarray(image)
    if image.dtype != dtype or image.size != int(np.prod(shape)):
        raise ValueError(
            f"{encoding.codec} frame decodes to {image.dtype}{list(image.shape)}, not {dtype}{list(shape)}"
        )
    return image.reshape(shape)


def _as_image(frame: np.ndarray) -> np.ndarray:
    """``(H, W, C)`` or stacked ``(k, H, W, C)`` as the 2-D/3-D image the codecs take."""
    if frame.ndim == 4:
        frame = frame.reshape(-1, *frame.shape[2:])
    if frame.ndim == 3 and frame.shape[2] == 1:
        frame = frame[:, :, 0]
    return np.ascontiguousarray(frame)


def encoding_config(encoding: ImageEncoding) -> dict[str, Any]:
    """The ``odsd.image`` codec configuration written into ``zarr.json`` for ``encoding``."""
    config: dict[str, Any] = {"codec": encoding.codec}
    if encoding.quality is not None:
        config["quality"] = encoding.quality
    return config


def default_encoding(dtype: str, shape: tuple[int, ...]) -> ImageEncoding:
    """The lossless default for a camera field: QOI for 3/4-channel uint8 frames, PNG otherwise."""
    channels = shape[-1] if len(shape) == 3 else 1
    if np.dtype(dtype) == np.uint8 and channels in CODECS.get("qoi", CODECS["png"]).channels:
        return DEFAULT_IMAGE_ENCODING
    return DEFAULT_DEPTH_ENCODING


def with_default_encodings(features: Mapping[str, FeatureSpec]) -> dict[str, FeatureSpec]:
    """``features`` with every camera field encoded (the lossless default where none is given), checked.

    An image field is uint8 ``(H, W, C)`` with C in 1, 3, 4; a depth field uint16 ``(H, W, 1)``;
    only those take an encoding. A mistake is one :class:`~odsd.errors.ConfigError` line.
    """
    out: dict[str, FeatureSpec] = {}
    for name, spec in features.items():
        if spec.kind == "array":
            if spec.encoding is not None:
                raise ConfigError(f"feature {name!r}: an encoding needs kind 'image' or 'depth'")
            out[name] = spec
            continue
        want = "uint8" if spec.kind == "image" else "uint16"
        channels_ok = len(spec.shape) == 3 and spec.shape[2] in ((1, 3, 4) if spec.kind == "image" else (1,))
        if spec.dtype != want or not channels_ok:
            shape = "(H, W, C) with C in 1, 3, 4" if spec.kind == "image" else "(H, W, 1)"
            raise ConfigError(
                f"feature {name!r}: a {spec.kind} field is {want} of shape {shape}, not {spec.dtype} {spec.shape}"
            )
        encoding = spec.encoding or default_encoding(spec.dtype, spec.shape)
        check_encoding(encoding, dtype=spec.dtype, channels=spec.shape[2], where=f"feature {name!r}")
        out[name] = spec if spec.encoding is not None else spec.model_copy(update={"encoding": encoding})
    return out
