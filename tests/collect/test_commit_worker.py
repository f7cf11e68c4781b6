"""The writer thread: batching by count and by age, back-pressure, and error propagation."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from odsd.collect.commit_worker import CommitWorker, ConcatScratch, store_batch
from odsd.schema import CommitContext, EpisodeMeta
from odsd.store import CommitResult, Episode, EpisodeBatch, EpisodeStore


def episode(i: int, length: int = 2) -> Episode:
    return Episode(
        frames={"x": np.full(length, i, dtype=np.float32)}, meta=EpisodeMeta(length=length, seed=i)
    )


class FakeWriter:
    """Records committed batches; can block on ``gate`` or raise ``error``."""

    def __init__(self, *, gate: threading.Event | None = None, error: BaseException | None = None) -> None:
        self.batches: list[list[int]] = []
        self.contexts: list[CommitContext] = []
        self.times: list[float] = []
        self.gate = gate
        self.error = error
        self.entered = threading.Event()

    def commit(self, batch, *, context=None):
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10), "test gate never opened"
        if self.error is not None:
            raise self.error
        metas = batch.metas if isinstance(batch, EpisodeBatch) else [ep.meta for ep in batch]
        self.batches.append([meta.seed for meta in metas])
        self.contexts.append(context)
        self.times.append(time.monotonic())
        return CommitResult(seq=len(self.batches) - 1, episode_ids=list(range(len(metas))))


def wait_for(pred, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def run_with_timeout(fn, timeout: float = 5.0):
    """Run ``fn`` in a thread; fail (instead of hanging the suite) if it does not return."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} did not return within {timeout}s (hang)"
    return box


def test_batches_by_count() -> None:
    writer = FakeWriter()
    w = CommitWorker(writer, max_batch_episodes=3, max_batch_age_s=60.0)
    for i in range(7):
        w.submit(episode(i))
    assert wait_for(lambda: len(writer.batches) == 2)
    time.sleep(0.2)
    assert writer.batches == [[0, 1, 2], [3, 4, 5]]  # the 7th waits for count, age or drain
    w.drain()
    assert writer.batches == [[0, 1, 2], [3, 4, 5], [6]]
    w.close()


def test_batches_by_age() -> None:
    writer = FakeWriter()
    w = CommitWorker(writer, max_batch_episodes=100, max_batch_age_s=0.2)
    t0 = time.monotonic()
    w.submit(episode(0))
    w.submit(episode(1))
    assert wait_for(lambda: len(writer.batches) == 1, timeout=3.0)
    assert writer.batches == [[0, 1]]
    assert writer.times[0] - t0 >= 0.15
    w.close()


def test_drain_commits_everything_and_is_a_barrier() -> None:
    writer = FakeWriter()
    w = CommitWorker(writer, max_batch_episodes=1000, max_batch_age_s=60.0)
    for i in range(5):
        w.submit(episode(i))
    w.drain()
    assert [i for b in writer.batches for i in b] == [0, 1, 2, 3, 4]
    w.drain()  # an empty drain returns and commits nothing
    assert len(writer.batches) == 1
    w.close()


def test_close_commits_pending_unless_discarded() -> None:
    writer = FakeWriter()
    w = CommitWorker(writer, max_batch_episodes=1000, max_batch_age_s=60.0)
    for i in range(3):
        w.submit(episode(i))
    w.close()
    assert writer.batches == [[0, 1, 2]]

    gate = threading.Event()
    writer2 = FakeWriter(gate=gate)
    w2 = CommitWorker(writer2, max_batch_episodes=1, max_batch_age_s=60.0, queue_size=8)
    w2.submit(episode(0))
    assert writer2.entered.wait(5)
    for i in range(1, 4):
        w2.submit(episode(i))
    gate.set()
    w2.close(discard_pending=True)
    assert writer2.batches == [[0]]


def test_back_pressure_blocks_submit_when_queue_full() -> None:
    gate = threading.Event()
    writer = FakeWriter(gate=gate)
    w = CommitWorker(writer, max_batch_episodes=1, max_batch_age_s=60.0, queue_size=2)
    w.submit(episode(0))
    assert writer.entered.wait(5)  # the thread holds episode 0 inside commit()
    w.submit(episode(1))
    w.submit(episode(2))
    assert w.depth == 2
    returned = threading.Event()
    t = threading.Thread(target=lambda: (w.submit(episode(3)), returned.set()), daemon=True)
    t.start()
    assert not returned.wait(0.7), "submit returned although the queue was full"
    gate.set()
    assert returned.wait(5)
    w.drain()
    assert [i for b in writer.batches for i in b] == [0, 1, 2, 3]
    w.close()


def test_error_surfaces_in_drain_with_original_message() -> None:
    writer = FakeWriter(error=OSError(28, "No space left on device (disk 42)"))
    w = CommitWorker(writer, max_batch_episodes=1000, max_batch_age_s=60.0)
    w.submit(episode(0))
    with pytest.raises(OSError, match=r"disk 42"):
        w.drain(timeout_s=5)


def test_error_surfaces_in_submit_and_check() -> None:
    writer = FakeWriter(error=RuntimeError("zarr write failed: row 17"))
    w = CommitWorker(writer, max_batch_episodes=1, max_batch_age_s=60.0)
    w.submit(episode(0))
    assert wait_for(lambda: w._error is not None)
    with pytest.raises(RuntimeError, match="zarr write failed: row 17"):
        w.check()
    with pytest.raises(RuntimeError, match="zarr write failed: row 17"):
        w.submit(episode(1))


def test_close_after_error_with_full_queue_does_not_hang() -> None:
    """The thread died on a commit error while the queue was full: close() must not block forever."""
    gate = threading.Event()
    writer = FakeWriter(gate=gate, error=RuntimeError("boom 7"))
    w = CommitWorker(writer, max_batch_episodes=1, max_batch_age_s=60.0, queue_size=1)
    w.submit(episode(0))
    assert writer.entered.wait(5)
    w.submit(episode(1))  # fills the queue
    gate.set()
    assert wait_for(lambda: w._error is not None)
    box = run_with_timeout(w.close, timeout=5.0)
    assert isinstance(box.get("error"), RuntimeError) and "boom 7" in str(box["error"])


def test_drain_after_error_with_full_queue_does_not_hang() -> None:
    gate = threading.Event()
    writer = FakeWriter(gate=gate, error=RuntimeError("boom 8"))
    w = CommitWorker(writer, max_batch_episodes=1, max_batch_age_s=60.0, queue_size=1)
    w.submit(episode(0))
    assert writer.entered.wait(5)
    w.submit(episode(1))
    gate.set()
    assert wait_for(lambda: w._error is not None)
    box = run_with_timeout(w.drain, timeout=5.0)
    assert isinstance(box.get("error"), RuntimeError) and "boom 8" in str(box["error"])


def test_context_and_on_commit_callback() -> None:
    writer = FakeWriter()
    seen = []
    ctx = CommitContext(iteration=3, beta=0.25, policy_version=2)
    w = CommitWorker(
        writer, max_batch_episodes=2, context=lambda: ctx, on_commit=lambda r, s: seen.append((r.seq, s))
    )
    for i in range(4):
        w.submit(episode(i, length=3))
    w.drain()
    w.close()
    assert writer.contexts == [ctx, ctx]
    assert [(seq, s.episodes, s.frames) for seq, s in seen] == [(0, 2, 6), (1, 2, 6)]
    assert all(s.latency_s >= 0 for _, s in seen)


def test_real_store_roundtrip(tmp_path) -> None:
    features = {"x": {"dtype": "float32", "shape": [], "names": None}}
    store = EpisodeStore.create(tmp_path / "s", features=features, fps=10, durability="process")
    w = CommitWorker(store.writer(run_id="r"), max_batch_episodes=2, max_batch_age_s=0.1)
    for i in range(5):
        w.submit(episode(i, length=i + 1))
    w.drain()
    w.close()
    snap = EpisodeStore.open(tmp_path / "s").snapshot()
    assert snap.num_episodes == 5
    assert [int(snap.episode(e)["x"][0]) for e in snap.episode_ids] == [0, 1, 2, 3, 4]


def test_store_batch_joins_large_fields_into_reused_scratch_memory() -> None:
    rng = np.random.default_rng(0)

    def part(n: int) -> EpisodeBatch:
        return EpisodeBatch(
            frames={
                "observation.images.top": rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8),
                "x": rng.standard_normal(n).astype(np.float32),
            },
            metas=[EpisodeMeta(length=n)],
        )

    scratch = ConcatScratch(min_bytes=1 << 12)
    parts = [part(5), part(7)]
    joined = store_batch(parts, scratch)
    reference = EpisodeBatch.concat(parts)
    for name, values in reference.frames.items():
        np.testing.assert_array_equal(joined.frames[name], values)
    assert [m.length for m in joined.metas] == [5, 7]
    first = joined.frames["observation.images.top"]
    assert np.shares_memory(first, scratch._buffers["observation.images.top"])
    assert "x" not in scratch._buffers  # small fields are joined the ordinary way
    again = store_batch([part(3), part(4)], scratch)
    assert np.shares_memory(again.frames["observation.images.top"], first)  # no new memory
    bigger = store_batch([part(30), part(40)], scratch)
    assert bigger.frames["observation.images.top"].shape == (70, 32, 32, 3)
    assert store_batch([parts[0]], scratch) is parts[0]
