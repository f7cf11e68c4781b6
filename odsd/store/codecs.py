"""The image codec of the episode store as a Zarr v3 codec, registered with zarr.

A camera field is stored one frame per chunk, each chunk compressed by :class:`ImageCodec`
(zarr codec name ``odsd.image``, configuration ``{"codec": ..., "quality": ...}`` equal to the
field's :class:`~odsd.schema.ImageEncoding`) followed by crc32c, and the chunks of a segment are
packed into one shard file per field (``sharding_indexed``). Importing this module registers the
codec with zarr; the odsd package's ``zarr.codecs`` entry point does the same without an import,
so plain ``zarr.open_array`` reads odsd image arrays.

>>> import zarr, odsd.store.codecs
>>> arr = zarr.open_array("store/segments/w-1/000001-ab/observation.images.top", mode="r")
>>> arr[5].shape  # (H, W, C) uint8

The codec table, :data:`DEFAULT_IMAGE_ENCODING` and :func:`parse_encoding` live in
:mod:`odsd.store.frame_codecs` (no zarr import) and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.codec import ArrayBytesCodec
from zarr.core.common import parse_named_configuration
from zarr.registry import register_codec

from odsd.errors import ConfigError
from odsd.schema import ImageEncoding
from odsd.store.frame_codecs import (
    CODECS,
    DEFAULT_DEPTH_ENCODING,
    DEFAULT_IMAGE_ENCODING,
    ZARR_CODEC_NAME,
    check_encoding,
    decode_frame,
    encode_frame,
    encoding_config,
    parse_encoding,
)

if TYPE_CHECKING:
    from typing import Self

__all__ = [
    "CODECS",
    "DEFAULT_DEPTH_ENCODING",
    "DEFAULT_IMAGE_ENCODING",
    "ZARR_CODEC_NAME",
    "ImageCodec",
    "check_encoding",
    "decode_frame",
    "encode_frame",
    "encoding_config",
    "parse_encoding",
]


@dataclass(frozen=True)
class ImageCodec(ArrayBytesCodec):
    """Zarr v3 codec ``odsd.image``: a chunk of frames ``(k, H, W, C)`` as one image.

    >>> ImageCodec(codec="jpeg", quality=90).to_dict()
    {'name': 'odsd.image', 'configuration': {'codec': 'jpeg', 'quality': 90}}
    """

    is_fixed_size = False

    codec: str = DEFAULT_IMAGE_ENCODING.codec
    quality: int | None = None

    def __post_init__(self) -> None:
        try:
            check_encoding(self.encoding, where=ZARR_CODEC_NAME)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @property
    def encoding(self) -> ImageEncoding:
        return ImageEncoding(codec=self.codec, quality=self.quality)

    @classmethod
    def from_encoding(cls, encoding: ImageEncoding) -> Self:
        return cls(codec=encoding.codec, quality=encoding.quality)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        _, config = parse_named_configuration(data, ZARR_CODEC_NAME, require_configuration=True)
        unknown = set(config or {}) - {"codec", "quality"}
        if unknown:
            raise ValueError(f"{ZARR_CODEC_NAME}: unknown configuration keys {sorted(unknown)}")
        return cls(**(config or {}))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, Any]:
        return {"name": ZARR_CODEC_NAME, "configuration": encoding_config(self.encoding)}

    def validate(self, *, shape: tuple[int, ...], dtype: Any, chunk_grid: Any) -> None:
        native = dtype.to_native_dtype() if hasattr(dtype, "to_native_dtype") else np.dtype(dtype)
        if len(shape) not in (3, 4):
            raise ValueError(f"{ZARR_CODEC_NAME} stores (frames, H, W[, C]) arrays, not shape {shape}")
        channels = shape[-1] if len(shape) == 4 else 1
        try:
            check_encoding(self.encoding, dtype=native.name, channels=channels)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    def _decode_sync(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        dtype = chunk_spec.dtype.to_native_dtype()
        frames = decode_frame(chunk_bytes.to_bytes(), self.encoding, tuple(chunk_spec.shape), dtype)
        return chunk_spec.prototype.nd_buffer.from_ndarray_like(frames)

    async def _decode_single(self, chunk_bytes: Any, chunk_spec: Any) -> Any:
        return self._decode_sync(chunk_bytes, chunk_spec)

    def _encode_sync(self, chunk_array: Any, chunk_spec: Any) -> Any:
        frames = np.asarray(chunk_array.as_numpy_array())
        return chunk_spec.prototype.buffer.from_bytes(encode_frame(frames, self.encoding))

    async def _encode_single(self, chunk_array: Any, chunk_spec: Any) -> Any:
        return self._encode_sync(chunk_array, chunk_spec)

    def compute_encoded_size(self, input_byte_length: int, _chunk_spec: Any) -> int:
        raise NotImplementedError(f"{ZARR_CODEC_NAME} frames have no fixed encoded size")


register_codec(ZARR_CODEC_NAME, ImageCodec)
