"""``EpisodeStore``: open or create a store directory and follow its commit log."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import ValidationError

from odsd.schema import FORMAT_VERSION, FeatureSpec, StoreManifest
from odsd.store.errors import (
    CorruptStoreError,
    FormatVersionError,
    SchemaMismatchError,
    StoreError,
    StoreExistsError,
    StoreNotFoundError,
)
from odsd.store.frame_codecs import with_default_encodings
from odsd.store.fsio import fsync_dir, put_if_absent
from odsd.store.leases import LeaseHandle
from odsd.store.log import LOG_DIR, CommitLog, TornRecord
from odsd.store.state import StoreState

if TYPE_CHECKING:
    from odsd.store.snapshot import Snapshot
    from odsd.store.writer import EpisodeWriter

MANIFEST = "odsd.json"
Durability = Literal["fsync", "process"]


def _as_features(features: Mapping[str, FeatureSpec | Mapping]) -> dict[str, FeatureSpec]:
    return {
        k: v if isinstance(v, FeatureSpec) else FeatureSpec.model_validate(v) for k, v in features.items()
    }


class EpisodeStore:
    """A versioned episode store in a directory.

    >>> store = EpisodeStore.create("runs.odsd", features={"obs": {"dtype": "float32", "shape": [4]}}, fps=10)
    >>> writer = store.writer(run_id="r1")
    >>> writer.commit([Episode(frames={"obs": np.zeros((5, 4), np.float32)}, meta=EpisodeMeta(length=5))])
    >>> snap = store.snapshot()
    >>> snap.num_episodes, snap.num_frames
    (1, 5)

    ``durability="fsync"`` (default) survives power loss; ``"process"`` only process crashes.

    ``index=False`` opens a handle for a process that only appends (a collector's writer): it
    follows the log without keeping the per-episode index in memory (see :class:`StoreState`),
    writes no checkpoints, and builds the index only transiently for :meth:`snapshot`.
    """

    def __init__(
        self,
        root: Path,
        manifest: StoreManifest,
        *,
        durability: Durability | None = None,
        index: bool = True,
    ) -> None:
        durability = durability or manifest.durability
        if durability not in ("fsync", "process"):
            raise ValueError(f"durability must be 'fsync' or 'process', not {durability!r}")
        self.root = root
        self.manifest = manifest
        self.durability: Durability = durability
        self.log = CommitLog(root, durable=self.durable)
        self._lock = threading.RLock()
        self._state: StoreState | None = None
        self._torn: TornRecord | None = None
        self.index = index
        self._checkpoint_seq = -1
        """Seq of the newest checkpoint this handle read or wrote (-1: none)."""

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: str | Path,
        *,
        features: Mapping[str, FeatureSpec | Mapping],
        fps: float,
        robot_type: str | None = None,
        durability: Durability = "fsync",
        index: bool = True,
    ) -> EpisodeStore:
        """Create a new, empty store at ``path`` (the directory may exist but must hold no store)."""
        root = Path(path)
        try:
            manifest = StoreManifest(
                store_id=uuid.uuid4().hex,
                features=with_default_encodings(_as_features(features)),
                fps=fps,
                robot_type=robot_type,
                durability=durability,
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            raise SchemaMismatchError(
                f"invalid store schema at {'.'.join(map(str, first['loc']))}: {first['msg']}"
            ) from exc
        root.mkdir(parents=True, exist_ok=True)
        (root / LOG_DIR).mkdir(exist_ok=True)
        data = json.dumps(manifest.model_dump(mode="json"), indent=1).encode()
        if not put_if_absent(root / MANIFEST, data, durable=durability == "fsync"):
            raise StoreExistsError(f"{root}: a store already exists here")
        if durability == "fsync":
            fsync_dir(root)
        return cls(root, manifest, durability=durability, index=index)

    @classmethod
    def open(
        cls, path: str | Path, *, durability: Durability | None = None, index: bool = True
    ) -> EpisodeStore:
        """Open an existing store; refuses unknown format versions and damaged manifests.

        ``durability`` overrides the store's default (recorded at creation) for this handle.
        """
        root = Path(path)
        manifest_path = root / MANIFEST
        if not root.is_dir():
            raise StoreNotFoundError(f"{root}: no such store directory")
        try:
            raw = manifest_path.read_bytes()
        except FileNotFoundError as exc:
            raise StoreNotFoundError(f"{root}: not an odsd store (no {MANIFEST})") from exc
        except PermissionError as exc:
            raise StoreNotFoundError(f"{manifest_path}: permission denied") from exc
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CorruptStoreError(f"{manifest_path}: damaged store manifest (not valid JSON)") from exc
        version = body.get("format_version") if isinstance(body, dict) else None
        if version != FORMAT_VERSION:
            raise FormatVersionError(
                f"{manifest_path}: store format version {version!r} is not supported "
                f"(this odsd reads version {FORMAT_VERSION})"
            )
        try:
            manifest = StoreManifest.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise CorruptStoreError(
                f"{manifest_path}: invalid manifest ({first['loc']}: {first['msg']})"
            ) from exc
        if not (root / LOG_DIR).is_dir():
            # Without its log a store would read as empty: every committed episode silently gone.
            raise CorruptStoreError(f"{root / LOG_DIR}: commit log directory is missing")
        return cls(root, manifest, durability=durability, index=index)

    @classmethod
    def open_or_create(
        cls,
        path: str | Path,
        *,
        features: Mapping[str, FeatureSpec | Mapping],
        fps: float,
        robot_type: str | None = None,
        durability: Durability | None = None,
        index: bool = True,
    ) -> EpisodeStore:
        """Open the store at ``path`` if there is one (its schema must match), else create it."""
        root = Path(path)
        if not (root / MANIFEST).exists():
            try:
                return cls.create(
                    root,
                    features=features,
                    fps=fps,
                    robot_type=robot_type,
                    durability=durability or "fsync",
                    index=index,
                )
            except StoreExistsError:
                pass
        store = cls.open(root, durability=durability, index=index)
        store.check_schema(features, fps=fps)
        return store

    def check_schema(
        self, features: Mapping[str, FeatureSpec | Mapping], *, fps: float | None = None
    ) -> None:
        """Raise :class:`SchemaMismatchError` naming the first difference from the store's schema."""
        wanted = _as_features(features)
        have = self.manifest.features
        if set(wanted) != set(have):
            raise SchemaMismatchError(
                f"{self.root}: feature schema differs (store has {sorted(set(have) - set(wanted))} "
                f"not requested, requested {sorted(set(wanted) - set(have))} not in store)"
            )
        for name, spec in wanted.items():
            if spec.encoding is None and spec.kind != "array":  # a camera without a chosen codec: any
                spec = spec.model_copy(update={"encoding": have[name].encoding})
            if spec != have[name]:
                raise SchemaMismatchError(
                    f"{self.root}: feature {name!r} is {spec.model_dump()} but the store has {have[name].model_dump()}"
                )
        if fps is not None and abs(fps - self.manifest.fps) > 1e-9:
            raise SchemaMismatchError(f"{self.root}: fps {fps} differs from the store's {self.manifest.fps}")

    # -- state ---------------------------------------------------------------------------------

    @property
    def durable(self) -> bool:
        return self.durability == "fsync"

    @property
    def features(self) -> dict[str, FeatureSpec]:
        return self.manifest.features

    @functools.cached_property
    def root_real(self) -> str:
        """The store directory with symbolic links resolved (committed data must resolve below it)."""
        return os.path.realpath(self.root)

    def refresh(self) -> StoreState:
        """Follow the log to its current tail and return the (shared, lock-protected) latest state."""
        with self._lock:
            if self._state is None:
                ckpt = self.log.newest_checkpoint()
                self._state = StoreState.from_checkpoint(ckpt) if ckpt else StoreState()
                self._checkpoint_seq = ckpt.seq if ckpt else -1
                if not self.index:
                    self._state = self._state.without_index()
            records, self._torn = self.log.read_tail(self._state.seq)
            for record in records:
                self._state.apply(record, str(self.log.where(record.seq)))
            if records:
                self._checkpoint_if_behind(self._state)
            return self._state

    @property
    def torn_record(self) -> TornRecord | None:
        """A damaged trailing record found by the last refresh (ignored by readers; see fsck)."""
        return self._torn

    def state_at(self, watermark: int) -> StoreState:
        """The state after records ``0..watermark`` (replayed from the newest checkpoint before it)."""
        latest = self.refresh()
        if watermark > latest.seq:
            raise StoreError(f"{self.root}: watermark {watermark} is beyond the log's end ({latest.seq})")
        if watermark == latest.seq and latest.indexed:
            return latest.copy()
        ckpt = self.log.newest_checkpoint(at_most=watermark)
        state = StoreState.from_checkpoint(ckpt) if ckpt else StoreState()
        records, _ = self.log.read_tail(state.seq, until=watermark)
        for record in records:
            state.apply(record, str(self.log.where(record.seq)))
        return state

    def latest_state(self) -> StoreState:
        """A private copy of the newest state, with its episode index (even for ``index=False``)."""
        with self._lock:
            latest = self.refresh()
            return latest.copy() if latest.indexed else self.state_at(latest.seq)

    @property
    def watermark(self) -> int:
        """Highest seq with every lower record present (-1 for an empty store)."""
        return self.refresh().seq

    def maybe_checkpoint(self, state: StoreState) -> None:
        """Write a checkpoint when ``state.seq`` is on the configured interval (best effort)."""
        if state.indexed and state.seq >= 0 and (state.seq + 1) % self.manifest.checkpoint_interval == 0:
            self._write_checkpoint(state)

    def _checkpoint_if_behind(self, state: StoreState) -> None:
        """Checkpoint a state that replayed ``checkpoint_interval`` records past the newest checkpoint.

        Writers opened with ``index=False`` write no checkpoints, so whoever holds the index (a
        reader, a maintenance command) writes them when it had to replay that many records.
        """
        interval = self.manifest.checkpoint_interval
        if not state.indexed or state.seq - self._checkpoint_seq < interval:
            return
        with contextlib.suppress(OSError):
            newest = max(self.log.checkpoint_seqs(), default=-1)
            if newest > self._checkpoint_seq:
                self._checkpoint_seq = newest
            if state.seq - self._checkpoint_seq >= interval:
                self._write_checkpoint(state)

    def _write_checkpoint(self, state: StoreState) -> None:
        with contextlib.suppress(OSError):
            self.log.write_checkpoint(state.to_checkpoint())
            self._checkpoint_seq = max(self._checkpoint_seq, state.seq)

    # -- factories -----------------------------------------------------------------------------

    def writer(self, *, writer_id: str | None = None, run_id: str | None = None) -> EpisodeWriter:
        from odsd.store.writer import EpisodeWriter

        return EpisodeWriter(self, writer_id=writer_id, run_id=run_id)

    def snapshot(self, watermark: int | None = None, *, lease: bool = False) -> Snapshot:
        """Pin a consistent view at ``watermark`` (default: the newest)."""
        from odsd.store.snapshot import Snapshot

        # The lease exists (protecting everything) before the state is pinned, then narrows to it.
        handle = LeaseHandle(self.root, -1) if lease else None
        with self._lock:
            state = self.latest_state() if watermark is None else self.state_at(watermark)
        return Snapshot(self, state, lease=handle)

    def __repr__(self) -> str:
        return f"EpisodeStore({str(self.root)!r})"
