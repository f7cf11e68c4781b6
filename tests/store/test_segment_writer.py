"""The direct single-chunk segment writer produces exactly what zarr would write."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec
from zarr.storage import LocalStore

from odsd.schema import FeatureSpec
from odsd.store.segments import read_field, write_segment

CASES = {
    "f32": (np.float32, (7, 3)),
    "f64": (np.float64, (7,)),
    "bool": (np.bool_, (7,)),
    "i8": (np.int8, (7,)),
    "i32": (np.int32, (7, 2, 2)),
    "i64": (np.int64, (7,)),
}


def _values(dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(0)
    if dtype is np.bool_:
        return rng.random(shape) > 0.5
    return (rng.random(shape) * 100).astype(dtype)


@pytest.mark.parametrize("name", sorted(CASES))
def test_chunks_and_metadata_match_zarr(tmp_path: Path, name: str) -> None:
    dtype, shape = CASES[name]
    values = _values(dtype, shape)
    features = {name: FeatureSpec(dtype=np.dtype(dtype).name, shape=shape[1:])}
    write_segment(tmp_path, "ours", {name: values}, features, durable=False)
    group = zarr.create_group(store=LocalStore(tmp_path / "zarrs"), zarr_format=3)
    arr = group.create_array(
        name=name,
        shape=values.shape,
        dtype=values.dtype,
        chunks=values.shape,
        compressors=[ZstdCodec(level=1), Crc32cCodec()],
        fill_value=0,
        chunk_key_encoding={"name": "default", "separator": "."},
    )
    arr[...] = values
    chunk = "c" + ".0" * values.ndim
    ours, theirs = tmp_path / "ours" / name, tmp_path / "zarrs" / name
    assert (ours / chunk).read_bytes() == (theirs / chunk).read_bytes()
    assert json.loads((ours / "zarr.json").read_text()) == json.loads((theirs / "zarr.json").read_text())
    np.testing.assert_array_equal(read_field(tmp_path, "ours", name), values)


def test_group_attributes_and_multi_chunk_path(tmp_path: Path) -> None:
    values = np.arange(50, dtype=np.float32).reshape(25, 2)
    features = {"x": FeatureSpec(dtype="float32", shape=(2,))}
    write_segment(tmp_path, "one", {"x": values}, features, attributes={"k": 1}, durable=False)
    write_segment(tmp_path, "many", {"x": values}, features, chunk_frames=10, durable=False)
    assert dict(zarr.open_group(str(tmp_path / "one"), mode="r").attrs) == {"k": 1}
    assert zarr.open_array(str(tmp_path / "many" / "x"), mode="r").chunks == (10, 2)
    for seg in ("one", "many"):
        np.testing.assert_array_equal(read_field(tmp_path, seg, "x"), values)
