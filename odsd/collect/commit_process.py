"""The writer process: :class:`CommitWorker`'s interface, committing in a child process.

Building commit records, episode metadata and segment files is Python work that holds the GIL;
in a writer *thread* it competes with the collection loop for the interpreter. The child process
runs the same :func:`~odsd.collect.commit_worker.batching_loop` on its own core, fed through a
bounded ``multiprocessing`` queue (back-pressure as with the thread). The frames of finished
episodes do not go through the queue: they are copied once into a shared
:class:`~odsd.collect.frame_arena.FrameArena` and the queue carries where they are::

    worker = CommitProcess(store_root, run_id="r1", writer_id="r1-w", context=lambda: ctx)
    worker.submit(finished_batch)      # blocks while the queue is full
    worker.drain()                     # everything submitted so far is committed
    worker.close()

The child opens its own :class:`~odsd.store.EpisodeWriter` on the store; the commit protocol
makes its commits exactly as safe as the thread's. It ignores SIGINT/SIGTERM (the collector
decides when to stop) and dies with its parent (``PR_SET_PDEATHSIG`` on Linux, armed before the
child imports anything heavy, see :mod:`odsd.child_guard`; a parent check every second
elsewhere), so a collector killed at any moment never leaves a writer behind. Errors in the child
come back with their original type and message; a child that dies is reported as an error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import multiprocessing as mp
import os
import queue
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from odsd.child_guard import DieWithParent
from odsd.collect.commit_worker import (
    FLUSH,
    STOP,
    CommitStats,
    ConcatScratch,
    FlushTickets,
    Item,
    batching_loop,
    count_episodes,
    store_batch,
)
from odsd.collect.finished import FinishedBatch
from odsd.collect.frame_arena import ArenaView, FrameArena, SharedFrames
from odsd.schema import CommitContext
from odsd.store import CommitResult

log = logging.getLogger("odsd.collect")

_POLL_S = 1.0
_START_TIMEOUT_S = 120.0


class CommitProcessError(RuntimeError):
    """The writer process died or failed in a way that cannot be re-raised as its own exception."""


@dataclasses.dataclass(frozen=True)
class _SharedBatch:
    """Finished episodes whose frames wait in the frame arena (what travels through the queue)."""

    ref: SharedFrames
    batch: FinishedBatch
    """The episodes, with ``frames`` empty."""

    @property
    def num_episodes(self) -> int:
        return self.batch.num_episodes


class CommitProcess(FlushTickets):
    """Commits episodes in batches (by count and by age) in a child process; see the module docstring."""

    def __init__(
        self,
        store_root: str | Path,
        *,
        run_id: str | None,
        writer_id: str,
        max_batch_episodes: int = 32,
        max_batch_age_s: float = 2.0,
        queue_size: int = 256,
        context: Callable[[], CommitContext] | None = None,
        on_commit: Callable[[CommitResult, CommitStats], None] | None = None,
        compaction: Any = None,
        frame_arena_bytes: int | None = 2 * 2**30,
    ) -> None:
        self.writer_id = writer_id
        self.context = context or CommitContext
        self.on_commit = on_commit
        ctx = mp.get_context("spawn")  # the collector holds torch threads: never fork it
        self._inbox: Any = ctx.Queue(maxsize=queue_size)
        self._outbox: Any = ctx.Queue()
        super().__init__()
        self._submitted = 0
        self._child_dropped = 0
        self._consumed = 0
        self._stopped = threading.Event()
        # Frames of finished episodes go through shared memory (odsd.collect.frame_arena), not pickled.
        self._arena = _frame_arena(frame_arena_bytes)
        self._in_flight: deque[SharedFrames | None] = deque()
        self._in_flight_lock = threading.Lock()
        self._process = ctx.Process(
            target=DieWithParent("odsd.collect.commit_process:_child_main"),
            args=(
                str(store_root),
                run_id,
                writer_id,
                max_batch_episodes,
                max_batch_age_s,
                self._inbox,
                self._outbox,
                compaction.model_dump() if compaction is not None else None,
                self._arena.child_path if self._arena is not None else None,
            ),
            name="odsd-writer",
            daemon=True,
        )
        _start_without_main(self._process)
        # The child imports and opens the store while the collector goes on (its queue buffers).
        self._ready = threading.Event()
        self._started = time.monotonic()
        self._receiver = threading.Thread(target=self._receive, name="odsd-writer-results", daemon=True)
        self._receiver.start()

    # -- the CommitWorker interface -------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Batches submitted and not yet committed."""
        return self._submitted - self._consumed

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def wait_ready(self) -> None:
        """Block until the child has opened the store (or raise why it could not)."""
        while not self._ready.wait(0.1):
            self.check()
            if self._stopped.is_set():
                break
        self.check()

    def submit(self, episodes: Item) -> None:
        """Queue episodes with the current commit context (blocks while the queue or the frame arena is full)."""
        ref = None
        item: Item | _SharedBatch = episodes
        arena = self._arena
        if arena is not None and isinstance(episodes, FinishedBatch) and arena.fits(episodes.frames):
            ref = arena.put(episodes.frames, wait=self._check_writer)
            item = _SharedBatch(ref, dataclasses.replace(episodes, frames={}))
        with self._in_flight_lock:
            self._in_flight.append(ref)
        self._put_data(self._inbox, (item, self.context()))
        self._submitted += 1

    def close(self, *, discard_pending: bool = False) -> int:
        """Stop the process, by default after committing what is queued; return how many were dropped."""
        queued = self._take_queued(self._inbox) if discard_pending else []
        self._consumed += len(queued)
        dropped = sum(_episodes(item) for item, _ in queued)
        self._put_control((STOP, discard_pending))
        self._stopped.wait()
        self._receiver.join()
        self._process.join(timeout=30)
        if self._process.is_alive():  # pragma: no cover - a stuck child after a stop request
            self._process.kill()
            self._process.join()
        self._inbox.close()
        self._outbox.close()
        if self._arena is not None:
            self._arena.close()
        self.check()
        return dropped + self._child_dropped

    # -- parent side ----------------------------------------------------------------------------

    def _check_writer(self) -> None:
        """While waiting for arena space: raise the writer's failure, or give up if it has stopped."""
        self.check()
        if self._stopped.is_set():
            raise CommitProcessError("the writer process stopped while frames waited for it")

    def _committed(self, consumed: int) -> None:
        """The oldest ``consumed`` submissions are committed: free their arena space."""
        with self._in_flight_lock:
            refs = [self._in_flight.popleft() for _ in range(min(consumed, len(self._in_flight)))]
        for ref in refs:
            if ref is not None and self._arena is not None:
                self._arena.release(ref)

    def _put_control(self, item: tuple) -> None:
        # A dead child never empties a full queue: don't block on it forever.
        while not self._stopped.is_set():
            try:
                return self._inbox.put(item, timeout=0.1)
            except queue.Full:
                continue

    def _receive(self) -> None:
        """Results from the child: commits, flush acknowledgements, errors, the end."""
        try:
            while True:
                try:
                    message = self._outbox.get(timeout=0.5)
                except queue.Empty:
                    if not self._process.is_alive():
                        self._fail(self._death())
                        return
                    if not self._ready.is_set() and time.monotonic() - self._started > _START_TIMEOUT_S:
                        self._process.kill()
                        self._fail(CommitProcessError("the writer process did not start in time"))
                        return
                    continue
                kind = message[0]
                if kind == "ready":
                    self._ready.set()
                elif kind == "commit":
                    _, result, stats, consumed = message
                    self._consumed += consumed
                    self._committed(consumed)
                    if self.on_commit is not None:
                        self.on_commit(result, stats)
                elif kind == "flushed":
                    self._flush_acknowledged(message[1])
                elif kind == "error":
                    self._fail(_rebuild(message[1], message[2]))
                    return
                elif kind == "stopped":
                    self._child_dropped = message[1]
                    return
        finally:
            self._stopped.set()
            with self._flushed:
                self._flushed.notify_all()

    def _death(self) -> CommitProcessError:
        code = self._process.exitcode
        if not self._ready.is_set():
            return CommitProcessError(f"the writer process exited during start-up (exit code {code})")
        return CommitProcessError(
            f"the writer process died (exit code {code}); episodes it had not committed are lost, "
            "committed ones are safe"
        )


def _start_without_main(process: Any) -> None:
    """Start a spawned child without re-running the parent's ``__main__``.

    ``spawn`` normally re-imports the main script in the child, which starts collecting again
    in a script without an ``if __name__ == "__main__"`` guard. The child only needs
    :func:`_child_main`, so the main module is hidden from the start-up data while it is built.
    """
    main = sys.modules.get("__main__")
    if main is None:
        process.start()
        return
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        process.start()
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def _frame_arena(nbytes: int | None) -> FrameArena | None:
    """The shared memory for frames, or None (frames are pickled) where the platform has none."""
    if not nbytes or not FrameArena.supported():
        return None
    try:
        return FrameArena(nbytes)
    except OSError as exc:  # e.g. memfd_create refused by a sandbox
        log.info("no shared frame memory (%s): frames go to the writer pickled", exc)
        return None


def _episodes(item: Item | _SharedBatch) -> int:
    return item.num_episodes if isinstance(item, _SharedBatch) else count_episodes(item)


def _rebuild(exc_type: type[BaseException] | None, message: str) -> BaseException:
    """The child's exception, re-created with its original type and message where possible."""
    if exc_type is not None:
        with contextlib.suppress(Exception):
            return exc_type(message)
    return CommitProcessError(message)


# -- child side -------------------------------------------------------------------------------


def _child_main(
    store_root: str,
    run_id: str | None,
    writer_id: str,
    max_batch_episodes: int,
    max_batch_age_s: float,
    inbox: Any,
    outbox: Any,
    compaction: dict[str, Any] | None = None,
    arena_path: str | None = None,
) -> None:
    parent = os.getppid()  # DieWithParent checked it is the collector
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        from odsd.collect.auto_compact import AutoCompactor, bound_native_heap
        from odsd.collect.config import CompactionConfig
        from odsd.store import EpisodeStore, image_arrays

        bound_native_heap()  # before the first batch: freed arrays go back to the OS (docs/performance.md)
        image_arrays.limit_threads(max(1, image_arrays.cpus() - 1))  # one CPU stays with the loop
        arena = ArenaView(arena_path) if arena_path is not None else None

        # Without the episode index: the writer's memory does not grow with the store.
        writer = EpisodeStore.open(store_root, index=False).writer(run_id=run_id, writer_id=writer_id)
        compactor = (
            AutoCompactor(writer.store, CompactionConfig.model_validate(compaction), writer_id=writer_id)
            if compaction is not None
            else None
        )
    except BaseException as exc:
        outbox.put(("error", _picklable_type(exc), str(exc)))
        return
    gc.freeze()  # the imports' objects: never walked by the collector again
    outbox.put(("ready",))
    context: list[CommitContext] = [CommitContext()]
    scratch = ConcatScratch()

    def get(timeout: float | None) -> Any:
        try:
            message = inbox.get(timeout=_POLL_S if timeout is None else min(timeout, _POLL_S))
        except queue.Empty:
            if os.getppid() != parent:
                raise SystemExit(0) from None  # orphaned: the collector is gone
            return None
        if message[0] in (FLUSH, STOP):
            return message
        item, context[0] = message
        if isinstance(item, _SharedBatch):
            assert arena is not None
            return dataclasses.replace(item.batch, frames=arena.arrays(item.ref))
        return item

    def commit(parts: list[Item]) -> None:
        start = time.perf_counter()
        batch = store_batch(parts, scratch)
        result = writer.commit(batch, context=context[0])
        stats = CommitStats(
            seq=result.seq,
            episodes=batch.num_episodes,
            frames=batch.num_frames,
            latency_s=time.perf_counter() - start,
        )
        outbox.put(("commit", result, stats, len(parts)))
        if compactor is not None:
            compactor.after_commit(result, frames=batch.num_frames)

    def on_control(control: tuple) -> None:
        if control[0] == FLUSH:
            outbox.put(("flushed", control[1]))

    try:
        dropped = batching_loop(
            get,
            commit,
            on_control,
            max_batch_episodes=max_batch_episodes,
            max_batch_age_s=max_batch_age_s,
            count=count_episodes,
        )
    except BaseException as exc:
        outbox.put(("error", _picklable_type(exc), str(exc)))
        return
    outbox.put(("stopped", dropped))
    outbox.close()
    outbox.join_thread()
    os._exit(0)  # nothing left to clean up; skip the interpreter's slow teardown


def _picklable_type(exc: BaseException) -> type[BaseException] | None:
    """The exception's class when the parent can import it (builtins and odsd errors)."""
    cls = type(exc)
    if cls.__module__ == "builtins" or cls.__module__.startswith("odsd."):
        return cls
    return None
