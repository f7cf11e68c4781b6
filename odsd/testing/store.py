"""Test kit for the episode store.

- feature-schema presets (:data:`TINY_FEATURES`, :data:`STATE_FEATURES`, :data:`SCALAR_FEATURES`);
- deterministic episodes: :func:`make_frames` / :func:`make_episode` derive every value from
  ``(features, length, seed)``, and the seed travels in ``EpisodeMeta.seed`` together with a
  content hash in ``meta.extra["sha"]``, so any reader can check an episode it sees without
  knowing who wrote it (:func:`check_episode`);
- :class:`StoreModel`: an in-memory reference model of the store's visible state, used by the
  hypothesis state machine;
- :func:`fork_call` / :class:`ReportFile`: run a writer in a forked child and let it report
  each commit *after* ``commit()`` returned, through an append-only file.

>>> store = EpisodeStore.create(tmp / "s", features=TINY_FEATURES, fps=10)
>>> result = store.writer().commit([make_episode(TINY_FEATURES, length=5, seed=7)])
>>> check_episode(store.snapshot(), result.episode_ids[0])
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from odsd.schema import EpisodeMeta, FeatureSpec
from odsd.store import Episode, Snapshot

FeaturesLike = Mapping[str, FeatureSpec | Mapping[str, Any]]

TINY_FEATURES: dict[str, dict[str, Any]] = {
    "observation.state": {"dtype": "float32", "shape": [4], "names": None},
    "action.expert": {"dtype": "float32", "shape": [2], "names": None},
    "action.expert_valid": {"dtype": "bool", "shape": [], "names": None},
    "episode_step": {"dtype": "int64", "shape": [], "names": None},
}
"""A small schema that still covers float, bool and integer fields and scalar/vector shapes."""

STATE_FEATURES: dict[str, dict[str, Any]] = {
    "observation.state": {"dtype": "float32", "shape": [24], "names": None},
    "observation.environment_state": {"dtype": "float32", "shape": [6], "names": None},
    "action.expert": {"dtype": "float32", "shape": [4], "names": None},
    "action.behavior": {"dtype": "float32", "shape": [4], "names": None},
    "reward": {"dtype": "float32", "shape": [], "names": None},
    "action.expert_confidence": {"dtype": "float32", "shape": [], "names": None},
}
"""State-sized frames: 40 float32 values per frame over 6 fields (24 + 6 + 4 + 4 + 1 + 1)."""

SCALAR_FEATURES: dict[str, dict[str, Any]] = {
    f"scalar.{i:02d}": {"dtype": "float32", "shape": [], "names": None} for i in range(40)
}
"""The same 40 float32 values per frame, as 40 scalar fields (worst case for per-field costs)."""


def as_specs(features: FeaturesLike) -> dict[str, FeatureSpec]:
    return {
        k: v if isinstance(v, FeatureSpec) else FeatureSpec.model_validate(v) for k, v in features.items()
    }


# -- deterministic content -----------------------------------------------------------------------


def derive_seed(*parts: object) -> int:
    """A stable 63-bit seed from any printable parts (e.g. writer id, writer seq, index)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def make_frames(features: FeaturesLike, length: int, seed: int) -> dict[str, np.ndarray]:
    """Per-field frame arrays ``[length, *shape]`` determined by ``(features, length, seed)``."""
    rng = np.random.default_rng(seed)
    frames: dict[str, np.ndarray] = {}
    for name, spec in sorted(as_specs(features).items()):
        shape = (length, *spec.shape)
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "b":
            values = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            values = rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape, endpoint=True)
        else:
            values = rng.standard_normal(shape)
        frames[name] = np.ascontiguousarray(values, dtype=dtype)
    return frames


def content_hash(frames: Mapping[str, np.ndarray]) -> str:
    """sha256 (hex, 16 chars) over field names, dtypes, shapes and bytes, in field-name order."""
    h = hashlib.sha256()
    for name in sorted(frames):
        arr = np.ascontiguousarray(frames[name])
        h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(memoryview(arr).cast("B"))
    return h.hexdigest()[:16]


def make_episode(features: FeaturesLike, length: int, seed: int, **meta: Any) -> Episode:
    """A deterministic :class:`Episode`; ``meta.seed`` and ``meta.extra["sha"]`` identify its content."""
    frames = make_frames(features, length, seed)
    extra = dict(meta.pop("extra", {}))
    extra["sha"] = content_hash(frames)
    return Episode(frames=frames, meta=EpisodeMeta(length=length, seed=seed, extra=extra, **meta))


def check_episode(snap: Snapshot, episode_id: int, features: FeaturesLike | None = None) -> None:
    """Assert that a visible episode's frames are exactly what its metadata says they are.

    Reads the episode both by :meth:`Snapshot.episode` and by a gather over its global frame
    range, so both the per-segment and the column path are checked.
    """
    feats = as_specs(features) if features is not None else snap.features
    meta = snap.meta(episode_id)
    assert meta.seed is not None, f"episode {episode_id} carries no seed"
    expected = make_frames(feats, meta.length, meta.seed)
    got = snap.episode(episode_id)
    assert sorted(got) == sorted(expected), f"episode {episode_id}: fields {sorted(got)}"
    for name, values in expected.items():
        np.testing.assert_array_equal(got[name], values, err_msg=f"episode {episode_id} field {name}")
    if "sha" in meta.extra:
        assert content_hash(got) == meta.extra["sha"], f"episode {episode_id}: content hash mismatch"


def check_snapshot(
    snap: Snapshot, *, gather_samples: int = 64, rng: np.random.Generator | None = None
) -> None:
    """Assert every visible episode matches its metadata, and random gathers match per-episode reads."""
    snap.load()
    feats = snap.features
    expected: dict[str, list[np.ndarray]] = {name: [] for name in feats}
    for entry in snap.entries:
        meta = entry.meta
        assert meta.seed is not None, f"episode {entry.episode_id} carries no seed"
        frames = make_frames(feats, meta.length, meta.seed)
        if "sha" in meta.extra:
            assert content_hash(frames) == meta.extra["sha"], f"episode {entry.episode_id}: metadata mismatch"
        for name in feats:
            expected[name].append(frames[name])
    if not snap.entries:
        return
    rng = rng or np.random.default_rng(0)
    idx = rng.integers(0, snap.num_frames, size=gather_samples)
    for name, parts in expected.items():
        full = np.concatenate(parts)
        np.testing.assert_array_equal(snap.read(name), full, err_msg=f"field {name} at wm {snap.watermark}")
        np.testing.assert_array_equal(snap.gather(name, idx), full[idx], err_msg=f"gather {name}")


# -- reference model -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelEpisode:
    episode_id: int
    seed: int
    length: int
    commit_seq: int


@dataclass
class StoreModel:
    """What the store must show: live episodes after every watermark, idempotency keys, counts.

    ``history[w]`` is the tuple of live episode ids visible at watermark ``w`` (``w = -1`` is the
    empty store), so snapshots pinned at any older watermark can be checked exactly.
    """

    episodes: dict[int, ModelEpisode] = field(default_factory=dict)
    history: dict[int, tuple[int, ...]] = field(default_factory=lambda: {-1: ()})
    watermark: int = -1
    next_episode_id: int = 0
    writer_seqs: dict[str, int] = field(default_factory=dict)

    def live(self, watermark: int | None = None) -> tuple[int, ...]:
        return self.history[self.watermark if watermark is None else watermark]

    @property
    def num_frames(self) -> int:
        return sum(self.episodes[i].length for i in self.live())

    def _advance(self, live: Iterable[int]) -> int:
        self.watermark += 1
        self.history[self.watermark] = tuple(sorted(live))
        return self.watermark

    def commit(
        self, writer_id: str, writer_seq: int, batch: Sequence[tuple[int, int]]
    ) -> tuple[int, list[int]] | None:
        """Apply an append of ``(seed, length)`` pairs; None when the idempotency key is a duplicate."""
        if writer_seq <= self.writer_seqs.get(writer_id, -1):
            return None
        self.writer_seqs[writer_id] = writer_seq
        seq = self.watermark + 1
        ids = list(range(self.next_episode_id, self.next_episode_id + len(batch)))
        for eid, (seed, length) in zip(ids, batch, strict=True):
            self.episodes[eid] = ModelEpisode(eid, seed, length, seq)
        self.next_episode_id += len(batch)
        self._advance((*self.live(), *ids))
        return seq, ids

    def remove(self, ids: Iterable[int]) -> int:
        gone = set(ids)
        assert gone <= set(self.live()), f"removing episodes that are not live: {gone - set(self.live())}"
        return self._advance(i for i in self.live() if i not in gone)

    def compacted(self, n_commits: int) -> None:
        """Compaction publishes ``n_commits`` records that leave the live set unchanged."""
        for _ in range(n_commits):
            self._advance(self.live())

    def expire(self, *, max_episodes: int | None = None, max_frames: int | None = None) -> list[int]:
        """Oldest-first ids that retention must remove to fit the capacities (FIFO by commit order)."""
        live = list(self.live())
        frames = sum(self.episodes[i].length for i in live)
        expired: list[int] = []
        for eid in live:
            over = (max_episodes is not None and len(live) - len(expired) > max_episodes) or (
                max_frames is not None and frames > max_frames
            )
            if not over:
                break
            expired.append(eid)
            frames -= self.episodes[eid].length
        return expired

    def check(self, snap: Snapshot) -> None:
        """Assert that ``snap`` shows exactly the model's episodes at its watermark, with their metadata."""
        ids = self.history.get(snap.watermark)
        assert ids is not None, (
            f"snapshot watermark {snap.watermark} unknown to the model (at {self.watermark})"
        )
        assert tuple(int(i) for i in snap.episode_ids) == ids, (
            f"wm {snap.watermark}: {snap.episode_ids} != {ids}"
        )
        for eid in ids:
            m = self.episodes[eid]
            entry = snap.entry(eid)
            assert (entry.meta.seed, entry.meta.length, entry.commit_seq) == (m.seed, m.length, m.commit_seq)
        assert snap.num_frames == sum(self.episodes[i].length for i in ids)


# -- forked writers ------------------------------------------------------------------------------


def fork_call(fn: Callable[..., object], *args: Any, **kwargs: Any) -> int:
    """Run ``fn(*args, **kwargs)`` in a forked child and return its pid.

    The child never returns into the caller: it exits with 0 after ``fn`` returns, 1 after an
    exception (printed to stderr). The parent should have imported everything the child needs,
    so that forking is cheap; zarr re-creates its event loop after a fork by itself.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded, use of fork()"
        pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        fn(*args, **kwargs)
        code = 0
    except BaseException:
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
    finally:
        os._exit(code)


def wait_exit(pid: int) -> int:
    """Wait for a child; return its exit code, or ``-signum`` when a signal ended it."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


class ReportFile:
    """An append-only file of JSON lines; each :meth:`append` is one ``write(2)`` on an O_APPEND fd.

    A process killed at any point leaves only whole lines behind (plus, at worst, nothing of
    the line being written), so the parent can trust every complete line it reads.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def append(self, **item: Any) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(item, sort_keys=True) + "\n").encode())
        finally:
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        items = []
        for line in self.path.read_bytes().split(b"\n"):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut short by a kill: never written in full
                    continue
        return items
