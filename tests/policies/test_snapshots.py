"""Policy snapshots: atomic publish, newest-complete lookup, tamper/mismatch/unknown errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from odsd.envs import make_env
from odsd.envs.spec import EnvSpec
from odsd.errors import OdsdError
from odsd.policies import (
    LayoutMismatchError,
    ReferenceMLP,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotFollower,
    SnapshotIncompleteError,
    SnapshotNotFoundError,
    UnknownArchitectureError,
    latest_snapshot,
    load_snapshot,
    publish_snapshot,
    reference_meta,
)


@pytest.fixture
def spec() -> EnvSpec:
    return make_env("pick_place", num_envs=4, seed=0).spec


def small_model(spec: EnvSpec, seed: int = 0) -> ReferenceMLP:
    torch.manual_seed(seed)
    return ReferenceMLP(
        spec.state_dim,
        spec.action.dim,
        hidden=(16,),
        obs_mean=torch.randn(spec.state_dim),
        obs_std=torch.rand(spec.state_dim) + 0.5,
    )


def test_publish_and_load_round_trip(tmp_path: Path, spec: EnvSpec) -> None:
    model = small_model(spec)
    path = publish_snapshot(
        tmp_path, model, reference_meta(model, spec, parent_watermark=7, stats_version="s1")
    )
    assert path.name == "v000001"
    assert sorted(p.name for p in path.iterdir()) == ["COMPLETE", "model.safetensors", "policy.json"]
    loaded = load_snapshot(path, env_spec=spec)
    assert (
        loaded.version == 1
        and loaded.meta.parent_watermark == 7
        and loaded.meta.layout_hash == spec.layout_hash()
    )
    x = torch.randn(5, spec.state_dim)
    assert torch.allclose(loaded.policy(x), model(x))
    assert (loaded.policy(x * 100).abs() <= 1.0).all()  # bounded by the action limits
    assert publish_snapshot(tmp_path, model, reference_meta(model, spec)).name == "v000002"
    assert load_snapshot(tmp_path).version == 2  # a root resolves to its newest complete snapshot
    with pytest.raises(SnapshotError, match="immutable"):
        publish_snapshot(tmp_path, model, reference_meta(model, spec), version=2)


def test_no_pickle_in_snapshot(tmp_path: Path, spec: EnvSpec) -> None:
    model = small_model(spec)
    path = publish_snapshot(tmp_path, model, reference_meta(model, spec))
    json.loads((path / "policy.json").read_text())
    assert not (path / "model.safetensors").read_bytes().startswith(b"\x80")  # pickle protocol header


def test_latest_ignores_incomplete_and_partial_dirs(tmp_path: Path, spec: EnvSpec) -> None:
    assert latest_snapshot(tmp_path) is None
    model = small_model(spec)
    publish_snapshot(tmp_path, model, reference_meta(model, spec))
    publish_snapshot(tmp_path, model, reference_meta(model, spec))
    (tmp_path / "v000002" / "COMPLETE").unlink()
    (tmp_path / "v000003.partial-abcd").mkdir()
    assert latest_snapshot(tmp_path) == tmp_path / "v000001"
    with pytest.raises(SnapshotIncompleteError, match="no COMPLETE marker"):
        load_snapshot(tmp_path / "v000002")
    with pytest.raises(SnapshotNotFoundError):
        load_snapshot(tmp_path / "v000009")


def test_tampered_weights_are_refused(tmp_path: Path, spec: EnvSpec) -> None:
    model = small_model(spec)
    path = publish_snapshot(tmp_path, model, reference_meta(model, spec))
    weights = path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptError, match="tampered") as info:
        load_snapshot(path)
    assert isinstance(info.value, OdsdError) and "\n" not in str(info.value)


def test_invalid_policy_json_is_refused(tmp_path: Path, spec: EnvSpec) -> None:
    model = small_model(spec)
    path = publish_snapshot(tmp_path, model, reference_meta(model, spec))
    meta = json.loads((path / "policy.json").read_text())
    del meta["layout_hash"]
    (path / "policy.json").write_text(json.dumps(meta))
    with pytest.raises(SnapshotCorruptError, match="layout_hash"):
        load_snapshot(path)


def test_layout_mismatch_is_refused(tmp_path: Path, spec: EnvSpec) -> None:
    model = small_model(spec)
    path = publish_snapshot(tmp_path, model, reference_meta(model, spec))
    reach = make_env("reach", num_envs=1).spec
    with pytest.raises(LayoutMismatchError, match="layouts differ"):
        load_snapshot(path, env_spec=reach)


def test_unknown_architecture_and_wrong_shapes(tmp_path: Path, spec: EnvSpec) -> None:
    model = small_model(spec)
    meta = reference_meta(model, spec).model_copy(update={"architecture": "transformer_xl"})
    with pytest.raises(UnknownArchitectureError, match="transformer_xl"):
        load_snapshot(publish_snapshot(tmp_path, model, meta))
    meta = reference_meta(model, spec).model_copy(
        update={"arch_kwargs": {**model.arch_kwargs(), "hidden": [8]}}
    )
    with pytest.raises(SnapshotCorruptError, match="do not fit"):
        load_snapshot(publish_snapshot(tmp_path, model, meta))


def test_follower_hot_reloads_newer_snapshots(tmp_path: Path, spec: EnvSpec) -> None:
    follower = SnapshotFollower(tmp_path, env_spec=spec)
    assert follower.poll() is None
    model = small_model(spec)
    publish_snapshot(tmp_path, model, reference_meta(model, spec))
    assert follower.poll().version == 1
    assert follower.poll() is None
    publish_snapshot(tmp_path, model, reference_meta(model, spec))
    assert follower.poll().version == 2
