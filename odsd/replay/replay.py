"""Replay recorded episodes in parallel env rows: kinematic (set state) or dynamic (re-simulate).

::

    snap = EpisodeStore.open("data.odsd").snapshot()
    rp = Replayer(snap, [3, 7, 12], mode="dynamic")   # one env row per episode
    report = rp.run()                                   # ReplayReport, per-episode deviations
    rp.go_to_step(20)                                   # scrub: every row shows its frame 20
    rp.step()                                           # dynamic: env.step(recorded action)
    rp.close()

- ``kinematic``: each step sets the recorded simulator state (``state.*``, recorded right before
  the step) and compares the env's observation with the recorded pre-action observation: exact
  reproduction of what was seen, no physics.
- ``dynamic``: sets the recorded state of frame 0 once, then feeds the recorded raw actions
  (``action.behavior``) through ``env.step`` and compares every following observation and state,
  the per-step reward, and finally the recorded outcome (success / terminated / truncated).
  The per-row random streams of the built-in tasks are part of the state, so their random
  pushes/slips/noise repeat exactly.

Rows have their own lengths: a row whose episode ended holds its last frame (kinematic) or stays
frozen in the env (dynamic) while longer rows continue. Episodes never interact: each row is
restored and stepped with its own data only. More episodes than rows: :func:`replay_episodes`
replays them in waves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch

from odsd.envs import ENVIRONMENT_STATE_KEY, STATE_KEY, VecEnv, safe_hold_action
from odsd.replay.defaults import DEFAULT_ATOL, MODES
from odsd.replay.errors import ReplayError
from odsd.replay.spec_check import (
    ACTION_FIELD,
    STATE_PREFIX,
    RecordedEnv,
    check_compatible,
    make_replay_env,
    recorded_env,
)
from odsd.store import Snapshot

Mode = Literal["kinematic", "dynamic"]
RNG_FIELDS = ("rng_key", "rng_counter")
_OUTCOME_FIELDS = ("reward", "terminated", "truncated", "success")


@dataclass
class EpisodeReplay:
    """How one episode replayed."""

    episode_id: int
    env_row: int
    length: int
    mode: str
    frames_compared: int = 0
    max_obs_dev: float = 0.0
    """Max |replayed - recorded| over ``observation.*`` elements and compared frames."""
    max_state_dev: float = 0.0
    """Max |replayed - recorded| over float ``state.*`` elements (dynamic mode)."""
    max_reward_dev: float = 0.0
    first_divergence: int | None = None
    """First frame whose observation or state deviates by more than ``atol``."""
    state_mismatch: list[str] = field(default_factory=list)
    """Non-float state fields (rng, step counters, flags) that differ on some compared frame."""
    recorded_success: bool | None = None
    recorded_terminal: str | None = None
    replayed_success: bool | None = None
    replayed_terminal: str | None = None
    replayed_end: int | None = None
    """Frame index at which the replayed episode ended (dynamic), when it did."""
    outcome_reproduced: bool | None = None
    reproduced: bool = True
    explanation: str | None = None
    obs_dev: np.ndarray | None = field(default=None, repr=False)
    """Per-frame max observation deviation (NaN where not compared)."""
    replayed_observation: np.ndarray | None = field(default=None, repr=False)
    """``[length, D]`` ``observation.state`` the env showed during replay (NaN where not visited)."""

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in ("obs_dev", "replayed_observation")}
        return dict(out)


@dataclass
class ReplayReport:
    """Per-episode results of one replay (possibly several waves)."""

    mode: str
    atol: float
    episodes: list[EpisodeReplay] = field(default_factory=list)

    @property
    def max_obs_dev(self) -> float:
        return max((e.max_obs_dev for e in self.episodes), default=0.0)

    @property
    def max_state_dev(self) -> float:
        return max((e.max_state_dev for e in self.episodes), default=0.0)

    @property
    def failed(self) -> list[EpisodeReplay]:
        return [e for e in self.episodes if not e.reproduced]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "atol": self.atol,
            "episodes": [e.to_json() for e in self.episodes],
            "max_obs_dev": self.max_obs_dev,
            "max_state_dev": self.max_state_dev,
            "reproduced": sum(e.reproduced for e in self.episodes),
            "not_reproduced": [e.episode_id for e in self.failed],
        }


def _terminal(terminated: bool, truncated: bool, success: bool) -> str:
    if success:
        return "success"
    if terminated:
        return "terminated"
    return "truncated" if truncated else "running"


class Replayer:
    """Replays up to ``env_rows`` episodes at once (see module docstring).

    ``env`` may be given (it must match the recorded spec and have at least as many rows as
    episodes); otherwise one is built from the recorded task and task kwargs. ``task`` overrides
    the recorded task name (the spec check still applies).
    """

    def __init__(
        self,
        snapshot: Snapshot,
        episode_ids: Sequence[int],
        *,
        mode: Mode = "kinematic",
        env: VecEnv | None = None,
        env_rows: int | None = None,
        device: str | torch.device = "cpu",
        task: str | None = None,
        atol: float = DEFAULT_ATOL,
    ) -> None:
        if mode not in MODES:
            raise ReplayError(f"replay mode must be one of {MODES}, got {mode!r}")
        if not episode_ids:
            raise ReplayError("no episodes to replay")
        self.snapshot = snapshot
        self.mode: Mode = mode
        self.atol = float(atol)
        self._task = task
        self.recorded: RecordedEnv = recorded_env(snapshot, int(episode_ids[0]), task=task)
        rows = env.spec.num_envs if env is not None else int(env_rows or len(episode_ids))
        if rows < len(episode_ids):
            raise ReplayError(f"{len(episode_ids)} episodes need at least as many env rows, got {rows}")
        self._own_env = env is None
        self.env = env if env is not None else make_replay_env(self.recorded, rows, device=device)
        self.spec = self.env.spec
        check_compatible(self.recorded, self.spec)
        if not hasattr(self.env, "set_state"):
            raise ReplayError(f"env {self.spec.task!r} cannot set its state (no SupportsState)")
        self.device = self.spec.device
        self.load(episode_ids)

    # -- data ---------------------------------------------------------------------------------

    def load(self, episode_ids: Sequence[int]) -> None:
        """Load new episodes into the rows (same env); resets the cursor and the statistics."""
        ids = [int(e) for e in episode_ids]
        if not ids or len(ids) > self.spec.num_envs:
            raise ReplayError(f"need 1..{self.spec.num_envs} episodes for this env, got {len(ids)}")
        for eid in ids[1:]:
            other = recorded_env(self.snapshot, eid, task=self._task)
            if other.identity() != self.recorded.identity():
                raise ReplayError(
                    f"episodes {ids[0]} and {eid} come from different envs "
                    f"({self.recorded.task} vs {other.task}); replay them separately"
                )
        assert self.spec.state is not None
        state_names = [f.name for f in self.spec.state.fields]
        obs_keys = [k for k in (STATE_KEY, ENVIRONMENT_STATE_KEY) if k in self.snapshot.features]
        fields = [f"{STATE_PREFIX}{n}" for n in state_names] + obs_keys + [ACTION_FIELD, *_OUTCOME_FIELDS]
        episodes = [self.snapshot.episode(eid, fields) for eid in ids]
        self.episode_ids = ids
        self.metas = [self.snapshot.meta(eid) for eid in ids]
        self.num_episodes = len(ids)
        self.lengths = torch.tensor([m.length for m in self.metas], dtype=torch.long, device=self.device)
        self.max_length = int(self.lengths.max())
        self.rows = torch.arange(self.num_episodes, device=self.device)

        def pad(name: str) -> torch.Tensor:
            first = episodes[0][name]
            out = np.zeros((self.num_episodes, self.max_length, *first.shape[1:]), dtype=first.dtype)
            for i, ep in enumerate(episodes):
                out[i, : len(ep[name])] = ep[name]
                out[i, len(ep[name]) :] = ep[name][-1]  # hold the last frame
            return torch.as_tensor(out, device=self.device)

        self.states = {n: pad(f"{STATE_PREFIX}{n}") for n in state_names}
        self.observations = {k: pad(k) for k in obs_keys}
        self.actions = pad(ACTION_FIELD).to(torch.float32)
        self.outcomes = {k: pad(k) for k in _OUTCOME_FIELDS}
        self._float_states = [n for n in state_names if self.states[n].is_floating_point()]
        self._exact_states = [n for n in state_names if not self.states[n].is_floating_point()]
        self.t = torch.zeros(self.num_episodes, dtype=torch.long, device=self.device)
        self._reset_stats()

    def _reset_stats(self) -> None:
        n, T = self.num_episodes, self.max_length
        self.obs_dev = torch.full((n, T), float("nan"), dtype=torch.float64)
        self.replayed_obs = {
            k: torch.full_like(v, float("nan"), dtype=torch.float32) for k, v in self.observations.items()
        }
        """What the env showed per row and frame (NaN where the frame was not visited)."""
        self.state_dev = torch.full((n, T), float("nan"), dtype=torch.float64)
        self.reward_dev = torch.zeros(n, dtype=torch.float64)
        self.mismatch_first: list[dict[str, int]] = [{} for _ in range(n)]
        self.replayed: list[tuple[bool, bool, bool] | None] = [None] * n
        self.replayed_end: list[int | None] = [None] * n

    # -- env access ---------------------------------------------------------------------------

    def recorded_state(self, frames: torch.Tensor) -> dict[str, torch.Tensor]:
        """Recorded ``state.*`` of every episode row at per-row frame indices ``frames``."""
        return {n: v[self.rows, frames] for n, v in self.states.items()}

    def recorded_observation(self, frames: torch.Tensor) -> dict[str, torch.Tensor]:
        """Recorded flattened observations at per-row frame indices ``frames``."""
        return {k: v[self.rows, frames] for k, v in self.observations.items()}

    def _flat(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        flat = self.spec.flatten_observation(obs)
        return {k: flat[k][: self.num_episodes] for k in self.observations}

    def _compare_obs(self, flat: dict[str, torch.Tensor], frames: torch.Tensor, mask: torch.Tensor) -> None:
        recorded = self.recorded_observation(frames)
        dev = torch.zeros(self.num_episodes, dtype=torch.float64, device=self.device)
        for k, rec in recorded.items():
            diff = (flat[k].to(torch.float64) - rec.to(torch.float64)).abs().amax(dim=1)
            dev = torch.maximum(dev, torch.nan_to_num(diff, nan=math.inf))
        rows = mask.nonzero().flatten().cpu()
        self.obs_dev[rows, frames.cpu()[rows]] = dev.cpu()[rows]
        dev_rows = rows.to(self.device)
        for k, value in flat.items():
            self.replayed_obs[k][dev_rows, frames[dev_rows]] = value[dev_rows].to(torch.float32)

    def _compare_state(self, frames: torch.Tensor, mask: torch.Tensor) -> None:
        current = self.env.get_state(self.rows)  # type: ignore[attr-defined]
        recorded = self.recorded_state(frames)
        dev = torch.zeros(self.num_episodes, dtype=torch.float64, device=self.device)
        for n in self._float_states:
            diff = (current[n].to(torch.float64) - recorded[n].to(torch.float64)).abs()
            diff = torch.nan_to_num(diff.reshape(self.num_episodes, -1), nan=math.inf)
            if diff.shape[1]:
                dev = torch.maximum(dev, diff.amax(dim=1))
        rows = mask.nonzero().flatten().cpu()
        cpu_frames = frames.cpu()
        self.state_dev[rows, cpu_frames[rows]] = dev.cpu()[rows]
        for n in self._exact_states:
            diff = (
                current[n].reshape(self.num_episodes, -1) != recorded[n].reshape(self.num_episodes, -1)
            ).any(1)
            for r in (diff.cpu() & mask.cpu()).nonzero().flatten().tolist():
                self.mismatch_first[r].setdefault(n, int(cpu_frames[r]))

    # -- stepping -----------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """Every row reached the end of its episode."""
        end = self.lengths - 1 if self.mode == "kinematic" else self.lengths
        return bool((self.t >= end).all())

    def reset(self) -> dict[str, torch.Tensor]:
        """Restore frame 0 of every row and clear the statistics; returns the flattened observation."""
        self._reset_stats()
        return self.go_to_step(0)

    def go_to_step(self, step: int) -> dict[str, torch.Tensor]:
        """Scrub: set every row to the recorded state of its frame ``min(step, length - 1)``.

        Returns the flattened observation of the episode rows (``{"observation.state": [n, D]}``)
        and records its deviation from the recorded observation of that frame. In dynamic mode,
        later :meth:`step` calls re-simulate from there.
        """
        if step < 0:
            raise ReplayError(f"step must be >= 0, got {step}")
        frames = torch.clamp(torch.full_like(self.t, int(step)), max=self.lengths - 1)
        obs = self.env.set_state(self.recorded_state(frames), self.rows)  # type: ignore[attr-defined]
        self.t = frames
        flat = self._flat(obs)
        self._compare_obs(flat, frames, torch.ones_like(frames, dtype=torch.bool))
        return flat

    def step(self) -> dict[str, torch.Tensor]:
        """Advance every unfinished row by one recorded frame; returns the flattened observation."""
        if self.mode == "kinematic":
            return self._step_kinematic()
        return self._step_dynamic()

    def _step_kinematic(self) -> dict[str, torch.Tensor]:
        frames = torch.minimum(self.t + 1, self.lengths - 1)
        moving = frames != self.t
        obs = self.env.set_state(self.recorded_state(frames), self.rows)  # type: ignore[attr-defined]
        self.t = frames
        flat = self._flat(obs)
        self._compare_obs(flat, frames, moving)
        return flat

    def _step_dynamic(self) -> dict[str, torch.Tensor]:
        live = self.t < self.lengths
        frames = torch.minimum(self.t, self.lengths - 1)
        n_env = self.spec.num_envs
        action = safe_hold_action(self.env).to(self.device, torch.float32).clone()
        recorded = self.actions[self.rows, frames]
        action[: self.num_episodes] = torch.where(live[:, None], recorded, action[: self.num_episodes])
        assert action.shape[0] == n_env
        obs, reward, terminated, truncated, info = self.env.step(action)
        k = self.num_episodes
        reward, terminated, truncated = reward[:k], terminated[:k], truncated[:k]
        success = info["success"][:k].to(torch.bool)
        rec_reward = self.outcomes["reward"][self.rows, frames]
        rdev = (reward.to(torch.float64) - rec_reward.to(torch.float64)).abs().cpu()
        live_cpu = live.cpu()
        self.reward_dev = torch.where(live_cpu, torch.maximum(self.reward_dev, rdev), self.reward_dev)
        last = live & (frames == self.lengths - 1)
        ended = (terminated | truncated) & live
        for r in (last | ended).nonzero().flatten().tolist():
            if self.replayed[r] is None:
                self.replayed[r] = (bool(terminated[r]), bool(truncated[r]), bool(success[r]))
                self.replayed_end[r] = int(frames[r]) if bool(ended[r]) else None
        self.t = torch.where(live, self.t + 1, self.t)
        nxt = torch.minimum(self.t, self.lengths - 1)
        compare = live & (self.t < self.lengths)
        flat = self._flat(obs)
        if bool(compare.any()):
            self._compare_obs(flat, nxt, compare)
            self._compare_state(nxt, compare)
        return flat

    def run(self) -> ReplayReport:
        """Replay every row from frame 0 to its end; returns the per-episode report."""
        self.reset()
        while not self.done:
            self.step()
        return self.report()

    # -- results ------------------------------------------------------------------------------

    def report(self) -> ReplayReport:
        """Per-episode deviations and outcomes of what was replayed since the last reset."""
        report = ReplayReport(mode=self.mode, atol=self.atol)
        for i, (eid, meta) in enumerate(zip(self.episode_ids, self.metas, strict=True)):
            length = meta.length
            obs_dev = self.obs_dev[i, :length].numpy()
            state_dev = self.state_dev[i, :length].numpy()
            compared = ~np.isnan(obs_dev)
            ep = EpisodeReplay(
                episode_id=eid,
                env_row=i,
                length=length,
                mode=self.mode,
                frames_compared=int(compared.sum()),
                max_obs_dev=float(np.nanmax(obs_dev)) if compared.any() else 0.0,
                max_state_dev=float(np.nanmax(state_dev)) if (~np.isnan(state_dev)).any() else 0.0,
                max_reward_dev=float(self.reward_dev[i]),
                state_mismatch=sorted(self.mismatch_first[i]),
                recorded_success=meta.success,
                recorded_terminal=meta.terminal_reason,
                obs_dev=obs_dev,
                replayed_observation=(
                    self.replayed_obs[STATE_KEY][i, :length].cpu().numpy()
                    if STATE_KEY in self.replayed_obs
                    else None
                ),
            )
            bad = np.flatnonzero(
                (np.nan_to_num(obs_dev) > self.atol) | (np.nan_to_num(state_dev) > self.atol)
            )
            firsts = [int(bad[0])] if bad.size else []
            firsts += list(self.mismatch_first[i].values())
            ep.first_divergence = min(firsts) if firsts else None
            if self.mode == "dynamic" and self.replayed[i] is not None:
                te, tr, ok = self.replayed[i]  # type: ignore[misc]
                ep.replayed_success = ok
                ep.replayed_terminal = _terminal(te, tr, ok)
                ep.replayed_end = self.replayed_end[i]
                ep.outcome_reproduced = (
                    ok == meta.success
                    and te == meta.terminated
                    and tr == meta.truncated
                    and (ep.replayed_end is None or ep.replayed_end == length - 1)
                )
            ep.reproduced = (
                ep.first_divergence is None
                and ep.outcome_reproduced is not False
                and ep.max_reward_dev <= max(self.atol, 1e-4)
            )
            if not ep.reproduced:
                ep.explanation = self._explain(i, ep)
            report.episodes.append(ep)
        return report

    def _explain(self, i: int, ep: EpisodeReplay) -> str:
        mism = self.mismatch_first[i]
        parts = []
        rng = {n: s for n, s in mism.items() if n in RNG_FIELDS}
        if rng:
            step = min(rng.values())
            parts.append(f"random stream diverged at frame {step} ({', '.join(sorted(rng))})")
        elif self.mode == "dynamic" and getattr(self.env, "resimulation_note", None):
            parts.append(str(self.env.resimulation_note))  # the env says why it cannot repeat exactly
        elif "rng_key" not in self.states and self.mode == "dynamic":
            parts.append("the env records no random-stream state; stochastic steps cannot repeat")
        if ep.first_divergence is not None:
            parts.append(
                f"first deviation > {self.atol:g} at frame {ep.first_divergence} "
                f"(max obs {ep.max_obs_dev:.3g}, max state {ep.max_state_dev:.3g})"
            )
        other = sorted(n for n in mism if n not in RNG_FIELDS)
        if other:
            parts.append(f"state fields differ: {', '.join(other)}")
        if ep.outcome_reproduced is False:
            end = f" at frame {ep.replayed_end}" if ep.replayed_end is not None else ""
            parts.append(f"outcome {ep.recorded_terminal} recorded, {ep.replayed_terminal}{end} replayed")
        if ep.max_reward_dev > max(self.atol, 1e-4):
            parts.append(f"reward deviates by {ep.max_reward_dev:.3g}")
        return "; ".join(parts) or "deviation above tolerance"

    def close(self) -> None:
        """Close the env if this replayer built it."""
        if self._own_env:
            self.env.close()

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def replay_episodes(
    snapshot: Snapshot,
    episode_ids: Sequence[int],
    *,
    mode: Mode = "kinematic",
    env_rows: int | None = None,
    device: str | torch.device = "cpu",
    task: str | None = None,
    atol: float = DEFAULT_ATOL,
) -> ReplayReport:
    """Replay ``episode_ids`` in waves of ``env_rows`` rows (default: all at once), one env per
    recorded env identity; returns one report in the order of ``episode_ids``."""
    ids = [int(e) for e in episode_ids]
    if not ids:
        raise ReplayError("no episodes to replay")
    groups: dict[str, list[int]] = {}
    for eid in ids:
        groups.setdefault(recorded_env(snapshot, eid, task=task).identity(), []).append(eid)
    results: dict[int, EpisodeReplay] = {}
    for members in groups.values():
        rows = min(int(env_rows or len(members)), len(members))
        waves = [members[i : i + rows] for i in range(0, len(members), rows)]
        with Replayer(
            snapshot, waves[0], mode=mode, env_rows=rows, device=device, task=task, atol=atol
        ) as rp:
            for w, wave in enumerate(waves):
                if w:
                    rp.load(wave)
                for ep in rp.run().episodes:
                    results[ep.episode_id] = ep
    return ReplayReport(mode=mode, atol=atol, episodes=[results[e] for e in ids])
