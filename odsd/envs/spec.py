"""`EnvSpec`: the explicit contract between an environment and the collector.

An environment describes what its tensors mean once, here, and everything downstream (experts,
policies, the store schema) is checked against it::

    spec = EnvSpec(
        task="reach",
        task_description="move the end effector to the goal",
        observation=(
            ObservationKey("ee_pos", (3,), names=("ee.x", "ee.y", "ee.z")),
            ObservationKey("goal_pos", (3,)),
        ),
        action=ActionSpec(dim=3, low=(-1.0,) * 3, high=(1.0,) * 3, kind="ee_delta_pos"),
        step_dt=0.05,
        max_episode_steps=50,
        num_envs=8,
    )
    flat = spec.flatten_observation(obs)  # {"observation.state": [8, 6] float32}
    spec.features()["action"]             # {"dtype": "float32", "shape": (3,), "names": [...]}
    spec.layout_hash()                    # sha256 hex of the observation/action layout

Cameras are declared beside the observation keys; their frames ride in the same obs dict under
``camera.key`` and pass through flattening untouched::

    spec = EnvSpec(..., cameras=(CameraSpec("top", 96, 96, depth=True, description="over the table"),))
    obs["observation.images.top"]   # [num_envs, 96, 96, 3] uint8 on spec.device
    obs["observation.depth.top"]    # [num_envs, 96, 96, 1] uint16 millimetres
    spec.features()["observation.images.top"]["kind"]  # "image"

All spec classes are frozen dataclasses validated in ``__post_init__``; a bad spec raises
:class:`~odsd.envs.errors.EnvSpecError` at construction.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from odsd.envs.errors import EnvContractError, EnvSpecError

STATE_KEY = "observation.state"
ENVIRONMENT_STATE_KEY = "observation.environment_state"
IMAGES_PREFIX = "observation.images."
"""Camera ``top`` is the per-frame field ``observation.images.top`` (uint8, HWC)."""
DEPTH_PREFIX = "observation.depth."
"""The optional depth of camera ``top`` is ``observation.depth.top`` (uint16 millimetres, HW1)."""
IMAGE_NAMES = ("height", "width", "channels")
_CAMERA_NAME = re.compile(r"[a-z0-9_]+")

_TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a numpy-style dtype name (``"float32"`` → ``torch.float32``)."""
    try:
        return _TORCH_DTYPES[name]
    except KeyError:
        raise EnvSpecError(f"unsupported dtype {name!r}; use one of {sorted(_TORCH_DTYPES)}") from None


def dtype_name(dtype: torch.dtype) -> str:
    """The numpy-style name of a torch dtype (``torch.float32`` → ``"float32"``)."""
    for name, value in _TORCH_DTYPES.items():
        if value == dtype:
            return name
    raise EnvSpecError(f"unsupported torch dtype {dtype}")


def _shape(value: Sequence[int], what: str) -> tuple[int, ...]:
    shape = tuple(int(s) for s in value)
    if any(s <= 0 for s in shape):
        raise EnvSpecError(f"{what}: every dimension must be positive, got {shape}")
    return shape


def _names(value: Sequence[str] | None, size: int, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = tuple(str(n) for n in value)
    if len(names) != size:
        raise EnvSpecError(f"{what}: {len(names)} names for {size} elements")
    if len(set(names)) != len(names):
        raise EnvSpecError(f"{what}: element names must be unique")
    return names


@dataclass(frozen=True)
class ObservationKey:
    """One entry of the observation dict: ``name`` → tensor of ``[num_envs, *shape]``.

    ``names`` label the flattened elements (row-major); ``None`` means ``"<name>.<i>"``.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise EnvSpecError("observation key needs a non-empty name")
        object.__setattr__(self, "shape", _shape(self.shape, f"observation {self.name!r}"))
        torch_dtype(self.dtype)
        object.__setattr__(self, "names", _names(self.names, self.size, f"observation {self.name!r}"))

    @property
    def size(self) -> int:
        """Number of scalar elements per env row."""
        return math.prod(self.shape)

    def element_names(self) -> list[str]:
        """Explicit names, or ``"<key>.<i>"`` when none were given."""
        return list(self.names) if self.names else [f"{self.name}.{i}" for i in range(self.size)]


@dataclass(frozen=True)
class ActionSpec:
    """The raw action space the env consumes: ``[num_envs, dim]`` float32 in ``[low, high]``.

    ``kind`` names the control semantics (``"ee_delta_pos+gripper"``, ``"joint_pos"``, …);
    ``normalized`` says the bounds are a normalized range rather than physical units.
    """

    dim: int
    low: tuple[float, ...]
    high: tuple[float, ...]
    names: tuple[str, ...] | None = None
    kind: str = "continuous"
    normalized: bool = False

    def __post_init__(self) -> None:
        if int(self.dim) <= 0:
            raise EnvSpecError(f"action dim must be positive, got {self.dim}")
        object.__setattr__(self, "dim", int(self.dim))
        low = tuple(float(v) for v in np.broadcast_to(np.asarray(self.low, dtype=np.float64), (self.dim,)))
        high = tuple(float(v) for v in np.broadcast_to(np.asarray(self.high, dtype=np.float64), (self.dim,)))
        if not all(math.isfinite(v) for v in low + high):
            raise EnvSpecError("action bounds must be finite")
        bad = [i for i, (lo, hi) in enumerate(zip(low, high, strict=True)) if not lo < hi]
        if bad:
            raise EnvSpecError(f"action bounds need low < high; violated at dims {bad}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "names", _names(self.names, self.dim, "action"))
        if not self.kind:
            raise EnvSpecError("action kind must be a non-empty string")

    def element_names(self) -> list[str]:
        """Explicit names, or ``"action.<i>"``."""
        return list(self.names) if self.names else [f"action.{i}" for i in range(self.dim)]

    def low_tensor(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """``low`` as a float32 tensor ``[dim]``."""
        return torch.tensor(self.low, dtype=torch.float32, device=device)

    def high_tensor(self, device: torch.device | str = "cpu") -> torch.Tensor:
        """``high`` as a float32 tensor ``[dim]``."""
        return torch.tensor(self.high, dtype=torch.float32, device=device)

    def clip(self, action: torch.Tensor) -> torch.Tensor:
        """Clamp ``action`` (``[..., dim]``) into the bounds."""
        return torch.clamp(action, self.low_tensor(action.device), self.high_tensor(action.device))


@dataclass(frozen=True)
class StateField:
    """One field of the full simulator state (per env row): ``[num_envs, *shape]`` of ``dtype``."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _shape(self.shape, f"state field {self.name!r}"))
        torch_dtype(self.dtype)


@dataclass(frozen=True)
class StateSpec:
    """Ordered layout of what ``get_state`` returns and ``set_state`` accepts (record/replay)."""

    fields: tuple[StateField, ...]

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise EnvSpecError(f"state field names must be unique, got {names}")

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """``name → shape`` in order."""
        return {f.name: f.shape for f in self.fields}

    def features(self) -> dict[str, dict[str, Any]]:
        """Per-frame feature schema for ``state.<name>`` columns."""
        return {f"state.{f.name}": {"dtype": f.dtype, "shape": f.shape, "names": None} for f in self.fields}


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class CameraSpec:
    """One camera of an env: ``[num_envs, height, width, channels]`` uint8 frames under :attr:`key`.

    ``depth=True`` adds ``[num_envs, height, width, 1]`` uint16 depth in millimetres under
    :attr:`depth_key`. ``name`` is a plain name (``[a-z0-9_]+``) because it becomes part of the
    field name (``observation.images.<name>``)::

        CameraSpec("wrist", 96, 96, description="on the end effector, looking down").key
        # 'observation.images.wrist'
    """

    name: str
    height: int
    width: int
    channels: int = 3
    depth: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _CAMERA_NAME.fullmatch(self.name):
            raise EnvSpecError(f"camera name must be a non-empty plain name [a-z0-9_]+, got {self.name!r}")
        for what in ("height", "width", "channels"):
            value = getattr(self, what)
            if not _is_integer(value) or value <= 0:
                raise EnvSpecError(f"camera {self.name!r}: {what} must be a positive integer, got {value!r}")
        if self.channels not in (1, 3):
            raise EnvSpecError(f"camera {self.name!r}: channels must be 1 or 3, got {self.channels}")
        if not isinstance(self.depth, bool):
            raise EnvSpecError(f"camera {self.name!r}: depth must be true or false, got {self.depth!r}")
        if not isinstance(self.description, str):
            raise EnvSpecError(f"camera {self.name!r}: description must be a string")

    @property
    def key(self) -> str:
        """The frame's field name: ``observation.images.<name>``."""
        return IMAGES_PREFIX + self.name

    @property
    def depth_key(self) -> str:
        """The depth field name: ``observation.depth.<name>`` (present only with ``depth=True``)."""
        return DEPTH_PREFIX + self.name

    @property
    def shape(self) -> tuple[int, int, int]:
        """Per-row frame shape ``(height, width, channels)``."""
        return (self.height, self.width, self.channels)

    @property
    def depth_shape(self) -> tuple[int, int, int]:
        """Per-row depth shape ``(height, width, 1)``."""
        return (self.height, self.width, 1)

    def features(self) -> dict[str, dict[str, Any]]:
        """``{key: {dtype, shape, names, kind="image"}}`` plus the depth field when it has one."""
        out: dict[str, dict[str, Any]] = {
            self.key: {"dtype": "uint8", "shape": self.shape, "names": list(IMAGE_NAMES), "kind": "image"}
        }
        if self.depth:
            out[self.depth_key] = {
                "dtype": "uint16",
                "shape": self.depth_shape,
                "names": list(IMAGE_NAMES),
                "kind": "depth",
            }
        return out

    def tensors(self) -> tuple[tuple[str, tuple[int, int, int], torch.dtype], ...]:
        """``(key, per-row shape, dtype)`` of each tensor this camera puts in the obs dict."""
        out = ((self.key, self.shape, torch.uint8),)
        return (*out, (self.depth_key, self.depth_shape, torch.uint16)) if self.depth else out


@dataclass(frozen=True)
class EnvSpec:
    """Everything the collector may assume about a vectorized environment.

    ``state_keys`` (default: every observation key, in order) are concatenated into
    ``observation.state``; ``environment_state_keys`` (optional) into
    ``observation.environment_state``. Both flattened tensors are float32. ``cameras`` add image
    frames (and optional depth) to the obs dict under their own keys; they are never flattened
    into either vector. ``params`` carries task constants (speeds, tolerances) that planners read;
    they are not part of the layout hash.
    """

    task: str
    observation: tuple[ObservationKey, ...]
    action: ActionSpec
    step_dt: float
    max_episode_steps: int
    num_envs: int
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    task_description: str = ""
    control_hz: float | None = None
    state: StateSpec | None = None
    state_keys: tuple[str, ...] | None = None
    environment_state_keys: tuple[str, ...] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    cameras: tuple[CameraSpec, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", torch.device(self.device))
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "observation", tuple(self.observation))
        if not self.task:
            raise EnvSpecError("task name must be non-empty")
        if not self.observation:
            raise EnvSpecError(f"{self.task}: observation needs at least one key")
        keys = [k.name for k in self.observation]
        if len(set(keys)) != len(keys):
            raise EnvSpecError(f"{self.task}: duplicate observation keys {keys}")
        if not _is_number(self.step_dt) or not (math.isfinite(self.step_dt) and self.step_dt > 0):
            raise EnvSpecError(f"{self.task}: step_dt must be a positive number, got {self.step_dt!r}")
        hz = 1.0 / self.step_dt if self.control_hz is None else float(self.control_hz)
        if not math.isclose(hz * self.step_dt, 1.0, rel_tol=1e-6):
            raise EnvSpecError(f"{self.task}: control_hz={hz} disagrees with step_dt={self.step_dt}")
        object.__setattr__(self, "control_hz", hz)
        if not all(_is_integer(v) for v in (self.max_episode_steps, self.num_envs)):
            raise EnvSpecError(
                f"{self.task}: max_episode_steps and num_envs must be integers, "
                f"got {self.max_episode_steps!r} and {self.num_envs!r}"
            )
        if int(self.max_episode_steps) <= 0 or int(self.num_envs) <= 0:
            raise EnvSpecError(f"{self.task}: max_episode_steps and num_envs must be positive")
        state_keys = tuple(self.state_keys) if self.state_keys is not None else tuple(keys)
        env_keys = tuple(self.environment_state_keys) if self.environment_state_keys else None
        for group, what in ((state_keys, "state_keys"), (env_keys or (), "environment_state_keys")):
            unknown = [k for k in group if k not in keys]
            cams = {
                n for c in self.cameras if isinstance(c, CameraSpec) for n in (c.name, c.key, c.depth_key)
            }
            if any(k in cams for k in unknown):
                raise EnvSpecError(
                    f"{self.task}: {what} name cameras {[k for k in unknown if k in cams]}; camera frames "
                    "are their own features and never part of a state vector"
                )
            if unknown:
                raise EnvSpecError(f"{self.task}: {what} name unknown observation keys {unknown}")
        if not state_keys:
            raise EnvSpecError(f"{self.task}: state_keys must not be empty")
        object.__setattr__(self, "state_keys", state_keys)
        object.__setattr__(self, "environment_state_keys", env_keys)
        self._check_cameras()

    def _check_cameras(self) -> None:
        cameras = tuple(self.cameras)
        object.__setattr__(self, "cameras", cameras)
        bad = [c for c in cameras if not isinstance(c, CameraSpec)]
        if bad:
            raise EnvSpecError(f"{self.task}: cameras must be CameraSpec, got {type(bad[0]).__name__}")
        names = [c.name for c in cameras]
        if len(set(names)) != len(names):
            raise EnvSpecError(f"{self.task}: duplicate camera names {names}")
        reserved = [k.name for k in self.observation if k.name.startswith((IMAGES_PREFIX, DEPTH_PREFIX))]
        if reserved:
            raise EnvSpecError(
                f"{self.task}: observation keys {reserved} use a camera field name; declare cameras with "
                "EnvSpec(cameras=(CameraSpec(...),)) instead"
            )
        keys = set(self.observation_keys)
        clash = [n for n in names if n in keys]
        if clash:
            raise EnvSpecError(f"{self.task}: camera names {clash} are also observation keys")
        groups = (("state_keys", self.state_keys), ("environment_state_keys", self.environment_state_keys))
        for what, group in groups:
            images = [
                k
                for k in group or ()
                if (key := self.observation_keys[k]).dtype == "uint8" and len(key.shape) == 3
            ]
            if images:
                raise EnvSpecError(
                    f"{self.task}: {what} include image-like observation keys {images} ([H, W, C] uint8); "
                    "declare them as cameras (CameraSpec), which are never flattened into a state vector"
                )

    # -- observation layout -------------------------------------------------------------------

    @property
    def observation_keys(self) -> dict[str, ObservationKey]:
        """``name → ObservationKey`` in spec order."""
        return {k.name: k for k in self.observation}

    @property
    def camera_keys(self) -> tuple[str, ...]:
        """Obs-dict keys of every camera tensor, in camera order (each image key, then its depth key).

        >>> spec.camera_keys  # ('observation.images.top', 'observation.images.wrist')
        """
        return tuple(key for camera in self.cameras for key, _shape, _dtype in camera.tensors())

    @property
    def state_dim(self) -> int:
        """Width of ``observation.state``."""
        keys = self.observation_keys
        return sum(keys[k].size for k in self.state_keys)

    def _flat_names(self, group: Sequence[str]) -> list[str]:
        keys = self.observation_keys
        return [n for k in group for n in keys[k].element_names()]

    def flatten_observation(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Apply the flattening rule: ``{"observation.state": [n, D] float32, ...}``.

        >>> flat = spec.flatten_observation(env.reset()[0])
        >>> flat["observation.state"].shape  # (spec.num_envs, spec.state_dim)
        """
        keys = self.observation_keys

        def cat(group: Sequence[str]) -> torch.Tensor:
            parts = []
            for name in group:
                if name not in obs:
                    raise EnvContractError(f"{self.task}: observation is missing key {name!r}")
                tensor = obs[name]
                parts.append(tensor.reshape(tensor.shape[0], keys[name].size).to(torch.float32))
            return torch.cat(parts, dim=1)

        out = {STATE_KEY: cat(self.state_keys)}
        if self.environment_state_keys:
            out[ENVIRONMENT_STATE_KEY] = cat(self.environment_state_keys)
        for key in self.camera_keys:
            if key not in obs:
                raise EnvContractError(f"{self.task}: observation is missing camera key {key!r}")
            out[key] = obs[key]
        return out

    def features(self) -> dict[str, dict[str, Any]]:
        """Per-frame feature schema of the flattened observation, the cameras and the raw action.

        ``{"observation.state": {"dtype": "float32", "shape": (D,), "names": [...]}, "action": ...}``;
        each camera adds ``{"dtype": "uint8", "shape": (H, W, C), "names": ["height", "width",
        "channels"], "kind": "image"}`` under its key (and ``kind="depth"``, uint16 ``(H, W, 1)``).
        Only camera features carry ``kind``.
        """
        out: dict[str, dict[str, Any]] = {
            STATE_KEY: {
                "dtype": "float32",
                "shape": (self.state_dim,),
                "names": self._flat_names(self.state_keys),
            }
        }
        if self.environment_state_keys:
            names = self._flat_names(self.environment_state_keys)
            out[ENVIRONMENT_STATE_KEY] = {"dtype": "float32", "shape": (len(names),), "names": names}
        for camera in self.cameras:
            out.update(camera.features())
        out["action"] = {
            "dtype": "float32",
            "shape": (self.action.dim,),
            "names": self.action.element_names(),
        }
        return out

    def layout(self) -> dict[str, Any]:
        """JSON-able description of the observation/action layout (what ``layout_hash`` covers).

        ``cameras`` (name, shape, depth; not the description) is present only when the env has
        cameras, so the hash of a spec without cameras is what it was before cameras existed.
        """
        out: dict[str, Any] = {
            "observation": [
                {"name": k.name, "shape": list(k.shape), "dtype": k.dtype, "names": k.element_names()}
                for k in self.observation
            ],
            "state_keys": list(self.state_keys),
            "environment_state_keys": list(self.environment_state_keys or []),
            "action": {
                "dim": self.action.dim,
                "low": [float(np.float32(v)) for v in self.action.low],
                "high": [float(np.float32(v)) for v in self.action.high],
                "names": self.action.element_names(),
                "kind": self.action.kind,
                "normalized": self.action.normalized,
            },
        }
        if self.cameras:
            out["cameras"] = [
                {"name": c.name, "shape": list(c.shape), "dtype": "uint8", "depth": c.depth}
                for c in self.cameras
            ]
        return out

    def layout_hash(self) -> str:
        """Stable sha256 hex digest of :meth:`layout`; independent of num_envs, device and timing."""
        text = json.dumps(self.layout(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    # -- runtime checks -----------------------------------------------------------------------

    def validate_observation(self, obs: Mapping[str, torch.Tensor], *, require_finite: bool = True) -> None:
        """Raise :class:`EnvContractError` unless ``obs`` matches the spec exactly."""
        missing = [k.name for k in self.observation if k.name not in obs]
        if missing:
            raise EnvContractError(f"{self.task}: observation is missing keys {missing}")
        for key in self.observation:
            tensor = obs[key.name]
            expected = (self.num_envs, *key.shape)
            if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != expected:
                got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
                raise EnvContractError(f"{self.task}: observation {key.name!r} is {got}, expected {expected}")
            if tensor.dtype != torch_dtype(key.dtype):
                raise EnvContractError(
                    f"{self.task}: observation {key.name!r} has dtype {tensor.dtype}, expected {key.dtype}"
                )
            if not same_device(tensor.device, self.device):
                raise EnvContractError(
                    f"{self.task}: observation {key.name!r} is on {tensor.device}, expected {self.device}"
                )
            if require_finite and tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise EnvContractError(f"{self.task}: observation {key.name!r} has non-finite values")
        for camera in self.cameras:
            for name, shape, dtype in camera.tensors():
                self._check_camera_tensor(obs, name, (self.num_envs, *shape), dtype)

    def _check_camera_tensor(
        self, obs: Mapping[str, torch.Tensor], name: str, expected: tuple[int, ...], dtype: torch.dtype
    ) -> None:
        if name not in obs:
            raise EnvContractError(f"{self.task}: observation is missing camera key {name!r}")
        tensor = obs[name]
        if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != expected:
            got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise EnvContractError(f"{self.task}: camera {name!r} is {got}, expected {expected} (N, H, W, C)")
        if tensor.dtype != dtype:
            raise EnvContractError(f"{self.task}: camera {name!r} has dtype {tensor.dtype}, expected {dtype}")
        if not same_device(tensor.device, self.device):
            raise EnvContractError(
                f"{self.task}: camera {name!r} is on {tensor.device}, expected {self.device}"
            )

    def check_action(self, action: torch.Tensor) -> torch.Tensor:
        """Validate the shape/device of an action batch; return it as float32."""
        expected = (self.num_envs, self.action.dim)
        if not isinstance(action, torch.Tensor) or tuple(action.shape) != expected:
            got = tuple(action.shape) if isinstance(action, torch.Tensor) else type(action).__name__
            raise EnvContractError(f"{self.task}: action is {got}, expected {expected}")
        if not action.is_floating_point():
            raise EnvContractError(f"{self.task}: action dtype {action.dtype} is not floating point")
        if not same_device(action.device, self.device):
            raise EnvContractError(f"{self.task}: action is on {action.device}, expected {self.device}")
        return action.to(torch.float32)


def same_device(a: torch.device | str, b: torch.device | str) -> bool:
    """True when two devices are the same; ``cuda`` and ``cuda:<current>`` compare equal."""
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.index is None or b.index is None:
        current = torch.cuda.current_device() if a.type == "cuda" and torch.cuda.is_available() else 0
        return (a.index if a.index is not None else current) == (b.index if b.index is not None else current)
    return a.index == b.index
