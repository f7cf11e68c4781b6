"""fsck and open-time recovery: stray files, orphans, torn and damaged records, bad chunks."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

from odsd.store import MANIFEST, CorruptStoreError, EpisodeStore, fsck
from odsd.store.log import LOG_DIR, QUARANTINE_DIR, checkpoint_name, record_name
from odsd.store.segments import write_segment
from odsd.testing.store import StoreModel, check_snapshot, make_episode, make_frames


@pytest.fixture
def filled(tmp_store: EpisodeStore, features: dict[str, Any]) -> tuple[EpisodeStore, StoreModel]:
    model = StoreModel()
    writer = tmp_store.writer(writer_id="w")
    for i in range(5):
        batch = [(i, 4 + i)]
        res = writer.commit([make_episode(features, n, seed) for seed, n in batch])
        assert model.commit("w", i, batch) == (res.seq, res.episode_ids)
    return tmp_store, model


def _record(store: EpisodeStore, seq: int) -> Path:
    return store.root / LOG_DIR / record_name(seq)


def _chunk_files(store: EpisodeStore, episode_id: int, field: str) -> list[Path]:
    seg = store.root / store.snapshot().entry(episode_id).segment
    return sorted(p for p in (seg / field).rglob("*") if p.is_file() and p.name != "zarr.json")


def _errors(report) -> list[tuple[str, str]]:
    return [(f.path, f.message) for f in report.findings if f.severity == "error"]


def test_clean_store(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, _ = filled
    report = fsck(store)
    assert report.ok and report.findings == [] and report.repaired == []
    assert (report.watermark, report.episodes, report.segments_checked) == (4, 5, 5)


def test_stray_partials_and_orphans(filled: tuple[EpisodeStore, StoreModel], features) -> None:
    store, model = filled
    root = store.root
    orphan = "segments/w-crashed/000000000000-abcdef"
    write_segment(root, orphan, make_frames(features, 3, 1), store.features, durable=False)
    partial_seg = root / "segments" / "w-crashed" / "000000000001-123456.partial"
    write_segment(root, "segments/w-crashed/tmp", make_frames(features, 3, 1), store.features, durable=False)
    os.rename(root / "segments/w-crashed/tmp", partial_seg)
    partial_rec = root / LOG_DIR / f".{record_name(5)}.1234abcd.partial"
    partial_rec.write_bytes(b'{"seq": 5, "ki')
    # Readers never see them.
    reopened = EpisodeStore.open(root)
    model.check(reopened.snapshot())
    check_snapshot(reopened.snapshot())
    report = fsck(reopened)
    assert report.ok, "leftovers are warnings, not errors"
    warned = {f.path for f in report.findings if f.severity == "warning"}
    assert warned == {str(root / orphan), str(partial_seg), str(partial_rec)}
    assert not any(f.repairable for f in report.findings), "too young to be repaired under the default grace"
    # Default grace keeps them: a live writer may be about to publish that segment.
    fsck(reopened, repair=True)
    assert (root / orphan).is_dir() and partial_seg.is_dir() and partial_rec.exists()
    repaired = fsck(reopened, repair=True, grace_s=0)
    assert len(repaired.repaired) == 3
    assert not (root / orphan).exists() and not partial_seg.exists() and not partial_rec.exists()
    again = fsck(EpisodeStore.open(root))
    assert again.ok and again.findings == []
    model.check(EpisodeStore.open(root).snapshot())


def test_torn_trailing_record(filled: tuple[EpisodeStore, StoreModel], features) -> None:
    store, model = filled
    torn = _record(store, 4)
    torn.write_bytes(torn.read_bytes()[: torn.stat().st_size // 2])
    # Readers ignore it: the watermark ends before it.
    reopened = EpisodeStore.open(store.root, durability="process")
    assert reopened.watermark == 3 and reopened.torn_record is not None and reopened.torn_record.path == torn
    model.check(reopened.snapshot())
    check_snapshot(reopened.snapshot())
    # fsck reports it (error, repairable) and --repair moves it to the quarantine.
    report = fsck(reopened)
    assert not report.ok and report.watermark == 3
    assert [(f.path, f.repairable) for f in report.errors] == [(str(torn), True)]
    assert "damaged trailing commit record" in report.errors[0].message
    assert torn.exists()
    repaired = fsck(reopened, repair=True)
    assert any("moved damaged trailing record" in r for r in repaired.repaired)
    assert not torn.exists() and (store.root / LOG_DIR / QUARANTINE_DIR / torn.name).exists()
    # The orphaned segment of the torn commit is then an ordinary leftover.
    after = fsck(EpisodeStore.open(store.root), repair=True, grace_s=0)
    assert after.ok and len(after.repaired) == 1
    writer = EpisodeStore.open(store.root, durability="process").writer()
    res = writer.commit([make_episode(features, 2, seed=99)])
    assert (res.seq, res.episode_ids) == (4, [4])
    quarantined = store.root / LOG_DIR / QUARANTINE_DIR / torn.name
    assert [(f.severity, f.path) for f in fsck(EpisodeStore.open(store.root)).findings] == [
        ("warning", str(quarantined))
    ], "the set-aside record stays visible to the operator"


def test_writer_commits_past_a_torn_trailing_record(
    filled: tuple[EpisodeStore, StoreModel], features, caplog: pytest.LogCaptureFixture
) -> None:
    """One bad byte in the newest record must not stop production: the writer sets it aside."""
    store, _ = filled
    torn = _record(store, 4)
    data = bytearray(torn.read_bytes())
    data[len(data) // 2] ^= 0x80  # not UTF-8 any more
    torn.write_bytes(bytes(data))
    reopened = EpisodeStore.open(store.root, durability="process")
    assert reopened.watermark == 3
    with caplog.at_level("WARNING", logger="odsd.store"):
        res = reopened.writer(writer_id="w2").commit([make_episode(features, 2, seed=99)])
    assert res.seq == 4 and res.episode_ids == [4], "committed at the torn record's seq"
    assert any("damaged trailing commit record moved to" in r.getMessage() for r in caplog.records)
    quarantined = store.root / LOG_DIR / QUARANTINE_DIR / torn.name
    assert quarantined.read_bytes() == bytes(data), "set aside byte for byte, never deleted"
    snap = EpisodeStore.open(store.root).snapshot()
    assert snap.watermark == 4 and [int(i) for i in snap.episode_ids] == [0, 1, 2, 3, 4]
    check_snapshot(snap)
    report = fsck(EpisodeStore.open(store.root))
    assert report.ok and [f.path for f in report.findings if f.path == str(quarantined)]


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "wrong-seq"])
def test_damaged_record_in_history(filled: tuple[EpisodeStore, StoreModel], damage: str) -> None:
    store, _ = filled
    path = _record(store, 2)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[:-30])
    elif damage == "flip":
        body = json.loads(data)
        body["adds"][0]["episodes"][0]["meta"]["length"] += 1  # plausible, but checksum catches it
        path.write_text(json.dumps(body))
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        shutil.copy(_record(store, 1), path)
    with pytest.raises(CorruptStoreError, match=rf"^{path}: "):
        EpisodeStore.open(store.root).snapshot()
    report = fsck(EpisodeStore.open(store.root))
    assert not report.ok and [p for p, _ in _errors(report)] == [str(path)]
    assert not report.errors[0].repairable
    fsck(EpisodeStore.open(store.root), repair=True, grace_s=0)
    assert path.exists(), "a damaged record inside the history is never moved or guessed"


def test_missing_record_in_history(filled: tuple[EpisodeStore, StoreModel], features) -> None:
    """A hole in the log is corruption: readers must not stop silently before it, writers must not fill it."""
    store, _ = filled
    missing = _record(store, 2)
    missing.unlink()
    report = fsck(EpisodeStore.open(store.root))
    assert not report.ok and _errors(report)[0][0] == str(missing)
    with pytest.raises(CorruptStoreError, match=record_name(2)):
        EpisodeStore.open(store.root).snapshot()
    with pytest.raises(CorruptStoreError):
        EpisodeStore.open(store.root).writer().commit([make_episode(features, 2, seed=99)])
    assert not missing.exists(), "the hole must not be filled by a new commit"


def test_flipped_byte_in_chunk(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, _ = filled
    (chunk,) = _chunk_files(store, 3, "observation.state")
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x40
    chunk.write_bytes(bytes(data))
    seg = store.root / store.snapshot().entry(3).segment
    snap = EpisodeStore.open(store.root).snapshot()
    with pytest.raises(CorruptStoreError, match=rf"{chunk}: damaged chunk \(crc32c mismatch\)"):
        snap.episode(3)
    with pytest.raises(CorruptStoreError):
        snap.gather("observation.state", [0])
    check_episode_other_fields = snap.episode(3, fields=["action.expert"])
    assert check_episode_other_fields["action.expert"].shape == (7, 2)
    report = fsck(EpisodeStore.open(store.root))
    assert not report.ok and len(report.errors) == 1
    assert report.errors[0].path == str(seg) and str(seg / "observation.state") in report.errors[0].message
    assert fsck(EpisodeStore.open(store.root), deep=False).ok, "--quick skips the data"
    fsck(EpisodeStore.open(store.root), repair=True, grace_s=0)
    assert chunk.exists() and not fsck(EpisodeStore.open(store.root)).ok, "never repaired by guessing"


def test_checksum_mismatch_with_valid_chunk(filled: tuple[EpisodeStore, StoreModel]) -> None:
    """Data rewritten behind the log's back (chunk crc still valid) is caught by the record checksums."""
    store, _ = filled
    seg = store.root / store.snapshot().entry(1).segment
    arr = zarr.open_array(store=LocalStore(seg), path="action.expert", mode="r+")
    values = np.asarray(arr[...])
    values[0, 0] += 1.0
    arr[...] = values
    report = fsck(EpisodeStore.open(store.root))
    assert [(f.path, f.message) for f in report.errors] == [
        (str(seg), f"{seg / 'action.expert'}: checksum mismatch against commit record")
    ]


def test_missing_segment_directory(filled: tuple[EpisodeStore, StoreModel]) -> None:
    store, _ = filled
    seg = store.root / store.snapshot().entry(2).segment
    shutil.rmtree(seg)
    snap = EpisodeStore.open(store.root).snapshot()
    with pytest.raises(CorruptStoreError, match=rf"{seg}: committed segment directory is missing"):
        snap.read("action.expert")
    snap.episode(1)  # other segments stay readable
    report = fsck(EpisodeStore.open(store.root))
    assert [(f.path, f.message) for f in report.errors] == [
        (str(seg), "committed segment directory is missing")
    ]
    assert not fsck(EpisodeStore.open(store.root), deep=False).ok, "even --quick checks segments exist"


def test_damaged_checkpoint_falls_back_to_records(tmp_path: Path, features) -> None:
    store = EpisodeStore.create(tmp_path / "s", features=features, fps=10, durability="process")
    manifest = store.root / MANIFEST
    body = json.loads(manifest.read_text())
    body["checkpoint_interval"] = 3
    manifest.write_text(json.dumps(body))
    store = EpisodeStore.open(store.root, durability="process")
    writer = store.writer()
    for i in range(7):
        writer.commit([make_episode(features, 2, seed=i)])
    assert store.log.checkpoint_seqs() == [2, 5]
    ckpt = store.root / LOG_DIR / checkpoint_name(5)
    ckpt.write_bytes(ckpt.read_bytes()[:100])
    reopened = EpisodeStore.open(store.root)
    assert reopened.watermark == 6 and reopened.snapshot().num_episodes == 7
    check_snapshot(reopened.snapshot())
    report = fsck(reopened)
    assert not report.ok and [(f.severity, f.path, f.repairable) for f in report.findings] == [
        ("error", str(ckpt), True)
    ]
    fsck(reopened, repair=True)
    assert not ckpt.exists() and fsck(EpisodeStore.open(store.root)).findings == []


def test_checkpoint_disagreeing_with_records(tmp_path: Path, features) -> None:
    store = EpisodeStore.create(tmp_path / "s", features=features, fps=10, durability="process")
    manifest = store.root / MANIFEST
    body = json.loads(manifest.read_text())
    body["checkpoint_interval"] = 3
    manifest.write_text(json.dumps(body))
    store = EpisodeStore.open(store.root, durability="process")
    writer = store.writer()
    for i in range(4):
        writer.commit([make_episode(features, 2, seed=i)])
    from odsd.store.log import encode_document

    ckpt = store.log.read_checkpoint(2)
    forged = ckpt.model_copy(update={"episodes": ckpt.episodes[:-1]})
    (store.root / LOG_DIR / checkpoint_name(2)).write_bytes(encode_document(forged))
    report = fsck(EpisodeStore.open(store.root))
    assert [f.message for f in report.findings] == [
        "checkpoint disagrees with the commit records; readers fall back to the records"
    ]
