"""The per-frame schema of collected data (docs/architecture.md, Contracts), derived from the env spec."""

from __future__ import annotations

from typing import Any

from odsd.envs import EnvSpec

SOURCE_STUDENT = 0
SOURCE_EXPERT = 1
SOURCE_HOLD = 2
SOURCE_NAMES = {SOURCE_STUDENT: "student", SOURCE_EXPERT: "expert", SOURCE_HOLD: "hold"}


def frame_features(spec: EnvSpec, *, record_state: bool = False) -> dict[str, dict[str, Any]]:
    """Field name -> ``{dtype, shape, names}`` for every per-frame field odsd records.

    Observation keys come from the env spec; actions use the env's raw action space.
    """
    env_features = spec.features()
    action = env_features.pop("action")
    features: dict[str, dict[str, Any]] = dict(env_features)
    for key in ("action.expert", "action.student", "action.behavior"):
        features[key] = dict(action)
    scalars = {
        "action.expert_valid": "bool",
        "action.expert_confidence": "float32",
        "action.expert_failure": "int32",
        "action.student_valid": "bool",
        "action.source": "int8",
        "reward": "float32",
        "terminated": "bool",
        "truncated": "bool",
        "success": "bool",
        "episode_step": "int32",
        "segment_id": "int16",
        "segment_step": "int32",
        "segment_start": "bool",
        "policy_version": "int32",
        "beta": "float32",
    }
    for name, dtype in scalars.items():
        features[name] = {"dtype": dtype, "shape": (), "names": None}
    if record_state and spec.state is not None:
        for name, feat in spec.state.features().items():
            features[name if name.startswith("state.") else f"state.{name}"] = feat
    return {
        k: {"dtype": v["dtype"], "shape": list(v["shape"]), "names": v.get("names")}
        for k, v in features.items()
    }
