"""`maniskill:<EnvId>`: any ManiSkill3 env as a `VecEnv` (GPU rows, or CPU rows in processes).

::

    env = make_env("maniskill:PickCube-v1", num_envs=4, seed=0)                 # CPU: 4 processes
    env = make_env("maniskill:PickCube-v1", num_envs=1024, device="cuda:0")      # one GPU scene
    env = make_env("maniskill:PickCube-v1", num_envs=2, obs_mode="rgb")          # + camera frames

Task kwargs: ``obs_mode`` (``state`` (default), ``rgb``, ``rgbd``), ``control_mode`` (default
``pd_ee_delta_pos``), ``sim_backend`` (``auto`` (default): ``physx_cuda`` on a CUDA device,
``physx_cpu`` otherwise), ``max_episode_steps`` (default: the id's registered limit, 50 for
PickCube), ``reward_mode`` and ``env_kwargs`` (passed to ``gym.make``).

- ``physx_cuda``: all ``num_envs`` rows live in one GPU scene on the env's device (taken from
  the ``device`` argument, e.g. ``cuda:1`` → ``physx_cuda:1``). ``physx_cpu``: ManiSkill holds
  one env per process, so one row runs here and several run one per worker process
  (:mod:`odsd.envs.maniskill_workers`); only live rows are stepped.
- The raw env, no auto-reset: the adapter strips ManiSkill's time limit and keeps its own
  per-row step counter; a finished row stays frozen (its terminal observation, reward 0, the same
  flags) until the collector resets it. ``terminated`` is ManiSkill's (success, or failure where
  a task defines one), ``info["success"]`` its ``success``.
- Observations: one key per entry of ManiSkill's ``state_dict`` observation in its order, so
  ``observation.state`` is ManiSkill's ``state`` vector (42 floats for PickCube) with element
  names (``qpos.panda_joint1``, ``tcp_pose.qw``, ...). ``rgb``/``rgbd`` add one camera per
  ManiSkill sensor (``observation.images.<sensor>``, ``observation.depth.<sensor>`` in mm).
- Seeds: a seeded reset seeds row ``i`` from ``(seed, i)``; an unseeded reset of a row draws the
  next seed of that row's stream, so rows never repeat each other's episodes. On CPU row ``i``
  of a partial reset equals row ``i`` of a full reset with the same seed; in one GPU scene a
  partial reset is reproducible for the same rows and seed, but draws its rows together.
- State (``--record-state``, ``odsd replay``): ManiSkill's ``get_state_dict()`` (one field per
  actor and articulation), the observation and the episode flags. Re-simulating from a restored
  state repeats the original steps to about 1e-5, not bit for bit: ``odsd store verify --replay``
  reports the deviation measured (docs/envs.md).
"""

from __future__ import annotations

import secrets
from typing import Any, Protocol

import torch

from odsd.envs.episode_flags import EpisodeFlagsMixin
from odsd.envs.errors import EnvContractError, EnvSpecError
from odsd.envs.maniskill_sim import OBS_MODES, SimLayout
from odsd.envs.protocol import Obs, StepResult, resolve_env_ids
from odsd.envs.rng import hash32, row_keys
from odsd.envs.spec import ActionSpec, CameraSpec, EnvSpec, ObservationKey, StateField, StateSpec

PREFIX = "maniskill:"
DEFAULT_CONTROL_MODE = "pd_ee_delta_pos"
_SEED_MASK = 0x7FFFFFFF


class Rows(Protocol):
    """What the adapter drives: :class:`~odsd.envs.maniskill_sim.ManiSkillSim` or the workers."""

    layout: SimLayout
    num_rows: int
    device: torch.device

    def reset(self, ids: torch.Tensor, seeds: list[int]) -> dict[str, torch.Tensor]: ...

    def step(
        self, ids: torch.Tensor, action: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor]: ...

    def get_state(self, ids: torch.Tensor) -> dict[str, torch.Tensor]: ...

    def set_state(self, state: dict[str, torch.Tensor], ids: torch.Tensor) -> None: ...

    def close(self) -> None: ...


def resolve_backend(sim_backend: str, device: torch.device) -> str:
    """``auto`` → ``physx_cuda[:index]`` on a CUDA device, else ``physx_cpu``; aliases normalized."""
    name = {"cpu": "physx_cpu", "gpu": "physx_cuda", "cuda": "physx_cuda"}.get(sim_backend, sim_backend)
    if name == "auto":
        name = "physx_cuda" if device.type == "cuda" else "physx_cpu"
    if name not in ("physx_cpu", "physx_cuda"):
        raise EnvSpecError(f"sim_backend must be auto, physx_cpu or physx_cuda, got {sim_backend!r}")
    if name == "physx_cuda":
        if not torch.cuda.is_available():
            raise EnvSpecError("sim_backend physx_cuda needs a CUDA device and none is here; use physx_cpu")
        if device.type == "cuda" and device.index is not None:
            name = f"physx_cuda:{device.index}"
    return name


class ManiSkillVecEnv(EpisodeFlagsMixin):
    """Adapter from ManiSkill3 to :class:`~odsd.envs.protocol.VecEnv` (see module docstring)."""

    resimulation_note = (
        "ManiSkill re-simulates a restored state approximately (PhysX keeps contact and solver "
        "caches outside get_state_dict()); deviations grow once contacts change, e.g. at a grasp"
    )
    """Why dynamic replay is not exact; ``odsd store verify --replay`` prints it (docs/envs.md)."""

    def __init__(
        self,
        rows: Rows,
        *,
        task: str,
        device: str | torch.device,
        seed: int | None,
        obs_mode: str,
        control_mode: str,
        sim_backend: str,
        max_episode_steps: int | None = None,
        success_reported: bool = True,
    ) -> None:
        self._rows = rows
        layout = rows.layout
        limit = max_episode_steps or layout.max_episode_steps
        if not limit:
            raise EnvSpecError(f"{task}: the env id registers no episode limit; pass max_episode_steps")
        keys = tuple(ObservationKey(o.name, o.shape, "float32", o.names) for o in layout.observation)
        cameras = tuple(CameraSpec(c.name, c.height, c.width, depth=c.depth) for c in layout.cameras)
        fields = [StateField(name, shape, "float32") for name, _path, shape in layout.state]
        fields += [StateField(f"obs.{k.name}", k.shape, "float32") for k in keys]
        fields += [
            StateField("episode_step", (), "int64"),
            StateField("terminated", (), "bool"),
            StateField("truncated", (), "bool"),
            StateField("success", (), "bool"),
        ]
        low, high = layout.action_low, layout.action_high
        self.spec = EnvSpec(
            task=task,
            task_description=layout.description,
            observation=keys,
            action=ActionSpec(
                dim=len(low),
                low=low,
                high=high,
                names=layout.action_names,
                kind=layout.action_kind,
                normalized=all(v == -1.0 for v in low) and all(v == 1.0 for v in high),
            ),
            step_dt=1.0 / layout.control_hz,
            control_hz=layout.control_hz,
            max_episode_steps=int(limit),
            num_envs=rows.num_rows,
            device=torch.device(device),
            state=StateSpec(tuple(fields)),
            cameras=cameras,
            params={"obs_mode": obs_mode, "control_mode": control_mode, "sim_backend": sim_backend},
        )
        self.success_signal = success_reported
        n, dev = rows.num_rows, self.spec.device
        self._obs: dict[str, torch.Tensor] = {
            k.name: torch.zeros((n, *k.shape), dtype=torch.float32, device=dev) for k in keys
        }
        self._camera_source: dict[str, str] = {}
        for cam in cameras:
            self._obs[cam.key] = torch.zeros((n, *cam.shape), dtype=torch.uint8, device=dev)
            self._camera_source[f"rgb.{cam.name}"] = cam.key
            if cam.depth:
                self._obs[cam.depth_key] = torch.zeros((n, *cam.depth_shape), dtype=torch.uint16, device=dev)
                self._camera_source[f"depth.{cam.name}"] = cam.depth_key
        self._init_episode_flags(n, dev)
        self._seed_keys = torch.zeros(n, dtype=torch.long)
        self._resets = torch.zeros(n, dtype=torch.long)
        self._seed_rows(torch.arange(n), secrets.randbits(31) if seed is None else int(seed))
        self._gripper = torch.zeros(n, dtype=torch.float32, device=dev)
        self._closed = False
        obs, _ = self.reset(seed=seed)
        self.spec.validate_observation(obs)

    # -- rows ----------------------------------------------------------------------------------

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the CPU worker processes (empty when the rows run in this process)."""
        return list(getattr(self._rows, "pids", []))

    def _seed_rows(self, ids: torch.Tensor, seed: int) -> None:
        self._seed_keys[ids] = row_keys(seed, ids)
        self._resets[ids] = -1

    def _episode_seeds(self, ids: torch.Tensor) -> list[int]:
        self._resets[ids] += 1
        mixed = hash32(self._seed_keys[ids] ^ hash32(self._resets[ids] + 0x1E3779B9))
        return [int(s) & _SEED_MASK for s in mixed.tolist()]

    def _write(self, ids: torch.Tensor, obs: dict[str, torch.Tensor]) -> None:
        dev = self.spec.device
        rows = ids.to(dev)
        for name, value in obs.items():
            key = self._camera_source.get(name, name)
            buffer, value = self._obs[key], value.to(dev, self._obs[key].dtype)
            if buffer.dtype == torch.uint16:  # torch has no uint16 index_put: write its int16 view
                buffer, value = buffer.view(torch.int16), value.view(torch.int16)
            buffer[rows] = value

    def _observe(self) -> Obs:
        return {k: v.clone() for k, v in self._obs.items()}

    # -- VecEnv --------------------------------------------------------------------------------

    def reset(
        self, env_ids: torch.Tensor | None = None, seed: int | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Reset rows (all when ``None``); with ``seed`` row ``i`` is seeded from ``(seed, i)``."""
        ids = resolve_env_ids(env_ids, self.spec.num_envs, self.spec.device)
        cpu_ids = ids.cpu()
        if seed is not None:
            self._seed_rows(cpu_ids, int(seed))
        if cpu_ids.numel():
            self._write(
                cpu_ids, self._rows.reset(cpu_ids.to(self._rows.device), self._episode_seeds(cpu_ids))
            )
            self._gripper[ids] = 0.0
        return self._reset_result(ids)

    def step(self, action: torch.Tensor) -> StepResult:
        """Step live rows; finished rows stay frozen (reward 0) until reset."""
        action = self.spec.check_action(action)
        if not bool(torch.isfinite(action).all()):
            raise EnvContractError(f"{self.spec.task}: non-finite action")
        action = self.spec.action.clip(action)
        dev, n = self.spec.device, self.spec.num_envs
        live = ~(self._terminated | self._truncated)
        ids = live.nonzero().flatten()
        reward = torch.zeros(n, dtype=torch.float32, device=dev)
        term = torch.zeros(n, dtype=torch.bool, device=dev)
        if ids.numel():
            obs, r, te, ok = self._rows.step(ids.to(self._rows.device), action[ids].to(self._rows.device))
            self._write(ids.cpu(), obs)
            reward[ids], term[ids] = r.to(dev), te.to(dev)
            self._success[ids] = ok.to(dev)
            if self.spec.action.kind == "ee_delta_pos+gripper":
                self._gripper[ids] = action[ids, -1]
        self._steps += live.long()
        term &= live
        trunc = live & ~term & (self._steps >= self.spec.max_episode_steps)
        self._terminated |= term
        self._truncated |= trunc
        return self._observe(), reward, self._terminated.clone(), self._truncated.clone(), self._info()

    def safe_hold_action(self, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """No arm motion; with ``pd_ee_delta_pos`` the gripper keeps its last command (no drop)."""
        ids = resolve_env_ids(env_ids, self.spec.num_envs, self.spec.device)
        hold = torch.zeros(ids.numel(), self.spec.action.dim, dtype=torch.float32, device=self.spec.device)
        if self.spec.action.kind == "ee_delta_pos+gripper":
            hold[:, -1] = self._gripper[ids]
        return self.spec.action.clip(hold)

    # -- state ---------------------------------------------------------------------------------

    def get_state(self, env_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Simulator state (``sim.*``), observation (``obs.*``) and episode flags of ``env_ids``."""
        ids = resolve_env_ids(env_ids, self.spec.num_envs, self.spec.device)
        dev = self.spec.device
        out = {k: v.to(dev) for k, v in self._rows.get_state(ids.to(self._rows.device)).items()}
        out.update({f"obs.{k.name}": self._obs[k.name][ids].clone() for k in self.spec.observation})
        out.update(
            episode_step=self._steps[ids].clone(),
            terminated=self._terminated[ids].clone(),
            truncated=self._truncated[ids].clone(),
            success=self._success[ids].clone(),
        )
        return out

    def set_state(self, state: dict[str, torch.Tensor], env_ids: torch.Tensor | None = None) -> Obs:
        """Restore rows from :meth:`get_state` output; returns the full-batch observation.

        The observation comes from the state (ManiSkill recomputes contact-derived entries such
        as ``is_grasped`` only when it steps); camera frames keep what the rows showed last.
        """
        assert self.spec.state is not None
        ids = resolve_env_ids(env_ids, self.spec.num_envs, self.spec.device)
        missing = [f.name for f in self.spec.state.fields if f.name not in state]
        if missing:
            raise EnvContractError(f"{self.spec.task}: set_state is missing fields {missing}")
        sim = {f.name: state[f.name] for f in self.spec.state.fields if f.name.startswith("sim.")}
        self._rows.set_state({k: v.to(self._rows.device) for k, v in sim.items()}, ids.to(self._rows.device))
        dev = self.spec.device
        for key in self.spec.observation:
            self._obs[key.name][ids] = state[f"obs.{key.name}"].to(dev, torch.float32)
        self._steps[ids] = state["episode_step"].to(dev, torch.long)
        self._terminated[ids] = state["terminated"].to(dev, torch.bool)
        self._truncated[ids] = state["truncated"].to(dev, torch.bool)
        self._success[ids] = state["success"].to(dev, torch.bool)
        return self._observe()

    def close(self) -> None:
        """Close the ManiSkill env (and stop the worker processes); idempotent."""
        if not self._closed:
            self._closed = True
            self._rows.close()


def make_maniskill_env(
    env_id: str,
    *,
    num_envs: int,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    obs_mode: str = "state",
    control_mode: str = DEFAULT_CONTROL_MODE,
    sim_backend: str = "auto",
    max_episode_steps: int | None = None,
    reward_mode: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> ManiSkillVecEnv:
    """Factory behind ``make_env("maniskill:<EnvId>", ...)`` (task kwargs: see module docstring)."""
    if obs_mode not in OBS_MODES:
        raise EnvSpecError(f"{PREFIX}{env_id}: obs_mode must be one of {OBS_MODES}, got {obs_mode!r}")
    if max_episode_steps is not None and int(max_episode_steps) <= 0:
        raise EnvSpecError(f"{PREFIX}{env_id}: max_episode_steps must be positive, got {max_episode_steps}")
    device = torch.device(device)
    backend = resolve_backend(sim_backend, device)
    sim_kwargs: dict[str, Any] = {
        "obs_mode": obs_mode,
        "control_mode": control_mode,
        "sim_backend": backend,
        "reward_mode": reward_mode,
        "env_kwargs": dict(env_kwargs or {}),
    }
    rows: Rows
    if backend == "physx_cpu" and num_envs > 1:
        from odsd.envs.maniskill_workers import ManiSkillWorkers

        rows = ManiSkillWorkers(env_id, num_rows=num_envs, sim_kwargs=sim_kwargs)
        success = rows.success_reported
    else:
        from odsd.envs.maniskill_sim import ManiSkillSim

        rows = ManiSkillSim(env_id, num_rows=num_envs, **sim_kwargs)
        success = rows.has_success()
    try:
        return ManiSkillVecEnv(
            rows,
            task=f"{PREFIX}{env_id}",
            device=device,
            seed=seed,
            obs_mode=obs_mode,
            control_mode=control_mode,
            sim_backend=backend,
            max_episode_steps=max_episode_steps,
            success_reported=success,
        )
    except BaseException:
        rows.close()
        raise
