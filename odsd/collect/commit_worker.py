"""The writer thread: batches finished episodes into commits, fed through a bounded queue."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from odsd.schema import CommitContext
from odsd.store import CommitResult, Episode, EpisodeBatch, EpisodeWriter

_FLUSH = object()
_STOP = object()


@dataclass(frozen=True)
class CommitStats:
    seq: int | None
    episodes: int
    frames: int
    latency_s: float


class CommitWorker:
    """Commits episodes from a bounded queue in batches (by count and by age).

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
    ) -> None:
        self.writer = writer
        self.max_batch_episodes = max_batch_episodes
        self.max_batch_age_s = max_batch_age_s
        self.context = context or CommitContext
        self.on_commit = on_commit
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_size)
        self._error: BaseException | None = None
        self._flushed = threading.Condition()
        self._flush_requests = 0
        self._flush_done = 0
        self._thread = threading.Thread(target=self._run, name="odsd-commit", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    @property
    def failed(self) -> bool:
        return self._error is not None

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    def submit(self, episodes: Episode | EpisodeBatch) -> None:
        """Queue one episode or a batch of episodes (blocks while the queue is full)."""
        while True:
            self.check()
            try:
                self._queue.put(episodes, timeout=0.5)
                return
            except queue.Full:
                continue

    def drain(self, timeout_s: float | None = None) -> None:
        """Commit everything submitted so far (the synchronized point for run-state manifests)."""
        with self._flushed:
            self._flush_requests += 1
            ticket = self._flush_requests
        self._put_control(_FLUSH)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._flushed:
            while self._flush_done < ticket and self._error is None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("commit worker did not drain in time")
                self._flushed.wait(timeout=0.5 if remaining is None else min(0.5, remaining))
        self.check()

    def close(self, *, discard_pending: bool = False) -> int:
        """Stop the thread, by default after committing what is queued; return how many were dropped."""
        dropped = 0
        if discard_pending:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                dropped += _count(item)
        self._put_control(_STOP)
        self._thread.join()
        self.check()
        return dropped

    def _put_control(self, item: object) -> None:
        # A dead thread (commit error) never empties a full queue: don't block on it forever.
        while self._thread.is_alive():
            try:
                return self._queue.put(item, timeout=0.1)
            except queue.Full:
                continue

    def _run(self) -> None:
        batch: list[Episode | EpisodeBatch] = []
        pending = 0
        oldest = 0.0
        try:
            while True:
                timeout = None if not batch else max(0.0, oldest + self.max_batch_age_s - time.monotonic())
                try:
                    item = self._queue.get(timeout=timeout)
                except queue.Empty:
                    item = None
                if isinstance(item, Episode | EpisodeBatch):
                    if not batch:
                        oldest = time.monotonic()
                    batch.append(item)
                    pending += _count(item)
                    if pending < self.max_batch_episodes:
                        continue
                self._commit(batch)
                batch, pending = [], 0
                if item is _FLUSH:
                    with self._flushed:
                        self._flush_done += 1
                        self._flushed.notify_all()
                elif item is _STOP:
                    return
        except BaseException as exc:
            self._error = exc
            with self._flushed:
                self._flushed.notify_all()

    def _commit(self, parts: list[Episode | EpisodeBatch]) -> None:
        if not parts:
            return
        start = time.perf_counter()
        batch = EpisodeBatch.concat(parts)
        result = self.writer.commit(batch, context=self.context())
        stats = CommitStats(
            seq=result.seq,
            episodes=batch.num_episodes,
            frames=batch.num_frames,
            latency_s=time.perf_counter() - start,
        )
        if self.on_commit is not None:
            self.on_commit(result, stats)


def _count(item: object) -> int:
    if isinstance(item, EpisodeBatch):
        return item.num_episodes
    return int(isinstance(item, Episode))
