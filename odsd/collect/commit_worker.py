"""The writer thread: batches finished episodes into commits, fed through a bounded queue.

:class:`CommitWorker` commits in a thread of the collecting process;
:class:`~odsd.collect.commit_process.CommitProcess` has the same interface and commits in a
child process. Both share :func:`batching_loop`, which decides when a commit happens: when
``max_batch_episodes`` are waiting, when the oldest waiting episode is ``max_batch_age_s`` old,
on a flush request (``drain``) and on stop.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from odsd.collect.finished import FinishedBatch
from odsd.schema import CommitContext
from odsd.store import CommitResult, Episode, EpisodeBatch, EpisodeWriter

if TYPE_CHECKING:
    from odsd.collect.config import CompactionConfig

Item = Episode | EpisodeBatch | FinishedBatch
"""What a commit worker accepts: one episode, a store batch, or finished episodes from the collector."""

FLUSH = "flush"
STOP = "stop"


@dataclass(frozen=True)
class CommitStats:
    seq: int | None
    episodes: int
    frames: int
    latency_s: float


def count_episodes(item: object) -> int:
    if isinstance(item, EpisodeBatch | FinishedBatch):
        return item.num_episodes
    return int(isinstance(item, Episode))


class ConcatScratch:
    """Reused output memory for joining the large fields (camera frames) of a commit's parts.

    Concatenating hundreds of MB into fresh arrays costs more in page faults than in copying
    (the writer returns freed memory to the OS); joining into buffers kept from the previous
    commit does not. The buffers grow to the largest batch seen and are kept for the writer's
    life; the batch built with them is valid until the next :func:`store_batch` call.
    """

    def __init__(self, min_bytes: int = 1 << 20) -> None:
        self.min_bytes = min_bytes
        self._buffers: dict[str, np.ndarray] = {}

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._buffers.values())

    def concat(self, name: str, arrays: Sequence[np.ndarray]) -> np.ndarray:
        total = sum(a.nbytes for a in arrays)
        if total < self.min_bytes:
            return np.concatenate(arrays)
        buffer = self._buffers.get(name)
        if buffer is None or buffer.nbytes < total:
            buffer = self._buffers[name] = np.empty(total + total // 4, dtype=np.uint8)
        first = arrays[0]
        out = buffer[:total].view(first.dtype).reshape((sum(len(a) for a in arrays), *first.shape[1:]))
        return np.concatenate(arrays, out=out)


def store_batch(parts: Sequence[Item], scratch: ConcatScratch | None = None) -> EpisodeBatch:
    """One store batch of ``parts`` (finished episodes get their metadata built here)."""
    batches = [p.to_episode_batch() if isinstance(p, FinishedBatch) else p for p in parts]
    if scratch is None or len(batches) == 1:
        return EpisodeBatch.concat(batches)
    batches = [b if isinstance(b, EpisodeBatch) else EpisodeBatch.from_episodes([b]) for b in batches]
    return EpisodeBatch(
        frames={name: scratch.concat(name, [b.frames[name] for b in batches]) for name in batches[0].frames},
        metas=[m for b in batches for m in b.metas],
    )


def batching_loop(
    get: Callable[[float | None], Any],
    commit: Callable[[list[Any]], None],
    on_control: Callable[[tuple], None],
    *,
    max_batch_episodes: int,
    max_batch_age_s: float,
    count: Callable[[Any], int],
) -> int:
    """Collect data entries from ``get`` into commits until a ``(STOP, discard)`` control tuple arrives.

    ``get(timeout)`` returns a data entry, a control tuple ``(FLUSH, ...)`` / ``(STOP, ...)``, or
    None when ``timeout`` passed. Pending entries are committed before a control tuple is handed
    to ``on_control`` (a stop with ``discard`` set drops them instead). Returns the number of
    episodes dropped that way.
    """
    batch: list[Any] = []
    pending = 0
    oldest = 0.0
    while True:
        timeout = None if not batch else max(0.0, oldest + max_batch_age_s - time.monotonic())
        entry = get(timeout)
        if entry is None and (not batch or time.monotonic() < oldest + max_batch_age_s):
            continue  # an idle wake-up, or the batch is not old yet
        if entry is not None and not isinstance(entry, tuple):
            if not batch:
                oldest = time.monotonic()
            batch.append(entry)
            pending += count(entry)
            if pending < max_batch_episodes:
                continue
            entry = None
        discard = (
            isinstance(entry, tuple) and entry[0] == STOP and bool(entry[1] if len(entry) > 1 else False)
        )
        dropped = pending if discard else 0
        if batch and not discard:
            commit(batch)
        batch, pending = [], 0
        if isinstance(entry, tuple):
            on_control(entry)
            if entry[0] == STOP:
                return dropped


class FlushTickets:
    """What both commit workers share: the first error, and ``drain`` by numbered flush requests.

    A subclass sends ``(FLUSH, ticket)`` through its queue in :meth:`_put_control` and calls
    :meth:`_flush_acknowledged` when the worker has committed everything before it.
    """

    def __init__(self) -> None:
        self._error: BaseException | None = None
        self._flushed = threading.Condition()
        self._flush_requests = 0
        self._flush_done = 0

    @property
    def failed(self) -> bool:
        return self._error is not None

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def drain(self, timeout_s: float | None = None) -> None:
        """Commit everything submitted so far (the synchronized point for run-state manifests)."""
        with self._flushed:
            self._flush_requests += 1
            ticket = self._flush_requests
        self._put_control((FLUSH, ticket))
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._flushed:
            while self._flush_done < ticket and self._error is None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("commit worker did not drain in time")
                self._flushed.wait(timeout=0.5 if remaining is None else min(0.5, remaining))
        self.check()

    def _put_control(self, item: tuple) -> None:
        raise NotImplementedError

    def _put_data(self, inbox: Any, item: object) -> None:
        """Put ``item`` on ``inbox``, blocking while it is full but raising a worker failure."""
        while True:
            self.check()
            try:
                inbox.put(item, timeout=0.5)
                return
            except queue.Full:
                continue

    @staticmethod
    def _take_queued(inbox: Any) -> list[Any]:
        """Everything waiting on ``inbox`` now, without blocking."""
        taken = []
        while True:
            try:
                taken.append(inbox.get_nowait())
            except queue.Empty:
                return taken

    def _flush_acknowledged(self, ticket: int) -> None:
        with self._flushed:
            self._flush_done = ticket
            self._flushed.notify_all()

    def _fail(self, exc: BaseException) -> None:
        """Record the worker's failure and wake anyone waiting in ``drain``."""
        self._error = exc
        with self._flushed:
            self._flushed.notify_all()


class CommitWorker(FlushTickets):
    """Commits episodes from a bounded queue in batches (by count and by age), in a thread.

    ``submit`` blocks when the queue is full (back-pressure on the collector instead of
    unbounded memory). ``drain`` returns once everything submitted so far is committed.
    A failure in the thread is re-raised, with its original message, by the next call to
    ``submit``, ``drain`` or ``check``.
    """

    def __init__(
        self,
        writer: EpisodeWriter,
        *,
        max_batch_episodes: int = 32,
        max_batch_age_s: float = 2.0,
        queue_size: int = 256,
        context: Callable[[], CommitContext] | None = None,
        on_commit: Callable[[CommitResult, CommitStats], None] | None = None,
        compaction: CompactionConfig | None = None,
    ) -> None:
        from odsd.collect.auto_compact import AutoCompactor

        self.writer = writer
        self.compactor = (
            AutoCompactor(writer.store, compaction, writer_id=writer.writer_id)
            if compaction is not None
            else None
        )
        self.max_batch_episodes = max_batch_episodes
        self.max_batch_age_s = max_batch_age_s
        self.context = context or CommitContext
        self.on_commit = on_commit
        super().__init__()
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        self._thread = threading.Thread(target=self._run, name="odsd-commit", daemon=True)
        self._thread.start()

    @property
    def writer_id(self) -> str | None:
        return getattr(self.writer, "writer_id", None)

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def wait_ready(self) -> None:
        """The thread is ready as soon as it exists (the writer process needs a moment)."""
        self.check()

    def submit(self, episodes: Item) -> None:
        """Queue one episode or a batch of episodes (blocks while the queue is full)."""
        self._put_data(self._queue, episodes)

    def close(self, *, discard_pending: bool = False) -> int:
        """Stop the thread, by default after committing what is queued; return how many were dropped."""
        queued = self._take_queued(self._queue) if discard_pending else []
        dropped = sum(count_episodes(item) for item in queued)
        self._put_control((STOP, False))
        self._thread.join()
        self.check()
        return dropped

    def _put_control(self, item: tuple) -> None:
        # A dead thread (commit error) never empties a full queue: don't block on it forever.
        while self._thread.is_alive():
            try:
                return self._queue.put(item, timeout=0.1)
            except queue.Full:
                continue

    def _get(self, timeout: float | None) -> object:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def _on_control(self, control: tuple) -> None:
        if control[0] == FLUSH:
            self._flush_acknowledged(control[1])

    def _run(self) -> None:
        try:
            batching_loop(
                self._get,
                self._commit,
                self._on_control,
                max_batch_episodes=self.max_batch_episodes,
                max_batch_age_s=self.max_batch_age_s,
                count=count_episodes,
            )
        except BaseException as exc:
            self._fail(exc)

    def _commit(self, parts: list[Item]) -> None:
        start = time.perf_counter()
        batch = store_batch(parts)
        result = self.writer.commit(batch, context=self.context())
        stats = CommitStats(
            seq=result.seq,
            episodes=batch.num_episodes,
            frames=batch.num_frames,
            latency_s=time.perf_counter() - start,
        )
        if self.on_commit is not None:
            self.on_commit(result, stats)
        if self.compactor is not None:
            self.compactor.after_commit(result, frames=batch.num_frames)
