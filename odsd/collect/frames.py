"""The per-frame schema of collected data (docs/architecture.md, Contracts), derived from the env spec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from odsd.envs import EnvSpec
from odsd.errors import ConfigError

SOURCE_STUDENT = 0
SOURCE_EXPERT = 1
SOURCE_HOLD = 2
SOURCE_NAMES = {SOURCE_STUDENT: "student", SOURCE_EXPERT: "expert", SOURCE_HOLD: "hold"}
CHUNK_POSITION = "action.chunk_position"
"""int16 per frame, only in stores collected with a chunking student: the position of
``action.student`` in the chunk it came from (0 on the step the chunk was predicted), -1 where the
student produced no chunked action (docs/collect.md, "Action chunks")."""


def frame_features(
    spec: EnvSpec, *, record_state: bool = False, image_encoding: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """Field name -> ``{dtype, shape, names}`` (plus ``kind``/``encoding`` for cameras) per recorded field.

    Observation keys and cameras come from the env spec; actions use the env's raw action
    space. ``image_encoding`` maps camera names (or ``"*"``) to encodings like ``"jpeg:90"``.
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
    out = {
        k: {"dtype": v["dtype"], "shape": list(v["shape"]), "names": v.get("names")}
        for k, v in features.items()
    }
    for k, v in features.items():
        if v.get("kind", "array") != "array":
            out[k]["kind"] = v["kind"]
    if image_encoding:
        for key, encoding in camera_encodings(spec, image_encoding).items():
            out[key]["encoding"] = encoding
    return out


def camera_encodings(spec: EnvSpec, image_encoding: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Image feature key -> the encoding chosen for it (cameras left to the store default are absent).

    Raises :class:`~odsd.errors.ConfigError` naming an unknown camera or encoding.
    """
    from odsd.store.frame_codecs import parse_encoding

    cameras = {camera.name: camera for camera in spec.cameras}
    unknown = sorted(set(image_encoding) - set(cameras) - {"*"})
    if unknown:
        known = ", ".join(sorted(cameras)) or "none"
        raise ConfigError(f"image_encoding names unknown cameras {unknown} (task {spec.task!r} has: {known})")
    out: dict[str, dict[str, Any]] = {}
    for name, camera in cameras.items():
        text = image_encoding.get(name, image_encoding.get("*"))
        if text is not None:
            out[camera.key] = parse_encoding(text).model_dump()
    return out
