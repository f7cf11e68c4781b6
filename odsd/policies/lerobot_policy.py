"""`LeRobotPolicy`: a LeRobot pretrained directory run batched over env rows as an odsd policy.

A pretrained directory is what LeRobot's ``save_pretrained`` writes for a policy and its two
processor pipelines: ``config.json``, ``model.safetensors``, ``policy_preprocessor.json`` and
``policy_postprocessor.json`` (+ their state files)::

    policy = LeRobotPolicy.load("ckpt/act", env.spec)          # checked against the env layout
    flat = env.spec.flatten_observation(obs)                    # observation.state, cameras, ...
    chunk = policy.predict_chunk(flat)                          # [n, n_action_steps, A] raw env actions
    chunk = policy.predict_chunk(flat, rows=torch.tensor([2]))  # only row 2: [1, n_action_steps, A]

Loading maps the env's observation keys (``observation.state``, ``observation.environment_state``,
``observation.images.<cam>``; see :mod:`odsd.envs.spec`) to the policy's input features through
the preprocessor's rename map and refuses, in one :class:`~odsd.errors.ConfigError` line, a
checkpoint that wants a key the env lacks, a different shape, or another action dim. The model,
both pipelines and every output live on the env device; actions come back unnormalized by the
saved postprocessor. LeRobot's own ``select_action`` queue is never used (it is shared by the whole
batch); per-row chunk queues are :class:`odsd.policies.action_chunks.ChunkedStudent`'s job.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from odsd.envs.spec import DEPTH_PREFIX, IMAGES_PREFIX, EnvSpec
from odsd.errors import ConfigError
from odsd.policies.errors import SnapshotCorruptError, SnapshotNotFoundError

PREFIX = "lerobot:"
"""``--student lerobot:<dir>`` / ``--expert lerobot:<dir>``."""
REQUIRED_FILES = ("config.json", "model.safetensors", "policy_preprocessor.json", "policy_postprocessor.json")
TIME_DIM_TYPES = frozenset({"diffusion"})
"""Policy types whose ``predict_action_chunk`` takes observations with a time axis ``[n, T, ...]``
(``T = n_obs_steps``); only these may have ``n_obs_steps > 1``."""


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in value)


def _read_config(path: Path, where: str) -> dict[str, Any]:
    try:
        return json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SnapshotCorruptError(f"{where}: config.json is unreadable ({exc})") from None


def check_layout(
    raw: Mapping[str, Any], spec: EnvSpec, where: str, rename: Mapping[str, str]
) -> dict[str, str]:
    """Policy input key -> env observation key; one :class:`ConfigError` line on the first mismatch.

    ``raw`` is the parsed ``config.json``; ``rename`` the preprocessor's env-key -> policy-key map.
    """
    env = {k: v for k, v in spec.features().items() if k != "action"}
    back = {new: old for old, new in rename.items()}
    mapping: dict[str, str] = {}
    for key, feature in (raw.get("input_features") or {}).items():
        env_key = back.get(key, key)
        shape = _shape(feature.get("shape", ()))
        if env_key.startswith(DEPTH_PREFIX):
            raise ConfigError(
                f"{where}: input {key!r} is a depth image; LeRobot students read RGB cameras only"
            )
        if env_key not in env:
            have = ", ".join(sorted(env))
            raise ConfigError(
                f"{where}: expects input {key!r} but env {spec.task!r} has no such key (has: {have})"
            )
        got = _shape(env[env_key]["shape"])
        if env_key.startswith(IMAGES_PREFIX):
            got = (got[2], got[0], got[1])  # the env's HWC frames reach the policy as CHW
        if shape != got:
            raise ConfigError(
                f"{where}: expects {key!r} of shape {shape} but env {spec.task!r} gives {env_key!r} of shape {got}"
            )
        mapping[key] = env_key
    if not mapping:
        raise ConfigError(f"{where}: config.json declares no input_features")
    action = (raw.get("output_features") or {}).get("action")
    if action is None:
        raise ConfigError(f"{where}: config.json declares no 'action' output feature")
    if _shape(action.get("shape", ())) != (spec.action.dim,):
        raise ConfigError(
            f"{where}: outputs actions of shape {_shape(action.get('shape', ()))} but env {spec.task!r} "
            f"takes ({spec.action.dim},)"
        )
    return mapping


def _rename_map(path: Path) -> dict[str, str]:
    """The env-key -> policy-key map of the saved preprocessor (``{}`` when it renames nothing)."""
    try:
        steps = json.loads((path / "policy_preprocessor.json").read_text()).get("steps", [])
    except (OSError, json.JSONDecodeError) as exc:
        raise SnapshotCorruptError(f"{path}: policy_preprocessor.json is unreadable ({exc})") from None
    out: dict[str, str] = {}
    for step in steps:
        if step.get("registry_name") == "rename_observations_processor":
            out.update((step.get("config") or {}).get("rename_map") or {})
    return out


class LeRobotPolicy:
    """A loaded LeRobot policy with its pipelines, bound to one env layout (see module docstring)."""

    def __init__(
        self,
        policy: Any,
        preprocessor: Any,
        postprocessor: Any,
        *,
        path: Path,
        spec: EnvSpec,
        inputs: dict[str, str],
        device: torch.device,
    ) -> None:
        self.policy, self.pre, self.post = policy, preprocessor, postprocessor
        self.path, self.spec, self.inputs, self.device = path, spec, inputs, device
        config = policy.config
        self.type: str = str(config.type)
        self.n_action_steps = int(getattr(config, "n_action_steps", 1) or 1)
        self.n_obs_steps = int(getattr(config, "n_obs_steps", 1) or 1)
        """Observations per prediction: > 1 needs a per-row history (``ChunkedStudent`` keeps one)."""
        self._time_dim = self.type in TIME_DIM_TYPES
        self._task = [spec.task_description or spec.task]

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        spec: EnvSpec,
        *,
        device: str | torch.device | None = None,
        history: bool = False,
    ) -> LeRobotPolicy:
        """Load ``path`` (a local pretrained directory, never a Hub id) for ``spec`` on ``device``
        (default: the env device). Raises a one-line odsd error for anything it cannot use.

        ``history``: the caller keeps per-row observation histories, so ``n_obs_steps > 1`` is
        accepted (for the types in :data:`TIME_DIM_TYPES`)."""
        path = Path(path)
        where = f"{PREFIX}{path}"
        if not path.is_dir():
            raise SnapshotNotFoundError(f"{where}: no such LeRobot pretrained directory")
        missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
        if missing:
            raise SnapshotNotFoundError(
                f"{where}: not a LeRobot pretrained directory with processors (missing {', '.join(missing)})"
            )
        raw = _read_config(path, where)
        inputs = check_layout(raw, spec, where, _rename_map(path))
        _check_inference(raw, where, history=history)
        device = torch.device(spec.device if device is None else device)
        try:
            from lerobot.configs.policies import PreTrainedConfig
            from lerobot.policies.factory import get_policy_class, make_pre_post_processors
        except ImportError as exc:
            raise ConfigError(f"{where}: LeRobot policies need the lerobot extra ({exc})") from None
        overrides = {"device_processor": {"device": str(device)}}
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # LeRobot prints while loading weights
                config = PreTrainedConfig.from_pretrained(path, local_files_only=True)
                config.device = str(device)
                policy = get_policy_class(config.type).from_pretrained(
                    path, config=config, local_files_only=True, strict=True
                )
                pre, post = make_pre_post_processors(
                    config,
                    pretrained_path=str(path),
                    preprocessor_overrides=overrides,
                    postprocessor_overrides=overrides,
                )
        except (RuntimeError, ValueError, KeyError, OSError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SnapshotCorruptError(f"{where}: cannot load the policy: {first}") from exc
        policy.to(device).eval()
        return cls(policy, pre, post, path=path, spec=spec, inputs=inputs, device=device)

    def batch(self, flat: Mapping[str, torch.Tensor], rows: torch.Tensor | None = None) -> dict[str, Any]:
        """The policy's input batch for flattened env observations (images HWC uint8 -> CHW [0, 1])."""
        out: dict[str, Any] = {}
        for env_key in self.inputs.values():
            value = flat[env_key] if rows is None else flat[env_key][rows]
            if env_key.startswith(IMAGES_PREFIX):
                value = value.movedim(-1, -3).to(torch.float32) / 255  # [..., H, W, C] -> [..., C, H, W]
            else:
                value = value.to(torch.float32)
            out[env_key] = value.to(self.device)
        n = next(iter(out.values())).shape[0]
        out["task"] = self._task * n
        return out

    @torch.inference_mode()
    def predict_chunk(
        self, flat: Mapping[str, torch.Tensor], rows: torch.Tensor | None = None, *, history: bool = False
    ) -> torch.Tensor:
        """Raw env actions ``[k, n_action_steps, A]`` for the rows ``rows`` (default: all) of ``flat``.

        ``history``: every value of ``flat`` is ``[n, n_obs_steps, ...]``, oldest first."""
        batch = self.pre(self.batch(flat, rows))
        if self._time_dim and not history:
            batch = {
                k: v.unsqueeze(1) if isinstance(v, torch.Tensor) and k in self.inputs else v
                for k, v in batch.items()
            }
        chunk = self.policy.predict_action_chunk(batch)
        if chunk.ndim == 2:  # a policy that predicts one action
            chunk = chunk.unsqueeze(1)
        chunk = chunk[:, : self.n_action_steps]
        return self.post(chunk).to(self.spec.device, torch.float32)

    def first_actions(self, flat: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Raw env actions ``[n, A]``: the first action of the chunk predicted from each row."""
        return self.predict_chunk(flat)[:, 0]


def _check_inference(raw: Mapping[str, Any], where: str, *, history: bool) -> None:
    """Refuse settings that keep state across the whole batch (they break per-row resets)."""
    if raw.get("temporal_ensemble_coeff") is not None:
        raise ConfigError(
            f"{where}: temporal ensembling keeps one batch-wide state; set temporal_ensemble_coeff to null"
        )
    steps = int(raw.get("n_obs_steps", 1) or 1)
    if steps == 1:
        return
    if not history:
        raise ConfigError(
            f"{where}: n_obs_steps={steps}: a label must be a function of one observation here "
            "(only a student keeps observation histories; train with n_obs_steps=1)"
        )
    if raw.get("type") not in TIME_DIM_TYPES:
        raise ConfigError(
            f"{where}: n_obs_steps={steps}: observation histories are supported for "
            f"{', '.join(sorted(TIME_DIM_TYPES))} policies only, not {raw.get('type')!r}"
        )
