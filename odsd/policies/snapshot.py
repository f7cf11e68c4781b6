"""Policy snapshots on disk: atomic publish, verified load, newest-complete lookup.

Layout of one snapshot (no pickle anywhere)::

    <root>/v000003/
        model.safetensors     the module's state dict
        policy.json           PolicyMeta (architecture, layout + hash, weights sha256, version, ...)
        COMPLETE              written last; readers ignore directories without it

Usage::

    path = publish_snapshot("runs/policies", model, meta)      # -> runs/policies/v000001
    latest = latest_snapshot("runs/policies")                   # newest complete, or None
    loaded = load_snapshot(latest, env_spec=env.spec, device="cpu")
    action = loaded.policy(flat["observation.state"])           # [n, A]

``publish_snapshot`` writes ``v{version:06d}.partial-<random>/``, fsyncs every file, writes
``COMPLETE``, fsyncs, then renames the directory into place, so a reader sees either nothing or
a whole snapshot.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import ValidationError
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from odsd.envs.spec import STATE_KEY, EnvSpec
from odsd.policies.architectures import build_model
from odsd.policies.errors import (
    LayoutMismatchError,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotIncompleteError,
    SnapshotNotFoundError,
)
from odsd.policies.meta import PolicyMeta

WEIGHTS = "model.safetensors"
META = "policy.json"
COMPLETE = "COMPLETE"
_VERSION_DIR = re.compile(r"^v(\d{6,})$")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse fsync on directories
        _fsync_file(path)


def snapshot_versions(root: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(version, path)`` of every complete snapshot under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _VERSION_DIR.match(child.name)
        if match and child.is_dir() and (child / COMPLETE).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_snapshot(root: str | os.PathLike[str]) -> Path | None:
    """The newest complete snapshot directory under ``root`` (``None`` when there is none)."""
    versions = snapshot_versions(root)
    return versions[-1][1] if versions else None


def _next_version(root: Path) -> int:
    taken = [int(m.group(1)) for c in root.iterdir() if (m := _VERSION_DIR.match(c.name))]
    return max(taken, default=0) + 1


def publish_snapshot(
    root_dir: str | os.PathLike[str], model: nn.Module, meta: PolicyMeta, version: int | None = None
) -> Path:
    """Atomically publish ``model`` with ``meta`` as ``root_dir/v{version:06d}``; return its path.

    ``version=None`` takes one more than the highest existing version directory.
    """
    root = Path(root_dir)
    root.mkdir(parents=True, exist_ok=True)
    version = _next_version(root) if version is None else int(version)
    if version < 0:
        raise SnapshotError(f"snapshot version must be non-negative, got {version}")
    final = root / f"v{version:06d}"
    if final.exists():
        raise SnapshotError(f"snapshot {final} already exists; versions are immutable")
    partial = root / f"v{version:06d}.partial-{secrets.token_hex(4)}"
    partial.mkdir()
    try:
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
        save_file(tensors, str(partial / WEIGHTS))
        _fsync_file(partial / WEIGHTS)
        full = meta.model_copy(update={"version": version, "weights_sha256": _sha256(partial / WEIGHTS)})
        (partial / META).write_text(full.model_dump_json(indent=2))
        _fsync_file(partial / META)
        (partial / COMPLETE).write_text(json.dumps({"version": version}) + "\n")
        _fsync_file(partial / COMPLETE)
        _fsync_dir(partial)
        os.rename(partial, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return final


def read_meta(path: str | os.PathLike[str]) -> PolicyMeta:
    """Parse and validate ``policy.json`` of a complete snapshot directory."""
    path = Path(path)
    if not path.is_dir():
        raise SnapshotNotFoundError(f"no snapshot directory at {path}")
    if not (path / COMPLETE).is_file():
        raise SnapshotIncompleteError(f"snapshot {path} has no {COMPLETE} marker; refusing to load it")
    try:
        return PolicyMeta.model_validate_json((path / META).read_text())
    except FileNotFoundError:
        raise SnapshotCorruptError(f"snapshot {path} has no {META}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise SnapshotCorruptError(
            f"snapshot {path}/{META} is invalid at {where!r}: {first['msg']}"
        ) from None


def check_layout(meta: PolicyMeta, env_spec: EnvSpec, where: str | Path = "snapshot") -> None:
    """Raise :class:`LayoutMismatchError` unless ``meta`` was made for ``env_spec``'s layout."""
    expected = env_spec.layout_hash()
    if meta.layout_hash != expected:
        raise LayoutMismatchError(
            f"{where} was trained for layout {meta.layout_hash[:12]} (task {meta.task!r}) but env "
            f"{env_spec.task!r} has layout {expected[:12]}; observation/action layouts differ"
        )


@dataclass
class LoadedPolicy:
    """A verified snapshot ready for batched inference (see module docstring)."""

    model: nn.Module
    meta: PolicyMeta
    path: Path
    device: torch.device

    @property
    def version(self) -> int:
        """Snapshot version (``vNNNNNN``)."""
        return int(self.meta.version or 0)

    @torch.inference_mode()
    def policy(self, obs_state: torch.Tensor) -> torch.Tensor:
        """Raw actions ``[n, A]`` for ``observation.state`` ``[n, D]`` (moved to the policy device)."""
        return self.model(obs_state.to(self.device, torch.float32))

    chunk_steps = 1
    """A snapshot policy acts one step at a time (see ``odsd.collect.student.StudentPolicy``)."""

    def act(self, obs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, None]:
        """The student interface: :meth:`policy` on ``obs["observation.state"]``, no chunk position."""
        return self.policy(obs[STATE_KEY]), None

    def reset_rows(self, rows: torch.Tensor) -> None:
        """Stateless; nothing to forget."""


def load_snapshot(
    path: str | os.PathLike[str], *, env_spec: EnvSpec | None = None, device: str | torch.device = "cpu"
) -> LoadedPolicy:
    """Load and verify a snapshot; ``path`` is a ``vNNNNNN`` directory or a root of them.

    Checks, in order: ``COMPLETE`` exists, ``policy.json`` validates, the weights' sha256 matches,
    the layout hash matches ``env_spec`` (when given), the architecture is registered and the
    weights fit it exactly.
    """
    path = Path(path)
    if path.is_dir() and not _VERSION_DIR.match(path.name) and not (path / META).exists():
        latest = latest_snapshot(path)
        if latest is None:
            raise SnapshotNotFoundError(f"no complete snapshot under {path}")
        path = latest
    meta = read_meta(path)
    weights = path / WEIGHTS
    if not weights.is_file():
        raise SnapshotCorruptError(f"snapshot {path} has no {WEIGHTS}")
    if meta.weights_sha256 is None or _sha256(weights) != meta.weights_sha256:
        raise SnapshotCorruptError(
            f"snapshot {path}: {WEIGHTS} does not match the sha256 in {META} (tampered?)"
        )
    if env_spec is not None:
        check_layout(meta, env_spec, path)
    model = build_model(meta.architecture, dict(meta.arch_kwargs))
    device = torch.device(device)
    try:
        state = load_file(str(weights), device=str(device))
        model.load_state_dict(state, strict=True)
    except (SafetensorError, RuntimeError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SnapshotCorruptError(
            f"snapshot {path}: weights do not fit {meta.architecture!r}: {first_line}"
        ) from exc
    model.to(device).eval()
    return LoadedPolicy(model=model, meta=meta, path=path, device=device)


class SnapshotFollower:
    """Hot reload: hand out the newest complete snapshot when it changes.

    ::

        follower = SnapshotFollower("runs/policies", env_spec=env.spec)
        if (new := follower.poll()) is not None:
            policy = new
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        env_spec: EnvSpec | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        self.root, self.env_spec, self.device = Path(root), env_spec, device
        self.current: LoadedPolicy | None = None

    def poll(self) -> LoadedPolicy | None:
        """Load and return a newer snapshot if one was published since the last poll."""
        versions = snapshot_versions(self.root)
        if not versions or (self.current is not None and versions[-1][0] <= self.current.version):
            return None
        self.current = load_snapshot(versions[-1][1], env_spec=self.env_spec, device=self.device)
        return self.current
