"""`gymnasium:<id>`: any Gymnasium env (single envs, one per row, or a vector env) as a `VecEnv`.

::

    env = make_env("gymnasium:FetchPickAndPlace-v4", num_envs=4, seed=0)
    env = GymnasiumVecEnv.from_vector_env(gym.make_vec("Pendulum-v1", 8,
              vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED}))

By default the adapter builds one ``gym.make(id)`` env per row itself, so a per-row reset is
exact and nothing resets behind the collector's back (Gymnasium vector envs auto-reset unless
built with ``AutoresetMode.DISABLED``, which :meth:`GymnasiumVecEnv.from_vector_env` requires).

- Dict observations become one observation key per entry (float32, in the space's order), Box
  observations a single ``"observation"`` key; goal envs put ``achieved_goal``/``desired_goal``
  into ``observation.environment_state``.
- Truncation comes from the adapter's own per-row step counter (``TimeLimit`` is stripped).
- ``info["success"]`` is ``info["is_success"]`` (or ``info["success"]``) of each row; an env
  whose ``info`` has neither reports ``False`` and says so in :attr:`GymnasiumVecEnv.success_signal`
  (Pendulum, for one: wrap it to define success, see ``examples/pendulum``).
- MuJoCo envs (per-row backend) support ``get_state``/``set_state`` through ``mj_getState``
  (``mjSTATE_INTEGRATION``), the body poses of the last forward pass, the env's ``goal`` and the
  cached observation; stepping after ``set_state`` reproduces the original step exactly. The
  envs' own random generators are not part of the state (Fetch only draws them on reset).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from odsd.envs.episode_flags import EpisodeFlagsMixin
from odsd.envs.errors import EnvContractError, EnvSpecError
from odsd.envs.protocol import Obs, StepResult, resolve_env_ids
from odsd.envs.rng import row_keys
from odsd.envs.spec import ActionSpec, EnvSpec, ObservationKey, StateField, StateSpec

FETCH_OBSERVATION_NAMES = (
    *("grip_pos.x", "grip_pos.y", "grip_pos.z"),
    *("object_pos.x", "object_pos.y", "object_pos.z"),
    *("object_rel_pos.x", "object_rel_pos.y", "object_rel_pos.z"),
    *("gripper_state.right", "gripper_state.left"),
    *("object_rot.x", "object_rot.y", "object_rot.z"),
    *("object_velp.x", "object_velp.y", "object_velp.z"),
    *("object_velr.x", "object_velr.y", "object_velr.z"),
    *("grip_velp.x", "grip_velp.y", "grip_velp.z"),
    *("gripper_vel.right", "gripper_vel.left"),
)
FETCH_ACTION_NAMES = ("grip_delta.x", "grip_delta.y", "grip_delta.z", "gripper.cmd")


def _gym() -> Any:
    try:
        import gymnasium as gym
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise EnvSpecError("gymnasium is not installed; install odsd[gym]") from exc
    try:
        import gymnasium_robotics

        gym.register_envs(gymnasium_robotics)
    except ImportError:
        pass
    return gym


def _observation_keys(space: Any, env_id: str) -> tuple[tuple[ObservationKey, ...], bool]:
    gym = _gym()
    entries = list(space.spaces.items()) if isinstance(space, gym.spaces.Dict) else [("observation", space)]
    keys = []
    for name, sub in entries:
        if not isinstance(sub, gym.spaces.Box):
            raise EnvSpecError(
                f"{env_id}: observation {name!r} is {type(sub).__name__}; only Box is supported"
            )
        names = None
        if (
            env_id.startswith("Fetch")
            and name == "observation"
            and sub.shape == (len(FETCH_OBSERVATION_NAMES),)
        ):
            names = FETCH_OBSERVATION_NAMES
        keys.append(ObservationKey(name, tuple(sub.shape) or (1,), "float32", names))
    return tuple(keys), isinstance(space, gym.spaces.Dict)


def _action_spec(space: Any, env_id: str) -> ActionSpec:
    gym = _gym()
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise EnvSpecError(
            f"{env_id}: action space {space} is not a flat Box; only continuous actions are supported"
        )
    low, high = np.asarray(space.low, dtype=np.float64), np.asarray(space.high, dtype=np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise EnvSpecError(f"{env_id}: action bounds must be finite, got low={low} high={high}")
    fetch = env_id.startswith("Fetch") and space.shape == (4,)
    return ActionSpec(
        dim=space.shape[0],
        low=tuple(low),
        high=tuple(high),
        names=FETCH_ACTION_NAMES if fetch else None,
        kind="ee_delta_pos+gripper" if fetch else "box",
        normalized=bool((low == -1).all() and (high == 1).all()),
    )


def _strip_time_limit(env: Any) -> tuple[Any, int | None]:
    gym = _gym()
    limit = getattr(getattr(env, "spec", None), "max_episode_steps", None)
    if isinstance(env, gym.wrappers.TimeLimit):
        return env.env, limit
    return env, limit


def _mujoco_handles(env: Any) -> tuple[Any, Any] | None:
    unwrapped = env.unwrapped
    model, data = getattr(unwrapped, "model", None), getattr(unwrapped, "data", None)
    try:
        import mujoco
    except ImportError:
        return None
    if isinstance(model, mujoco.MjModel) and isinstance(data, mujoco.MjData):
        return model, data
    return None


class GymnasiumVecEnv(EpisodeFlagsMixin):
    """Adapter from Gymnasium to :class:`~odsd.envs.protocol.VecEnv` (see module docstring)."""

    def __init__(
        self,
        envs: Sequence[Any] | None = None,
        *,
        vector_env: Any = None,
        task: str,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        max_episode_steps: int | None = None,
        task_description: str = "",
    ) -> None:
        if (envs is None) == (vector_env is None):
            raise EnvSpecError("give either per-row envs or one vector_env")
        self._envs: list[Any] = []
        self._vec = vector_env
        limit = None
        if envs is not None:
            for env in envs:
                stripped, limit = _strip_time_limit(env)
                self._envs.append(stripped)
            first = self._envs[0]
            obs_space, act_space, num_envs = first.observation_space, first.action_space, len(self._envs)
        else:
            self._check_autoreset(vector_env)
            obs_space, act_space = vector_env.single_observation_space, vector_env.single_action_space
            num_envs = vector_env.num_envs
            limit = getattr(getattr(vector_env, "spec", None), "max_episode_steps", None)
        self._env_id = task.removeprefix("gymnasium:")
        max_steps = max_episode_steps or limit
        if not max_steps:
            raise EnvSpecError(f"{task}: the env has no TimeLimit; pass max_episode_steps")
        keys, is_dict = _observation_keys(obs_space, self._env_id)
        self._is_dict = is_dict
        names = [k.name for k in keys]
        goal_keys = tuple(k for k in ("achieved_goal", "desired_goal") if k in names) or None
        sub_envs = self._envs or list(getattr(vector_env, "envs", []))
        base = sub_envs[0].unwrapped if sub_envs else None
        dt = getattr(base, "dt", None)
        if not isinstance(dt, int | float) or dt <= 0:
            fps = (sub_envs[0] if sub_envs else vector_env).metadata.get("render_fps")
            dt = 1.0 / float(fps) if isinstance(fps, int | float) and fps > 0 else 1.0
        self._mujoco = [_mujoco_handles(e) for e in self._envs] if self._envs else []
        state_spec = None
        if self._mujoco and all(h is not None for h in self._mujoco):
            import mujoco

            size = mujoco.mj_stateSize(self._mujoco[0][0], mujoco.mjtState.mjSTATE_INTEGRATION)
            nbody = self._mujoco[0][0].nbody
            fields = [StateField("sim", (size,), "float64"), StateField("body_pose", (nbody * 7,), "float64")]
            goal_key = next((k for k in keys if k.name == "desired_goal"), None)
            if goal_key is not None and isinstance(getattr(base, "goal", None), np.ndarray):
                fields.append(StateField("goal", goal_key.shape, "float64"))
            fields += [StateField(f"obs.{k.name}", k.shape, "float32") for k in keys]
            fields += [
                StateField("episode_step", (), "int64"),
                StateField("terminated", (), "bool"),
                StateField("truncated", (), "bool"),
                StateField("success", (), "bool"),
            ]
            state_spec = StateSpec(tuple(fields))
        self.spec = EnvSpec(
            task=task,
            task_description=task_description or f"gymnasium {self._env_id}",
            observation=keys,
            action=_action_spec(act_space, self._env_id),
            step_dt=dt,
            max_episode_steps=int(max_steps),
            num_envs=num_envs,
            device=torch.device(device),
            state=state_spec,
            environment_state_keys=goal_keys,
        )
        n, dev = num_envs, self.spec.device
        self._obs = {k.name: torch.zeros((n, *k.shape), dtype=torch.float32, device=dev) for k in keys}
        self._init_episode_flags(n, dev)
        self._act_dtype = act_space.dtype
        self._success_seen: bool | None = None
        obs, _ = self.reset(seed=seed)
        self.spec.validate_observation(obs)

    @classmethod
    def from_id(
        cls,
        env_id: str,
        *,
        num_envs: int,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        **kwargs: Any,
    ) -> GymnasiumVecEnv:
        """One ``gym.make(env_id, **kwargs)`` per row."""
        gym = _gym()
        max_steps = kwargs.pop("max_episode_steps", None)
        try:
            envs = [gym.make(env_id, **kwargs) for _ in range(num_envs)]
        except gym.error.Error as exc:
            raise EnvSpecError(f"gymnasium cannot make {env_id!r}: {exc}") from exc
        return cls(envs, task=f"gymnasium:{env_id}", device=device, seed=seed, max_episode_steps=max_steps)

    @classmethod
    def from_vector_env(
        cls, vector_env: Any, *, task: str | None = None, device: str | torch.device = "cpu", **kwargs: Any
    ) -> GymnasiumVecEnv:
        """Wrap a Gymnasium ``VectorEnv`` built with ``autoreset_mode=AutoresetMode.DISABLED``."""
        spec = getattr(vector_env, "spec", None)
        name = task or f"gymnasium:{getattr(spec, 'id', 'vector')}"
        return cls(vector_env=vector_env, task=name, device=device, **kwargs)

    @staticmethod
    def _check_autoreset(vector_env: Any) -> None:
        gym = _gym()
        mode = vector_env.metadata.get("autoreset_mode")
        if mode != gym.vector.AutoresetMode.DISABLED:
            raise EnvSpecError(
                f"vector env auto-resets ({mode}); build it with autoreset_mode=AutoresetMode.DISABLED"
            )

    # -- conversions ---------------------------------------------------------------------------

    def _row_obs(self, raw: Any) -> dict[str, np.ndarray]:
        return dict(raw) if self._is_dict else {"observation": raw}

    def _write_obs(self, i: int, parts: dict[str, Any]) -> None:
        for name, value in parts.items():
            self._obs[name][i] = torch.as_tensor(
                np.asarray(value, dtype=np.float32).reshape(self._obs[name].shape[1:])
            )

    def _observe(self) -> Obs:
        return {k: v.clone() for k, v in self._obs.items()}

    def _success_of(self, info: dict[str, Any]) -> bool:
        flag = info.get("is_success", info.get("success"))
        self._success_seen = bool(self._success_seen) or flag is not None
        return bool(flag) if flag is not None else False

    @property
    def success_signal(self) -> bool | None:
        """Whether the env reports success: True once a step's ``info`` had ``is_success`` (or
        ``success``), False when none of the steps so far had it, None before the first step."""
        return self._success_seen

    def _row_seeds(self, ids: torch.Tensor, seed: int | None) -> list[int | None]:
        if seed is None:
            return [None] * ids.numel()
        return [int(k) for k in row_keys(seed, ids.cpu()).tolist()]

    # -- VecEnv --------------------------------------------------------------------------------

    def reset(
        self, env_ids: torch.Tensor | None = None, seed: int | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        """Reset rows; with ``seed`` row ``i`` is seeded from ``(seed, i)``. Returns the full batch."""
        ids = resolve_env_ids(env_ids, self.spec.num_envs, self.spec.device)
        seeds = self._row_seeds(ids, seed)
        if self._vec is not None:
            mask = np.zeros(self.spec.num_envs, dtype=bool)
            mask[ids.cpu().numpy()] = True
            vec_seed = [None] * self.spec.num_envs
            for i, s in zip(ids.tolist(), seeds, strict=True):
                vec_seed[i] = s
            raw, _ = self._vec.reset(
                seed=vec_seed if seed is not None else None, options={"reset_mask": mask}
            )
            for i in ids.tolist():
                self._write_obs(i, {k: v[i] for k, v in self._row_obs(raw).items()})
        else:
            for i, s in zip(ids.tolist(), seeds, strict=True):
                raw, _ = self._envs[i].reset(seed=s)
                self._write_obs(i, self._row_obs(raw))
        return self._reset_result(ids)

    def step(self, action: torch.Tensor) -> StepResult:
        """Step live rows; finished rows stay frozen (reward 0) until reset."""
        action = self.spec.check_action(action)
        if not bool(torch.isfinite(action).all()):
            raise EnvContractError(f"{self.spec.task}: non-finite action")
        action = self.spec.action.clip(action).cpu().numpy().astype(self._act_dtype)
        n = self.spec.num_envs
        live = (~(self._terminated | self._truncated)).cpu().numpy()
        reward = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        success = self._success.cpu().numpy().copy()
        if self._vec is not None:
            raw, r, te, _, infos = self._vec.step(action)
            for i in np.nonzero(live)[0]:
                self._write_obs(int(i), {k: v[i] for k, v in self._row_obs(raw).items()})
                reward[i], terminated[i] = r[i], te[i]
                flag = infos.get("is_success", infos.get("success"))
                self._success_seen = bool(self._success_seen) or flag is not None
                success[i] = bool(flag[i]) if flag is not None else False
        else:
            for i in np.nonzero(live)[0]:
                raw, r, te, _, info = self._envs[i].step(action[i])
                self._write_obs(int(i), self._row_obs(raw))
                reward[i], terminated[i], success[i] = r, te, self._success_of(info)
        dev = self.spec.device
        live_t = torch.as_tensor(live, device=dev)
        self._steps += live_t.long()
        term = live_t & torch.as_tensor(terminated, device=dev)
        trunc = live_t & ~term & (self._steps >= self.spec.max_episode_steps)
        self._terminated |= term
        self._truncated |= trunc
        self._success = torch.as_tensor(success, device=dev)
        return (
            self._observe(),
            torch.as_tensor(reward, device=dev),
            self._terminated.clone(),
            self._truncated.clone(),
            self._info(),
        )

    def safe_hold_action(self, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Zeros clipped into the bounds (zero velocity for Fetch; the gripper keeps its command)."""
        rows = self.spec.num_envs if env_ids is None else int(torch.as_tensor(env_ids).numel())
        return self.spec.action.clip(torch.zeros(rows, self.spec.action.dim, device=self.spec.device))

    # -- state ---------------------------------------------------------------------------------

    def _require_state(self) -> StateSpec:
        if self.spec.state is None:
            raise EnvContractError(f"{self.spec.task}: get_state/set_state need per-row MuJoCo envs")
        return self.spec.state

    def get_state(self, env_ids: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """MuJoCo integration state, goal, cached observation and bookkeeping of ``env_ids``."""
        import mujoco

        state_spec = self._require_state()
        ids = resolve_env_ids(env_ids, self.spec.num_envs, self.spec.device)
        sims, goals, poses = [], [], []
        for i in ids.tolist():
            model, data = self._mujoco[i]
            buf = np.empty(state_spec.shapes["sim"], dtype=np.float64)
            mujoco.mj_getState(model, data, buf, mujoco.mjtState.mjSTATE_INTEGRATION)
            sims.append(buf)
            poses.append(np.concatenate((data.xpos.ravel(), data.xquat.ravel())))
            if "goal" in state_spec.shapes:
                goals.append(np.array(self._envs[i].unwrapped.goal, dtype=np.float64))
        dev = self.spec.device
        out = {
            "sim": torch.as_tensor(np.stack(sims), device=dev),
            "body_pose": torch.as_tensor(np.stack(poses), device=dev),
        }
        if goals:
            out["goal"] = torch.as_tensor(np.stack(goals), device=dev)
        out.update({f"obs.{k}": v[ids].clone() for k, v in self._obs.items()})
        out.update(
            episode_step=self._steps[ids].clone(),
            terminated=self._terminated[ids].clone(),
            truncated=self._truncated[ids].clone(),
            success=self._success[ids].clone(),
        )
        return out

    def set_state(self, state: dict[str, torch.Tensor], env_ids: torch.Tensor | None = None) -> Obs:
        """Restore rows from :meth:`get_state` output; returns the full-batch observation."""
        import mujoco

        state_spec = self._require_state()
        ids = resolve_env_ids(env_ids, self.spec.num_envs, self.spec.device)
        missing = [f.name for f in state_spec.fields if f.name not in state]
        if missing:
            raise EnvContractError(f"{self.spec.task}: set_state is missing fields {missing}")
        sims = state["sim"].detach().cpu().numpy().astype(np.float64)
        poses = state["body_pose"].detach().cpu().numpy().astype(np.float64)
        for row, i in enumerate(ids.tolist()):
            model, data = self._mujoco[i]
            mujoco.mj_setState(
                model, data, np.ascontiguousarray(sims[row]), mujoco.mjtState.mjSTATE_INTEGRATION
            )
            mujoco.mj_forward(model, data)
            # mj_step leaves body poses of the pre-integration state; envs such as Fetch read them
            # (mocap control) before their next step, so restore them exactly as they were.
            pose = poses[row]
            data.xpos[:] = pose[: model.nbody * 3].reshape(model.nbody, 3)
            data.xquat[:] = pose[model.nbody * 3 :].reshape(model.nbody, 4)
            if "goal" in state:
                self._envs[i].unwrapped.goal = (
                    state["goal"][row].detach().cpu().numpy().astype(np.float64).copy()
                )
        for k in self._obs:
            self._obs[k][ids] = state[f"obs.{k}"].to(self.spec.device, torch.float32)
        self._steps[ids] = state["episode_step"].to(self.spec.device, torch.long)
        self._terminated[ids] = state["terminated"].to(self.spec.device, torch.bool)
        self._truncated[ids] = state["truncated"].to(self.spec.device, torch.bool)
        self._success[ids] = state["success"].to(self.spec.device, torch.bool)
        return self._observe()

    def close(self) -> None:
        """Close every underlying env (idempotent)."""
        for env in self._envs:
            env.close()
        if self._vec is not None:
            self._vec.close()


def make_gymnasium_env(
    env_id: str, *, num_envs: int, device: str | torch.device = "cpu", seed: int | None = None, **kwargs: Any
) -> GymnasiumVecEnv:
    """Factory behind ``make_env("gymnasium:<id>", ...)``."""
    return GymnasiumVecEnv.from_id(env_id, num_envs=num_envs, device=device, seed=seed, **kwargs)
