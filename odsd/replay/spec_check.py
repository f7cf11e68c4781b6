"""Which env an episode came from, and refusing to replay it in an env that does not match.

An episode's env is identified by its run (``meta.run_id`` → ``runs/<run_id>/run.json``: task,
task kwargs, ``env_layout_hash``) and by the store's feature schema (action width and element
names, observation element names, ``state.*`` layout)::

    rec = recorded_env(snapshot, episode_id)          # RecordedEnv(task="pick_place", ...)
    env = make_replay_env(rec, num_envs=4)            # same task and task kwargs
    check_compatible(rec, env.spec)                   # raises SpecMismatchError with one line
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from odsd.envs import STATE_KEY, EnvSpec, VecEnv, make_env
from odsd.envs.errors import EnvError
from odsd.replay.defaults import STATE_PREFIX
from odsd.replay.errors import ReplayError, SpecMismatchError
from odsd.store import Snapshot

ACTION_FIELD = "action.behavior"


@dataclass(frozen=True)
class RecordedEnv:
    """What the store says about the env an episode was recorded in."""

    task: str
    """The task replay builds (the recorded one unless overridden)."""
    task_kwargs: dict[str, Any] = field(default_factory=dict)
    recorded_task: str | None = None
    """The task the episode was recorded in, when known."""
    run_id: str | None = None
    layout_hash: str | None = None
    action_dim: int | None = None
    action_names: tuple[str, ...] | None = None
    observation_names: tuple[str, ...] | None = None
    state_fields: tuple[tuple[str, str, tuple[int, ...]], ...] = ()
    """``(name, dtype, shape)`` of every recorded ``state.<name>`` field, in schema order."""

    @property
    def has_state(self) -> bool:
        return bool(self.state_fields)

    def identity(self) -> str:
        """A key grouping episodes that can share one env (same task, kwargs and layout)."""
        return json.dumps([self.task, self.task_kwargs, self.layout_hash], sort_keys=True, default=str)


def read_run_file(root: Path, run_id: str | None) -> dict[str, Any] | None:
    """``runs/<run_id>/run.json`` as a dict, or None when the run left no (readable) file."""
    if not run_id:
        return None
    path = root / "runs" / run_id / "run.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def recorded_env(snapshot: Snapshot, episode_id: int, *, task: str | None = None) -> RecordedEnv:
    """The recorded env of ``episode_id``; ``task`` overrides the recorded task name."""
    try:
        meta = snapshot.meta(episode_id)
    except KeyError as exc:
        raise ReplayError(str(exc.args[0])) from None
    store = snapshot.store
    run = read_run_file(store.root, meta.run_id) or {}
    config = run.get("config") or {}
    name = task or config.get("task") or store.manifest.robot_type
    if not name:
        raise ReplayError(
            f"episode {episode_id}: its run {meta.run_id!r} left no run.json and the store names no task; "
            "pass --task"
        )
    features = store.features
    action = features.get(ACTION_FIELD)
    obs = features.get(STATE_KEY)
    state_fields = tuple(
        (k[len(STATE_PREFIX) :], v.dtype, tuple(v.shape))
        for k, v in features.items()
        if k.startswith(STATE_PREFIX)
    )
    return RecordedEnv(
        task=name,
        recorded_task=config.get("task") or store.manifest.robot_type,
        task_kwargs=dict(config.get("task_kwargs") or {}) if not task or task == config.get("task") else {},
        run_id=meta.run_id,
        layout_hash=run.get("env_layout_hash") if not task or task == config.get("task") else None,
        action_dim=int(action.shape[0]) if action is not None and action.shape else None,
        action_names=tuple(action.names) if action is not None and action.names else None,
        observation_names=tuple(obs.names) if obs is not None and obs.names else None,
        state_fields=state_fields,
    )


def make_replay_env(
    recorded: RecordedEnv, num_envs: int, *, device: str | torch.device = "cpu", seed: int = 0
) -> VecEnv:
    """A fresh env for ``recorded`` with ``num_envs`` rows (the recorded task and task kwargs)."""
    try:
        return make_env(recorded.task, num_envs=num_envs, device=device, seed=seed, **recorded.task_kwargs)
    except EnvError as exc:
        raise ReplayError(f"cannot build env {recorded.task!r} for replay: {exc}") from exc
    except TypeError as exc:
        raise ReplayError(f"cannot build env {recorded.task!r} with {recorded.task_kwargs}: {exc}") from exc


def _first_difference(a: tuple[str, ...], b: tuple[str, ...]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"element {i} is {x!r} in the episode, {y!r} in the env"
    return f"{len(a)} elements in the episode, {len(b)} in the env"


def check_compatible(recorded: RecordedEnv, spec: EnvSpec, *, require_state: bool = True) -> None:
    """Raise :class:`SpecMismatchError` unless ``spec`` can replay what ``recorded`` describes.

    Checked in order: action width, action element names (joint order), state layout (field
    names, dtypes, shapes), observation element names, then the recorded layout hash (which also
    covers action bounds, kind and normalization).
    """
    where = f"episode recorded in {recorded.recorded_task or recorded.task!r}"
    env = f"env {spec.task!r}"
    if recorded.action_dim is not None and recorded.action_dim != spec.action.dim:
        raise SpecMismatchError(
            f"{where} has a {recorded.action_dim}-dim action, {env} takes {spec.action.dim}"
        )
    env_action = tuple(spec.action.element_names())
    if recorded.action_names is not None and recorded.action_names != env_action:
        raise SpecMismatchError(
            f"{where}: action layout / joint order differs from {env}: "
            + _first_difference(recorded.action_names, env_action)
        )
    if require_state and not recorded.has_state:
        raise ReplayError(
            f"{where}: the store has no state.* fields; collect with record_state=True to replay"
        )
    if recorded.has_state:
        if spec.state is None:
            raise SpecMismatchError(f"{where} has recorded state but {env} declares no state layout")
        env_fields = {f.name: (f.dtype, tuple(f.shape)) for f in spec.state.fields}
        rec_fields = {name: (dtype, shape) for name, dtype, shape in recorded.state_fields}
        missing = [n for n in env_fields if n not in rec_fields]
        extra = [n for n in rec_fields if n not in env_fields]
        if missing or extra:
            raise SpecMismatchError(
                f"{where}: state layout differs from {env} (env fields not recorded: {missing}, "
                f"recorded fields the env lacks: {extra})"
            )
        for name, (dtype, shape) in env_fields.items():
            if rec_fields[name] != (dtype, shape):
                rd, rs = rec_fields[name]
                raise SpecMismatchError(
                    f"{where}: state field {name!r} is {rd}{list(rs)} in the episode, "
                    f"{dtype}{list(shape)} in {env}"
                )
    env_obs = tuple(spec.features()[STATE_KEY]["names"])
    if recorded.observation_names is not None and recorded.observation_names != env_obs:
        raise SpecMismatchError(
            f"{where}: observation layout differs from {env}: "
            + _first_difference(recorded.observation_names, env_obs)
        )
    if recorded.layout_hash is not None and recorded.layout_hash != spec.layout_hash():
        raise SpecMismatchError(
            f"{where}: env layout hash {recorded.layout_hash[:12]} differs from {env}'s "
            f"{spec.layout_hash()[:12]} (action bounds, kind or normalization changed)"
        )
