"""Image fields through the store: write paths, plain zarr, read_frames, compaction, inspect."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odsd.schema import EpisodeMeta, FeatureSpec, ImageEncoding
from odsd.store import Episode, EpisodeStore, compact
from odsd.store.frame_reads import read_frames
from odsd.store.layout import checked_layouts, read_verified
from odsd.store.segments import write_segment
from odsd.testing.frames import rendered_depth, rendered_frames

TOP = "observation.images.top"
DEPTH = "observation.depth.top"


def _features(
    h: int, w: int, c: int, codec: str = "qoi", quality: int | None = None
) -> dict[str, FeatureSpec]:
    return {
        TOP: FeatureSpec(
            dtype="uint8", shape=(h, w, c), kind="image", encoding=ImageEncoding(codec=codec, quality=quality)
        ),
        DEPTH: FeatureSpec(
            dtype="uint16", shape=(h, w, 1), kind="depth", encoding=ImageEncoding(codec="png")
        ),
        "observation.state": FeatureSpec(dtype="float32", shape=(3,)),
    }


def _frames(n: int, h: int, w: int, c: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    top = rendered_frames(n, h, w, c, seed=seed) if c == 3 else rng.integers(0, 256, (n, h, w, c), np.uint8)
    return {
        TOP: top,
        DEPTH: rendered_depth(n, h, w, seed=seed),
        "observation.state": rng.standard_normal((n, 3)).astype(np.float32),
    }


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(1, 40),
    h=st.integers(1, 24),
    w=st.integers(1, 24),
    c=st.sampled_from([3, 4]),
    chunk_frames=st.sampled_from([None, 1, 7]),
    seed=st.integers(0, 1000),
    data=st.data(),
)
def test_lossless_round_trip_is_bit_exact(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    h: int,
    w: int,
    c: int,
    chunk_frames: int | None,
    seed: int,
    data,
) -> None:
    root = tmp_path_factory.mktemp("s")
    features, frames = _features(h, w, c), _frames(n, h, w, c, seed)
    info = write_segment(root, "seg", frames, features, chunk_frames=chunk_frames, durable=False)
    layouts = checked_layouts(root, info, features)
    pick = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=12)), dtype=np.int64)
    for name, spec in features.items():
        assert np.array_equal(read_verified(layouts[name], info), frames[name])
        assert np.array_equal(read_frames(root, info, name, spec, pick), frames[name][pick])


@pytest.mark.parametrize("chunk_frames", [None, 8])
def test_jpeg_within_its_tolerance_and_both_writers_agree(tmp_path: Path, chunk_frames: int | None) -> None:
    features, frames = _features(32, 48, 3, "jpeg", 90), _frames(20, 32, 48, 3, seed=1)
    info = write_segment(tmp_path, "seg", frames, features, chunk_frames=chunk_frames, durable=False)
    values = read_verified(checked_layouts(tmp_path, info, features)[TOP], info)
    assert np.abs(values.astype(int) - frames[TOP]).mean() <= 4.0  # quality 90 on rendered-like frames
    other = write_segment(tmp_path, "other", frames, features, chunk_frames=None if chunk_frames else 8)
    assert other.checksums == info.checksums  # the same encoded frames, whichever writer


@pytest.mark.parametrize("chunk_frames", [None, 6])
def test_plain_zarr_reads_odsd_image_segments(tmp_path: Path, chunk_frames: int | None) -> None:
    import zarr

    features, frames = _features(12, 10, 3), _frames(15, 12, 10, 3, seed=2)
    frames[TOP][4] = 0  # an all-fill frame is still written (a missing chunk is always damage)
    write_segment(tmp_path, "seg", frames, features, chunk_frames=chunk_frames, durable=False)
    files = sorted(p.name for p in (tmp_path / "seg" / TOP).iterdir())
    assert files == ["c.0.0.0.0", "zarr.json"] if chunk_frames is None else len(files) == 4
    for name in features:
        arr = zarr.open_array(str(tmp_path / "seg" / name), mode="r")
        assert np.array_equal(arr[...], frames[name]) and np.array_equal(arr[7], frames[name][7])


def test_single_pass_writer_is_byte_exact_with_zarr(tmp_path: Path) -> None:
    """The shard file odsd writes itself is the one zarr writes for the same array and values."""
    import zarr
    from zarr.codecs import Crc32cCodec

    from odsd.store.codecs import ImageCodec

    features, frames = _features(9, 7, 3), _frames(11, 9, 7, 3, seed=5)
    write_segment(tmp_path, "seg", frames, features, durable=False)
    arr = zarr.create_array(
        store=str(tmp_path / "zarr"),
        shape=frames[TOP].shape,
        dtype="uint8",
        shards=frames[TOP].shape,
        chunks=(1, 9, 7, 3),
        serializer=ImageCodec(codec="qoi"),
        compressors=[Crc32cCodec()],
        fill_value=0,
        chunk_key_encoding={"name": "default", "separator": "."},
    )
    arr[...] = frames[TOP]
    ours = tmp_path / "seg" / TOP
    assert (ours / "c.0.0.0.0").read_bytes() == (tmp_path / "zarr" / "c.0.0.0.0").read_bytes()
    assert json.loads((ours / "zarr.json").read_bytes()) == json.loads(
        (tmp_path / "zarr" / "zarr.json").read_bytes()
    )


def _camera_store(root: Path, codec: str = "qoi", quality: int | None = None) -> EpisodeStore:
    features = {
        TOP: {"dtype": "uint8", "shape": [16, 16, 3], "kind": "image"},
        "observation.state": {"dtype": "float32", "shape": [3]},
    }
    if codec != "default":
        features[TOP]["encoding"] = {"codec": codec, "quality": quality}
    return EpisodeStore.create(root, features=features, fps=10, durability="process")


def _commit(store: EpisodeStore, lengths: list[int], seed: int) -> list[np.ndarray]:
    shown = []
    writer = store.writer(writer_id=f"w{seed}")
    for i, n in enumerate(lengths):
        top = rendered_frames(n, 16, 16, seed=seed * 100 + i)
        state = np.full((n, 3), i, np.float32)
        writer.commit([Episode(frames={TOP: top, "observation.state": state}, meta=EpisodeMeta(length=n))])
        shown.append(top)
    return shown


def test_create_gives_cameras_the_lossless_default(tmp_path: Path) -> None:
    store = _camera_store(tmp_path / "s", codec="default")
    assert store.features[TOP].encoding == ImageEncoding(codec="qoi")
    manifest = json.loads((tmp_path / "s" / "odsd.json").read_bytes())
    assert manifest["features"][TOP]["encoding"] == {"codec": "qoi", "quality": None}
    # A collector asking for the camera without a codec opens the store whatever codec it has.
    EpisodeStore.open_or_create(
        tmp_path / "s",
        features={
            TOP: {"dtype": "uint8", "shape": [16, 16, 3], "kind": "image"},
            "observation.state": {"dtype": "float32", "shape": [3]},
        },
        fps=10,
    )


@pytest.mark.parametrize(("codec", "quality"), [("qoi", None), ("jpeg", 85)])
def test_compaction_copies_encoded_frames(tmp_path: Path, codec: str, quality: int | None) -> None:
    store = _camera_store(tmp_path / "s", codec, quality)
    _commit(store, [5, 7, 3], seed=1)
    before = store.snapshot().column(TOP).copy()
    chunks_before = b"".join(
        _frame_chunks(store.root / info.path / TOP)
        for info in sorted(store.refresh().segments.values(), key=lambda i: i.path)
    )
    result = compact(store, small_frames=100)
    assert result.merged_segments == 3 and len(result.shards) == 1
    after = store.snapshot()
    assert np.array_equal(after.column(TOP), before)  # lossy frames were not re-encoded
    shard = store.root / result.shards[0] / TOP
    assert _frame_chunks(shard) == chunks_before  # the very bytes, in episode order


def _frame_chunks(field_dir: Path) -> bytes:
    """The encoded frames of a single-shard field (the shard file without its index)."""
    data = (field_dir / "c.0.0.0.0").read_bytes()
    n = json.loads((field_dir / "zarr.json").read_bytes())["chunk_grid"]["configuration"]["chunk_shape"][0]
    return data[: len(data) - (16 * n + 4)]


def test_inspect_reports_bytes_per_frame_per_camera(tmp_path: Path) -> None:
    from odsd.cli.store import summarize

    store = _camera_store(tmp_path / "s", "qoi")
    _commit(store, [10, 10], seed=2)
    cam = summarize(EpisodeStore.open(store.root))["cameras"][TOP]
    assert cam["codec"] == "qoi" and cam["frames"] == 20 and cam["raw_bytes_per_frame"] == 16 * 16 * 3
    assert 0 < cam["bytes_per_frame"] < cam["raw_bytes_per_frame"] and cam["ratio"] > 1


def test_retention_removes_image_episodes(tmp_path: Path) -> None:
    from odsd.store import RetentionPolicy, apply_retention

    store = _camera_store(tmp_path / "s")
    shown = _commit(store, [4, 5, 6], seed=3)
    apply_retention(store, RetentionPolicy(max_episodes=2))
    snap = store.snapshot()
    assert snap.num_episodes == 2 and np.array_equal(snap.column(TOP), np.concatenate(shown[1:]))
