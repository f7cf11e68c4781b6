"""EpisodeWriter: commit records, gapless seqs, ids, idempotency keys, checksums, schema checks."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from odsd.errors import StorageError
from odsd.schema import CommitContext, EpisodeMeta
from odsd.store import Episode, EpisodeStore, SchemaMismatchError, fsck
from odsd.store.log import LOG_DIR, record_name
from odsd.store.segments import frame_checksum
from odsd.testing.store import check_episode, check_snapshot, make_episode, make_frames


def _files(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file below ``root/segments`` with its mtime_ns and content."""
    out: dict[str, tuple[int, bytes]] = {}
    for dirpath, _dirs, names in os.walk(root / "segments"):
        for name in names:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = (p.stat().st_mtime_ns, p.read_bytes())
    return out


def test_commits_get_gapless_seqs_and_ids(tmp_store: EpisodeStore, features: dict[str, Any]) -> None:
    writer = tmp_store.writer(run_id="run-1")
    r0 = writer.commit([make_episode(features, 5, seed=1)])
    r1 = writer.commit([make_episode(features, 3, seed=2), make_episode(features, 7, seed=3)])
    r2 = tmp_store.writer().commit([make_episode(features, 1, seed=4)])
    assert (r0.seq, r0.episode_ids) == (0, [0])
    assert (r1.seq, r1.episode_ids) == (1, [1, 2])
    assert (r2.seq, r2.episode_ids) == (2, [3])
    assert not any(r.duplicate for r in (r0, r1, r2))
    assert tmp_store.watermark == 2
    assert tmp_store.log.record_seqs() == [0, 1, 2]
    snap = tmp_store.snapshot()
    assert snap.num_episodes == 4 and snap.num_frames == 16
    assert [snap.entry(i).offset for i in range(4)] == [0, 0, 3, 0]
    assert [snap.entry(i).commit_seq for i in range(4)] == [0, 1, 1, 2]
    assert snap.entry(1).segment == snap.entry(2).segment == r1.segment
    assert snap.meta(0).writer_id == writer.writer_id and snap.meta(0).run_id == "run-1"
    assert snap.meta(3).writer_id != writer.writer_id and snap.meta(3).run_id is None
    for eid in range(4):
        check_episode(snap, eid)


def test_commit_record_contents(tmp_store: EpisodeStore, features: dict[str, Any]) -> None:
    writer = tmp_store.writer(writer_id="w-test", run_id="r")
    episodes = [
        make_episode(features, 4, seed=10, iteration=3, task="push"),
        make_episode(features, 2, seed=11),
    ]
    ctx = CommitContext(iteration=3, beta=0.5, policy_version=7)
    result = writer.commit(episodes, context=ctx)
    record = tmp_store.log.read(result.seq)
    assert record.kind == "append" and record.writer_id == "w-test" and record.writer_seq == 0
    assert record.run_id == "r" and record.first_episode_id == 0
    assert record.context == ctx
    (add,) = record.adds
    assert add.segment.path == result.segment and add.segment.n_frames == 6 and add.segment.nbytes > 0
    assert [e.meta.iteration for e in add.episodes] == [3, 0] and add.episodes[0].meta.task == "push"
    for name in features:
        whole = np.concatenate([episodes[0].frames[name], episodes[1].frames[name]])
        assert add.segment.checksums[name] == frame_checksum(whole)
    # The record is plain JSON with an embedded sha256 checksum.
    body = json.loads((tmp_store.root / LOG_DIR / record_name(0)).read_bytes())
    assert body["seq"] == 0 and len(body["checksum"]) == 64


def test_commit_never_touches_committed_files(tmp_store: EpisodeStore, features: dict[str, Any]) -> None:
    writer = tmp_store.writer()
    first = writer.commit([make_episode(features, 8, seed=1)])
    before = _files(tmp_store.root)
    second = writer.commit([make_episode(features, 8, seed=2)])
    after = _files(tmp_store.root)
    assert second.segment != first.segment
    assert {k: v for k, v in after.items() if k in before} == before
    assert all(k.startswith(second.segment) for k in set(after) - set(before))
    assert len(set(after) - set(before)) <= 3 * len(features) + 2, (
        "a commit should write a few files per field"
    )


def test_segment_names_are_unique_per_writer_seq(tmp_path: Path, features: dict[str, Any]) -> None:
    store = EpisodeStore.create(tmp_path / "s", features=features, fps=10, durability="process")
    segs = {
        store.writer(writer_id="same").commit([make_episode(features, 2, seed=i)]).segment for i in range(3)
    }
    assert len(segs) == 3


def test_retransmit_with_same_idempotency_key_is_noop(
    tmp_store: EpisodeStore, features: dict[str, Any]
) -> None:
    writer = tmp_store.writer(writer_id="w-idem")
    batch = [make_episode(features, 4, seed=5)]
    first = writer.commit(batch)
    assert first.seq == 0 and writer.next_writer_seq == 1
    segments_before = sorted(p.name for p in (tmp_store.root / "segments" / "w-idem").iterdir())
    again = writer.commit(batch, writer_seq=0)
    assert again.duplicate and again.seq is None and again.episode_ids == []
    assert tmp_store.watermark == 0 and tmp_store.snapshot().num_episodes == 1
    assert sorted(p.name for p in (tmp_store.root / "segments" / "w-idem").iterdir()) == segments_before
    # The same key from a fresh process/handle (a retransmission after a crash) is a no-op too.
    other = EpisodeStore.open(tmp_store.root, durability="process")
    resent = other.writer(writer_id="w-idem")
    assert resent.next_writer_seq == 1, "a writer id continues its own sequence"
    assert resent.commit(batch, writer_seq=0).duplicate
    nxt = resent.commit([make_episode(features, 2, seed=6)])
    assert (nxt.seq, nxt.episode_ids) == (1, [1])
    assert tmp_store.log.read(1).writer_seq == 1


def test_stale_handle_retries_at_next_seq(tmp_path: Path, features: dict[str, Any]) -> None:
    """A handle whose cached state is stale still publishes at the log's next seq, not over a record."""
    a = EpisodeStore.create(tmp_path / "s", features=features, fps=10, durability="process")
    b = EpisodeStore.open(a.root, durability="process")
    wa, wb = a.writer(), b.writer()
    assert b.watermark == -1
    wa.commit([make_episode(features, 3, seed=1)])
    wa.commit([make_episode(features, 3, seed=2)])
    assert b._state is not None and b._state.seq == -1, "b has not looked at the log since"
    res = wb.commit([make_episode(features, 3, seed=3)])
    assert (res.seq, res.episode_ids) == (2, [2])
    assert a.log.record_seqs() == [0, 1, 2]
    snap = a.snapshot()
    assert [snap.meta(i).seed for i in range(3)] == [1, 2, 3]


def test_put_if_absent_loser_retries(tmp_store: EpisodeStore, features: dict[str, Any], monkeypatch) -> None:
    """If ``<seq>`` is taken between refresh and publish, the writer re-reads the log and retries."""
    writer = tmp_store.writer()
    rival = EpisodeStore.open(tmp_store.root, durability="process").writer(writer_id="rival")
    real_publish = tmp_store.log.publish
    calls = {"n": 0}

    def racing_publish(record):  # the rival wins the first attempt
        calls["n"] += 1
        if calls["n"] == 1:
            rival.commit([make_episode(features, 2, seed=100)])
        return real_publish(record)

    monkeypatch.setattr(tmp_store.log, "publish", racing_publish)
    res = writer.commit([make_episode(features, 3, seed=200)])
    assert calls["n"] == 2
    assert (res.seq, res.episode_ids) == (1, [1])
    snap = tmp_store.snapshot()
    assert [snap.meta(i).seed for i in (0, 1)] == [100, 200]
    assert snap.meta(0).writer_id == "rival"
    check_episode(snap, 0)
    check_episode(snap, 1)


def test_checkpoint_written_and_used(tmp_store: EpisodeStore, features: dict[str, Any]) -> None:
    interval = tmp_store.manifest.checkpoint_interval
    writer = tmp_store.writer()
    for i in range(interval + 2):
        writer.commit([make_episode(features, 1, seed=i)])
    assert tmp_store.log.checkpoint_seqs() == [interval - 1]
    reopened = EpisodeStore.open(tmp_store.root, durability="process")
    assert reopened.log.newest_checkpoint().seq == interval - 1
    state = reopened.refresh()
    assert state.seq == interval + 1 and sorted(state.episodes) == list(range(interval + 2))
    assert state.episodes == tmp_store.refresh().episodes
    # A checkpoint is only an accelerator: without it the records give the same state.
    (tmp_store.root / LOG_DIR / f"_checkpoint.{interval - 1:020d}.json").unlink()
    assert EpisodeStore.open(tmp_store.root).refresh().episodes == state.episodes


def test_fsync_durability_commits(tmp_path: Path, features: dict[str, Any]) -> None:
    store = EpisodeStore.create(tmp_path / "s", features=features, fps=10)
    assert store.durability == "fsync" and store.durable
    res = store.writer().commit([make_episode(features, 6, seed=3)])
    check_episode(store.snapshot(), res.episode_ids[0])
    with pytest.raises(ValueError, match="durability"):
        EpisodeStore.open(store.root, durability="sometimes")  # type: ignore[arg-type]


def test_empty_commit_rejected(tmp_store: EpisodeStore) -> None:
    with pytest.raises(ValueError, match="at least one episode"):
        tmp_store.writer().commit([])


def _bad(features: dict[str, Any], **changes: Any) -> Episode:
    frames = make_frames(features, 4, seed=0)
    for name, value in changes.items():
        key = name.replace("__", ".")
        if value is None:
            del frames[key]
        else:
            frames[key] = value
    return Episode(frames=frames, meta=EpisodeMeta(length=4))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"observation__state": None}, r"missing \['observation.state'\]"),
        ({"observation__velocity": np.zeros((4, 4), np.float32)}, r"unexpected \['observation.velocity'\]"),
        ({"observation__state": np.zeros((4, 5), np.float32)}, r"'observation.state' has shape \(4, 5\)"),
        ({"observation__state": np.zeros((3, 4), np.float32)}, r"'observation.state' has shape \(3, 4\)"),
        ({"episode_step": np.zeros(4, np.float64)}, r"'episode_step' has dtype float64, store expects int64"),
        ({"action__expert_valid": np.zeros(4, np.float32)}, r"'action.expert_valid' has dtype float32"),
    ],
    ids=[
        "missing-field",
        "unknown-field",
        "wrong-shape",
        "wrong-length",
        "float-into-int",
        "float-into-bool",
    ],
)
def test_schema_mismatch_on_commit(
    tmp_store: EpisodeStore, features: dict[str, Any], change: dict[str, Any], message: str
) -> None:
    good = make_episode(features, 2, seed=1)
    with pytest.raises(SchemaMismatchError, match=message):
        tmp_store.writer().commit([good, _bad(features, **change)])
    assert tmp_store.watermark == -1
    assert not (tmp_store.root / "segments").exists() or not any(
        (tmp_store.root / "segments").rglob("zarr.json")
    )


def test_same_kind_cast_is_accepted(tmp_store: EpisodeStore, features: dict[str, Any]) -> None:
    """float64 data for a float32 field is cast (same kind); the stored values are the float32 ones."""
    ep = make_episode(features, 3, seed=9)
    frames = dict(ep.frames)
    frames["observation.state"] = frames["observation.state"].astype(np.float64)
    res = tmp_store.writer().commit([Episode(frames=frames, meta=ep.meta)])
    got = tmp_store.snapshot().episode(res.episode_ids[0])["observation.state"]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, ep.frames["observation.state"])


def test_writers_share_one_id_space(tmp_store: EpisodeStore, features: dict[str, Any]) -> None:
    writers = [tmp_store.writer(writer_id=f"w{i}") for i in range(3)]
    ids: list[int] = []
    for round_ in range(3):
        for i, w in enumerate(writers):
            ids += w.commit([make_episode(features, 2, seed=10 * round_ + i)]).episode_ids
    assert ids == list(range(9))
    state = tmp_store.refresh()
    assert state.writer_seqs == {"w0": 2, "w1": 2, "w2": 2}


def test_interrupt_after_publication_keeps_committed_segment(
    tmp_store: EpisodeStore, features: dict[str, Any], monkeypatch
) -> None:
    """An interrupt after the record was linked (Ctrl-C in fsync_dir, the checkpoint write) must not
    delete the segment of a published commit."""

    def interrupted(state: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tmp_store, "maybe_checkpoint", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tmp_store.writer().commit([make_episode(features, 3, seed=1)])
    fresh = EpisodeStore.open(tmp_store.root)
    assert fresh.watermark == 0, "the record was published before the interrupt"
    check_snapshot(fresh.snapshot())
    assert fsck(fresh).ok


def test_a_full_filesystem_is_a_storage_error_and_leaves_no_temporaries(
    tmpfs: Any, features: dict[str, Any]
) -> None:
    """ENOSPC while writing a segment: one-line StorageError (exit 6) naming the store, no
    ``.partial`` files left, nothing committed lost."""
    mount = tmpfs.mount("small", size="1m")
    store = EpisodeStore.create(mount / "store", features=features, fps=10, durability="process")
    writer = store.writer()
    committed = 0
    with pytest.raises(StorageError) as err:
        for i in range(10_000):
            writer.commit([make_episode(features, 500, seed=i)])
            committed += 1
    assert err.value.exit_code == 6 and "no space left on device" in str(err.value)
    assert str(mount / "store") in str(err.value) and "\n" not in str(err.value)
    assert committed > 0
    assert [p for p in (mount / "store").rglob("*") if ".partial" in p.name] == []
    snap = EpisodeStore.open(mount / "store").snapshot()
    assert snap.num_episodes == committed
    check_snapshot(snap)


def test_a_commit_whose_record_is_published_counts_even_if_its_checkpoint_fails(
    tmp_store: EpisodeStore, features: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record is in the log: the commit happened, a failure after it (a checkpoint on a full
    disk) must not report it as failed (the collector would undercount what is committed)."""

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_store.root / "_checkpoints"))

    monkeypatch.setattr(tmp_store, "maybe_checkpoint", full)
    result = tmp_store.writer().commit([make_episode(features, 3, seed=1)])
    assert result.seq == 0 and result.episode_ids == [0]
    assert EpisodeStore.open(tmp_store.root).snapshot().num_episodes == 1
