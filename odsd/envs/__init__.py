"""Environments: the `EnvSpec` contract, the `VecEnv` protocol, built-in tasks and adapters.

::

    from odsd.envs import make_env
    env = make_env("pick_place", num_envs=64, device="cpu", seed=0)
    obs, info = env.reset()
    flat = env.spec.flatten_observation(obs)["observation.state"]   # [64, D] float32
"""

from odsd.envs.check import CheckItem, CheckReport, check_env
from odsd.envs.errors import EnvContractError, EnvError, EnvNotFoundError, EnvSpecError
from odsd.envs.protocol import SupportsSafeHold, SupportsState, VecEnv, resolve_env_ids, safe_hold_action
from odsd.envs.registry import import_object, list_envs, make_env, register_env
from odsd.envs.spec import (
    DEPTH_PREFIX,
    ENVIRONMENT_STATE_KEY,
    IMAGES_PREFIX,
    STATE_KEY,
    ActionSpec,
    CameraSpec,
    EnvSpec,
    ObservationKey,
    StateField,
    StateSpec,
)

__all__ = [
    "DEPTH_PREFIX",
    "ENVIRONMENT_STATE_KEY",
    "IMAGES_PREFIX",
    "STATE_KEY",
    "ActionSpec",
    "CameraSpec",
    "CheckItem",
    "CheckReport",
    "EnvContractError",
    "EnvError",
    "EnvNotFoundError",
    "EnvSpec",
    "EnvSpecError",
    "ObservationKey",
    "StateField",
    "StateSpec",
    "SupportsSafeHold",
    "SupportsState",
    "VecEnv",
    "check_env",
    "import_object",
    "list_envs",
    "make_env",
    "register_env",
    "resolve_env_ids",
    "safe_hold_action",
]
