"""Image codecs: encoding names, validation, frame round trips and the zarr codec registration."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odsd.errors import ConfigError
from odsd.schema import FeatureSpec, ImageEncoding, StoreManifest
from odsd.store.frame_codecs import (
    CODECS,
    DEFAULT_DEPTH_ENCODING,
    DEFAULT_IMAGE_ENCODING,
    check_encoding,
    decode_frame,
    encode_frame,
    parse_encoding,
    with_default_encodings,
)
from odsd.testing.frames import rendered_depth, rendered_frames

LOSSLESS = [n for n, c in CODECS.items() if not c.lossy]
LOSSY = [n for n, c in CODECS.items() if c.lossy]


def test_parse_encoding() -> None:
    assert parse_encoding("png") == ImageEncoding(codec="png")
    assert parse_encoding("jpeg:75") == ImageEncoding(codec="jpeg", quality=75)
    assert parse_encoding(" JPEG ") == ImageEncoding(codec="jpeg", quality=90)  # the stated default


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gif", "unknown image codec 'gif'"),
        ("jpeg:0", "not within 1..100"),
        ("jpeg:101", "not within 1..100"),
        ("png:5", "lossless and takes no quality"),
        ("jpeg:high", "not an integer"),
    ],
)
def test_parse_encoding_errors_are_one_line_naming_the_choices(text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_encoding(text)
    message = str(exc.value)
    assert needle in message and "valid: png" in message and "jpeg[:1-100]" in message and "\n" not in message


def test_check_encoding_against_the_field() -> None:
    with pytest.raises(ConfigError, match="cannot store uint16"):
        check_encoding(ImageEncoding(codec="jpeg", quality=90), dtype="uint16")
    with pytest.raises(ConfigError, match="cannot store 1-channel"):
        check_encoding(ImageEncoding(codec="qoi"), channels=1)
    check_encoding(ImageEncoding(codec="png"), dtype="uint16", channels=1)


def test_default_encodings_are_lossless_and_fit_the_field() -> None:
    features = {
        "observation.images.top": FeatureSpec(dtype="uint8", shape=(8, 8, 3), kind="image"),
        "observation.images.gray": FeatureSpec(dtype="uint8", shape=(8, 8, 1), kind="image"),
        "observation.depth.top": FeatureSpec(dtype="uint16", shape=(8, 8, 1), kind="depth"),
        "observation.state": FeatureSpec(dtype="float32", shape=(3,)),
    }
    out = with_default_encodings(features)
    assert out["observation.images.top"].encoding == DEFAULT_IMAGE_ENCODING
    assert out["observation.images.gray"].encoding == DEFAULT_DEPTH_ENCODING
    assert out["observation.depth.top"].encoding == DEFAULT_DEPTH_ENCODING
    assert out["observation.state"] == features["observation.state"]
    assert not CODECS[DEFAULT_IMAGE_ENCODING.codec].lossy and not CODECS[DEFAULT_DEPTH_ENCODING.codec].lossy


@pytest.mark.parametrize(
    "spec",
    [
        FeatureSpec(dtype="float32", shape=(8, 8, 3), kind="image"),
        FeatureSpec(dtype="uint8", shape=(8, 8), kind="image"),
        FeatureSpec(dtype="uint8", shape=(8, 8, 1), kind="depth"),
        FeatureSpec(dtype="uint8", shape=(8, 8, 3), encoding=ImageEncoding(codec="png")),
        FeatureSpec(dtype="uint8", shape=(8, 8, 3), kind="image", encoding=ImageEncoding(codec="jpeg")),
    ],
)
def test_invalid_camera_fields_are_config_errors(spec: FeatureSpec) -> None:
    with pytest.raises(ConfigError):
        with_default_encodings({"f": spec})


def test_schema_hash_of_a_store_without_cameras_is_unchanged() -> None:
    features = {"observation.state": FeatureSpec(dtype="float32", shape=(4,))}
    manifest = StoreManifest(store_id="x", features=with_default_encodings(features), fps=10)
    assert manifest.schema_hash() == StoreManifest(store_id="x", features=features, fps=10).schema_hash()
    assert "encoding" not in manifest.model_dump_json() and "kind" not in manifest.model_dump_json()


@pytest.mark.parametrize("codec", LOSSLESS)
def test_lossless_round_trip_is_exact(codec: str) -> None:
    enc = parse_encoding(codec)
    for frame in rendered_frames(4, 17, 23, seed=3):
        assert np.array_equal(decode_frame(encode_frame(frame, enc), enc, frame.shape, frame.dtype), frame)
    if "uint16" in CODECS[codec].dtypes:
        for frame in rendered_depth(3, 9, 11):
            out = decode_frame(encode_frame(frame, enc), enc, frame.shape, frame.dtype)
            assert np.array_equal(out, frame)


JPEG_MEAN_ABS_ERROR = 4.0
"""JPEG at quality 90 on rendered-like frames: mean absolute error per channel value at most this."""


@pytest.mark.parametrize("codec", LOSSY)
def test_lossy_round_trip_within_tolerance(codec: str) -> None:
    enc = parse_encoding(codec)
    frames = rendered_frames(4, 48, 64, seed=4)
    for frame in frames:
        out = decode_frame(encode_frame(frame, enc), enc, frame.shape, frame.dtype)
        assert out.shape == frame.shape and out.dtype == frame.dtype
        assert np.abs(out.astype(int) - frame).mean() <= JPEG_MEAN_ABS_ERROR


@settings(max_examples=25, deadline=None)
@given(
    h=st.integers(1, 40),
    w=st.integers(1, 40),
    c=st.sampled_from([1, 3, 4]),
    seed=st.integers(0, 2**16),
    codec=st.sampled_from(LOSSLESS),
)
def test_random_frames_round_trip(h: int, w: int, c: int, seed: int, codec: str) -> None:
    if c not in CODECS[codec].channels:
        return
    frame = np.random.default_rng(seed).integers(0, 256, size=(h, w, c), dtype=np.uint8)
    enc = parse_encoding(codec)
    assert np.array_equal(decode_frame(encode_frame(frame, enc), enc, frame.shape, frame.dtype), frame)


def test_decoding_garbage_is_a_value_error() -> None:
    enc = parse_encoding("qoi")
    with pytest.raises(ValueError):
        decode_frame(b"not a frame", enc, (4, 4, 3), np.uint8)
    data = encode_frame(rendered_frames(1, 4, 4)[0], enc)
    with pytest.raises(ValueError, match="decodes to"):
        decode_frame(data, enc, (4, 5, 3), np.uint8)


def test_zarr_codec_dict_round_trip() -> None:
    from odsd.store.codecs import ImageCodec

    codec = ImageCodec(codec="jpeg", quality=80)
    assert codec.to_dict() == {"name": "odsd.image", "configuration": {"codec": "jpeg", "quality": 80}}
    assert ImageCodec.from_dict(codec.to_dict()) == codec
    with pytest.raises(ValueError, match="unknown image codec"):
        ImageCodec(codec="gif")


def test_plain_zarr_finds_the_codec_through_the_entry_point() -> None:
    """A fresh interpreter resolves ``odsd.image`` without importing odsd."""
    code = (
        "import sys, zarr.registry as r; c = r.get_codec_class('odsd.image'); "
        "assert 'odsd.store' in sys.modules, 'loaded by the entry point'; print(c.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "odsd.store.codecs"
