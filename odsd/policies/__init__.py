"""Policy snapshots (safetensors + ``policy.json`` + ``COMPLETE``), the reference MLP, hot reload.

::

    from odsd.policies import load_snapshot, latest_snapshot, publish_snapshot
    loaded = load_snapshot(latest_snapshot(root), env_spec=env.spec)
    action = loaded.policy(env.spec.flatten_observation(obs)["observation.state"])
"""

from odsd.policies.architectures import build_model, list_architectures, register_architecture
from odsd.policies.errors import (
    LayoutMismatchError,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotIncompleteError,
    SnapshotNotFoundError,
    UnknownArchitectureError,
)
from odsd.policies.fit import fit_reference_mlp, reference_meta
from odsd.policies.meta import NormalizationStats, PolicyMeta
from odsd.policies.mlp import ReferenceMLP
from odsd.policies.snapshot import (
    LoadedPolicy,
    SnapshotFollower,
    check_layout,
    latest_snapshot,
    load_snapshot,
    publish_snapshot,
    read_meta,
    snapshot_versions,
)

PolicySnapshot = LoadedPolicy

__all__ = [
    "LayoutMismatchError",
    "LoadedPolicy",
    "NormalizationStats",
    "PolicyMeta",
    "PolicySnapshot",
    "ReferenceMLP",
    "SnapshotCorruptError",
    "SnapshotError",
    "SnapshotFollower",
    "SnapshotIncompleteError",
    "SnapshotNotFoundError",
    "UnknownArchitectureError",
    "build_model",
    "check_layout",
    "fit_reference_mlp",
    "latest_snapshot",
    "list_architectures",
    "load_snapshot",
    "publish_snapshot",
    "read_meta",
    "reference_meta",
    "register_architecture",
    "snapshot_versions",
]
