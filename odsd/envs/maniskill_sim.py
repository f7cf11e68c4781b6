"""One ManiSkill3 env in this process, driven row by row (`ManiSkillSim`).

The ``maniskill:<EnvId>`` adapter uses it directly (``physx_cuda``: all rows in one GPU scene;
``physx_cpu`` with one row) and inside each CPU worker process (one row each). It knows nothing of
episodes: it resets, steps, reads and writes the simulator for the rows it is given, on the
simulation device::

    sim = ManiSkillSim("PickCube-v1", num_rows=1, obs_mode="state", control_mode="pd_ee_delta_pos",
                       sim_backend="physx_cpu")
    sim.layout.observation            # (ObsLeaf("qpos", (9,), ("qpos.panda_joint1", ...)), ...)
    obs = sim.reset(torch.tensor([0]), [1234])          # {"qpos": [1, 9] float32, ...}
    obs, reward, terminated, success = sim.step(torch.tensor([0]), torch.zeros(1, 4))
    state = sim.get_state(torch.tensor([0]))            # {"sim.actors.cube": [1, 13], ...}

Observations come from ManiSkill's ``state_dict`` (the ``state`` vector unflattened, in the same
order, so ``observation.state`` equals ManiSkill's ``state`` observation) or, for ``rgb``/``rgbd``,
from the agent/extra entries plus one camera per sensor. The simulator state is ManiSkill's
``get_state_dict()`` with each leaf as one field (``sim.actors.<name>``, ``sim.articulations.<name>``).
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from odsd.envs.errors import EnvSpecError, ManiSkillUnavailableError

OBS_MODES = ("state", "state_dict", "rgb", "rgbd")
"""ManiSkill observation modes the adapter maps (``state_dict`` is the same as ``state``)."""
_POSE = ("x", "y", "z", "qw", "qx", "qy", "qz")
_XYZ = ("x", "y", "z")
_FIELD = re.compile(r"[^A-Za-z0-9._-]")
_VULKAN_HINTS = ("rendering device", "physical device", "IncompatibleDriver", "vk::", "Vulkan")


@dataclass(frozen=True)
class ObsLeaf:
    """One flat observation entry: ``path`` in ManiSkill's dict, key ``name``, per-row ``shape``."""

    name: str
    path: tuple[str, ...]
    shape: tuple[int, ...]
    names: tuple[str, ...] | None


@dataclass(frozen=True)
class CameraLeaf:
    """One ManiSkill sensor camera: ``rgb`` at ``sensor_data.<name>.rgb`` (and ``depth``)."""

    name: str
    height: int
    width: int
    depth: bool


@dataclass(frozen=True)
class SimLayout:
    """What the adapter's ``EnvSpec`` is built from (picklable: sent by worker processes)."""

    env_id: str
    description: str
    observation: tuple[ObsLeaf, ...]
    cameras: tuple[CameraLeaf, ...]
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    action_names: tuple[str, ...] | None
    action_kind: str
    control_hz: float
    max_episode_steps: int | None
    state: tuple[tuple[str, tuple[str, ...], tuple[int, ...]], ...]
    """``(field name, path in get_state_dict(), per-row shape)`` of every simulator state leaf."""


def import_maniskill() -> Any:
    """``gymnasium`` with ManiSkill's envs registered, or a one-line error naming the extra."""
    # SAPIEN warns when it uses its own Vulkan loader (the usual case): not the user's concern
    warnings.filterwarnings("ignore", message="Failed to find system libvulkan")
    try:
        import gymnasium as gym
        import mani_skill.envs  # noqa: F401 - registers the env ids
    except ImportError as exc:
        raise EnvSpecError(f"ManiSkill is not installed ({exc}); install odsd[maniskill]") from None
    return gym


def vulkan_error(exc: BaseException) -> ManiSkillUnavailableError | None:
    """The one-line error for SAPIEN finding no usable Vulkan device, when ``exc`` is that."""
    text = str(exc)
    if isinstance(exc, RuntimeError) and any(h in text for h in _VULKAN_HINTS):
        return ManiSkillUnavailableError(
            f"ManiSkill (SAPIEN) found no usable Vulkan device ({text.splitlines()[0][:120]}); on a "
            "CPU-only Debian 12 machine run `export VK_ICD_FILENAMES=$(tools/vulkan-cpu)` (Mesa >= 24.3 "
            "lavapipe, docs/envs.md)"
        )
    return None


def _registered_limit(env_id: str, wrapped: Any) -> int | None:
    """The episode limit ManiSkill registered for ``env_id`` (its time-limit wrapper holds it)."""
    env = wrapped
    while env is not None:
        limit = getattr(env, "_max_episode_steps", None)
        if isinstance(limit, int) and limit > 0:
            return limit
        env = getattr(env, "env", None)
    from mani_skill.utils.registration import REGISTERED_ENVS

    spec = REGISTERED_ENVS.get(env_id)
    return getattr(spec, "max_episode_steps", None)


def _leaves(tree: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out: list[tuple[tuple[str, ...], Any]] = []
    for key, value in tree.items():
        if isinstance(value, dict):
            out.extend(_leaves(value, (*prefix, str(key))))
        else:
            out.append(((*prefix, str(key)), value))
    return out


def _get(tree: dict[str, Any], path: tuple[str, ...]) -> Any:
    for part in path:
        tree = tree[part]
    return tree


def _element_names(leaf: str, size: int, joints: list[str]) -> tuple[str, ...] | None:
    if leaf in ("qpos", "qvel") and size == len(joints):
        return tuple(f"{leaf}.{j}" for j in joints)
    if leaf.endswith("pose") and size == len(_POSE):
        return tuple(f"{leaf}.{c}" for c in _POSE)
    if leaf.endswith("pos") and size == len(_XYZ):
        return tuple(f"{leaf}.{c}" for c in _XYZ)
    return (leaf,) if size == 1 else None


def _action_layout(control_mode: str, controller: Any, dim: int) -> tuple[tuple[str, ...] | None, str]:
    if control_mode == "pd_ee_delta_pos" and dim == 4:
        return ("ee_delta_pos.x", "ee_delta_pos.y", "ee_delta_pos.z", "gripper"), "ee_delta_pos+gripper"
    parts = getattr(controller, "controllers", None)
    if isinstance(parts, dict):
        names = [f"{name}.{i}" for name, sub in parts.items() for i in range(int(sub.action_space.shape[0]))]
        if len(names) == dim:
            return tuple(names), control_mode
    return None, control_mode


class ManiSkillSim:
    """A ManiSkill env with ``num_rows`` rows in this process (see module docstring)."""

    def __init__(
        self,
        env_id: str,
        *,
        num_rows: int,
        obs_mode: str,
        control_mode: str | None,
        sim_backend: str,
        reward_mode: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if obs_mode not in OBS_MODES:
            raise EnvSpecError(f"maniskill:{env_id}: obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
        gym = import_maniskill()
        self._cameras_on = obs_mode in ("rgb", "rgbd")
        kwargs: dict[str, Any] = {
            "num_envs": int(num_rows),
            "obs_mode": "state_dict" if obs_mode == "state" else obs_mode,
            "sim_backend": sim_backend,
            **({"control_mode": control_mode} if control_mode else {}),
            **({"reward_mode": reward_mode} if reward_mode else {}),
            **(env_kwargs or {}),
        }
        if not sim_backend.startswith("physx_cuda"):
            kwargs.setdefault("render_backend", "gpu" if torch.cuda.is_available() else "cpu")
        try:
            # ManiSkill prints its fallback notices to stdout; keep the CLI's output clean
            with contextlib.redirect_stdout(io.StringIO()):
                wrapped = gym.make(env_id, **kwargs)
        except gym.error.Error as exc:
            raise EnvSpecError(f"maniskill:{env_id}: {exc}") from None
        except (AssertionError, ValueError, KeyError, TypeError) as exc:
            raise EnvSpecError(f"maniskill:{env_id}: cannot make it with {kwargs}: {exc}") from None
        except RuntimeError as exc:
            raise (vulkan_error(exc) or exc) from None
        self.env = wrapped.unwrapped
        self.num_rows = int(num_rows)
        self.device = torch.device(self.env.device)
        limit = _registered_limit(env_id, wrapped)
        obs, _ = self.env.reset(seed=0)
        self.layout = self._describe(env_id, obs, control_mode or self.env.control_mode, limit)

    # -- layout --------------------------------------------------------------------------------

    def _describe(self, env_id: str, obs: dict[str, Any], control_mode: str, limit: int | None) -> SimLayout:
        joints = [j.name for j in self.env.agent.robot.get_active_joints()]
        entries = [(p, v) for p, v in _leaves(obs) if p[0] not in ("sensor_data", "sensor_param")]
        counts: dict[str, int] = {}
        for path, _ in entries:
            counts[path[-1]] = counts.get(path[-1], 0) + 1
        keys = []
        for path, value in entries:
            name = path[-1] if counts[path[-1]] == 1 else ".".join(path)
            shape = tuple(value.shape[1:]) or (1,)
            keys.append(ObsLeaf(name, path, shape, _element_names(name, int(np.prod(shape)), joints)))
        cameras = []
        if self._cameras_on:
            for name, data in obs.get("sensor_data", {}).items():
                rgb = data.get("rgb")
                if rgb is not None:
                    h, w = int(rgb.shape[1]), int(rgb.shape[2])
                    cameras.append(CameraLeaf(_FIELD.sub("_", name).lower(), h, w, "depth" in data))
        space = self.env.single_action_space
        if len(space.shape) != 1:
            raise EnvSpecError(f"maniskill:{env_id}: action space {space} is not a flat Box")
        names, kind = _action_layout(control_mode, self.env.agent.controller, int(space.shape[0]))
        state = tuple(
            ("sim." + _FIELD.sub("_", ".".join(path)), path, tuple(value.shape[1:]) or (1,))
            for path, value in _leaves(self.env.get_state_dict())
        )
        doc = (type(self.env).__doc__ or "").strip().splitlines()
        description = next((line for line in doc if line and not line.startswith("**")), "")
        return SimLayout(
            env_id=env_id,
            description=f"ManiSkill3 {env_id}" + (f": {description[:160]}" if description else ""),
            observation=tuple(keys),
            cameras=tuple(cameras),
            action_low=tuple(float(v) for v in space.low),
            action_high=tuple(float(v) for v in space.high),
            action_names=names,
            action_kind=kind,
            control_hz=float(self.env.control_freq),
            max_episode_steps=int(limit) if limit else None,
            state=state,
        )

    # -- rows ----------------------------------------------------------------------------------

    def _ids(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(ids, dtype=torch.long).to(self.device)

    def _rows(self, obs: dict[str, Any], ids: torch.Tensor) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for leaf in self.layout.observation:
            value = torch.as_tensor(_get(obs, leaf.path))[ids]
            out[leaf.name] = value.reshape(value.shape[0], *leaf.shape).to(torch.float32)
        for cam in self.layout.cameras:
            data = obs["sensor_data"][cam_source(obs, cam)]
            out[f"rgb.{cam.name}"] = torch.as_tensor(data["rgb"])[ids].to(torch.uint8)
            if cam.depth:
                depth = torch.as_tensor(data["depth"])[ids].to(torch.int32).clamp(0, 65535)
                out[f"depth.{cam.name}"] = depth.to(torch.uint16)
        return out

    def reset(self, ids: torch.Tensor, seeds: list[int]) -> dict[str, torch.Tensor]:
        """Reset rows ``ids`` (``seeds[0]`` seeds them; one row: its own seed); their observations."""
        rows = self._ids(ids)
        options = {} if rows.numel() == self.num_rows else {"env_idx": rows}
        obs, _ = self.env.reset(seed=int(seeds[0]), options=options)
        return self._rows(obs, rows)

    def step(
        self, ids: torch.Tensor, action: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]:
        """Step every row (rows not in ``ids`` get a zero action); results of rows ``ids``."""
        rows = self._ids(ids)
        full = torch.zeros((self.num_rows, action.shape[1]), dtype=torch.float32, device=self.device)
        full[rows] = action.to(self.device, torch.float32)
        obs, reward, terminated, _, info = self.env.step(full)
        n = self.num_rows
        success = info.get("success", torch.zeros(n, dtype=torch.bool, device=self.device))
        return (
            self._rows(obs, rows),
            torch.as_tensor(reward).reshape(n)[rows].to(torch.float32),
            torch.as_tensor(terminated).reshape(n)[rows].to(torch.bool),
            torch.as_tensor(success).reshape(n)[rows].to(torch.bool),
        )

    def has_success(self) -> bool:
        """Whether the env's ``evaluate()`` reports ``success``."""
        return "success" in self.env.get_info()

    def get_state(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """``get_state_dict()`` of rows ``ids``, one field per leaf."""
        rows = self._ids(ids)
        tree = self.env.get_state_dict()
        return {name: torch.as_tensor(_get(tree, path))[rows].clone() for name, path, _ in self.layout.state}

    def set_state(self, state: dict[str, torch.Tensor], ids: torch.Tensor) -> None:
        """Restore rows ``ids`` from :meth:`get_state` output."""
        rows = self._ids(ids)
        tree: dict[str, Any] = {}
        for name, path, _ in self.layout.state:
            node = tree
            for part in path[:-1]:
                node = node.setdefault(part, {})
            node[path[-1]] = torch.as_tensor(state[name]).to(self.device, torch.float32)
        every = torch.equal(rows, torch.arange(self.num_rows, device=self.device))
        self.env.set_state_dict(tree, None if every else rows)

    def close(self) -> None:
        """Close the ManiSkill env."""
        self.env.close()


def cam_source(obs: dict[str, Any], cam: CameraLeaf) -> str:
    """The ``sensor_data`` key of ``cam`` (its name before it was made a plain field name)."""
    for name in obs["sensor_data"]:
        if _FIELD.sub("_", name).lower() == cam.name:
            return str(name)
    raise KeyError(cam.name)
