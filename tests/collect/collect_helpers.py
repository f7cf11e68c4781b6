"""Toy env / expert / student for collector tests, plus a logging wrapper for built-in envs.

Toy observation ``x`` = ``[row, episode, step, global_t]`` (float32): every frame says which row
and which episode of that row it belongs to, its step in the episode and the env-wide step
counter, so leaks between rows or episodes and off-by-one observation pairing are visible in
the stored data alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from odsd.envs import ActionSpec, CameraSpec, EnvSpec, ObservationKey
from odsd.experts import ExpertQuery, ExpertSpec
from odsd.experts.failures import Failure
from odsd.policies import PolicyMeta, publish_snapshot
from odsd.policies.architectures import register_architecture
from odsd.store import EpisodeStore

HOLD = (0.25, -0.25)
"""The toy env's safe hold action (distinct from anything else the toy actors emit)."""

STUDENT_ACTION = (0.5, -0.5)
TOY_ARCH = "odsd_tests_toy_student"

LengthFn = Callable[[int, int], int]
SuccessFn = Callable[[int, int], bool]


def staggered_length(row: int, episode: int) -> int:
    """Different lengths per row and per episode (3..11), so rows finish at different steps."""
    return 3 + (row * 3 + episode * 5) % 9


def alternating_success(row: int, episode: int) -> bool:
    return (row + episode) % 2 == 0


class ToyVecEnv:
    """Deterministic VecEnv: row ``r``'s episode ``k`` lasts ``length_fn(r, k)`` steps.

    The last step terminates (success per ``success_fn``) unless the length reaches
    ``max_episode_steps``, in which case the row is truncated (never a success). Every action the
    env receives is logged in ``actions`` (one ``[n, A]`` tensor per step).
    """

    def __init__(
        self,
        num_envs: int = 4,
        *,
        max_episode_steps: int = 12,
        length_fn: LengthFn = staggered_length,
        success_fn: SuccessFn = alternating_success,
        task: str = "toy",
    ) -> None:
        self.spec = EnvSpec(
            task=task,
            task_description="toy counting task",
            observation=(ObservationKey("x", (4,), names=("row", "episode", "step", "global_t")),),
            action=ActionSpec(dim=2, low=(-1.0, -1.0), high=(1.0, 1.0), kind="toy"),
            step_dt=0.1,
            max_episode_steps=max_episode_steps,
            num_envs=num_envs,
        )
        self.n = num_envs
        self.length_fn = length_fn
        self.success_fn = success_fn
        self.episode = torch.full((num_envs,), -1, dtype=torch.long)
        self.step_count = torch.zeros(num_envs, dtype=torch.long)
        self.global_t = 0
        self.actions: list[torch.Tensor] = []
        self.resets: list[list[int]] = []
        self.closed = False

    def _obs(self) -> dict[str, torch.Tensor]:
        rows = torch.arange(self.n, dtype=torch.float32)
        x = torch.stack(
            (
                rows,
                self.episode.float(),
                self.step_count.float(),
                torch.full((self.n,), float(self.global_t)),
            ),
            dim=1,
        )
        return {"x": x}

    def reset(
        self, env_ids: torch.Tensor | None = None, seed: int | None = None
    ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        ids = torch.arange(self.n) if env_ids is None else torch.as_tensor(env_ids).long().flatten()
        self.episode[ids] += 1
        self.step_count[ids] = 0
        self.resets.append(ids.tolist())
        return self._obs(), {"success": torch.zeros(self.n, dtype=torch.bool)}

    def length(self, row: int, episode: int) -> int:
        return min(self.length_fn(row, episode), self.spec.max_episode_steps)

    def step(self, action: torch.Tensor):
        action = self.spec.check_action(action)
        if not bool(torch.isfinite(action).all()):
            raise AssertionError(f"toy env got a non-finite action: {action}")
        if bool((action.abs() > 1.0 + 1e-6).any()):
            raise AssertionError(f"toy env got an out-of-bounds action: {action}")
        self.actions.append(action.clone())
        self.step_count += 1
        self.global_t += 1
        reached = torch.tensor(
            [int(self.step_count[r]) >= self.length(r, int(self.episode[r])) for r in range(self.n)]
        )
        natural = torch.tensor(
            [self.length_fn(r, int(self.episode[r])) <= self.spec.max_episode_steps for r in range(self.n)]
        )
        terminated = reached & natural
        truncated = reached & ~natural
        success = terminated & torch.tensor([self.success_fn(r, int(self.episode[r])) for r in range(self.n)])
        reward = self.step_count.float() + 0.5
        return self._obs(), reward, terminated, truncated, {"success": success}

    def safe_hold_action(self, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        rows = self.n if env_ids is None else int(torch.as_tensor(env_ids).numel())
        return torch.tensor(HOLD).expand(rows, 2).clone()

    def close(self) -> None:
        self.closed = True


def toy_expert_action(x: torch.Tensor) -> torch.Tensor:
    """The toy expert's label for observations ``x`` ``[m, 4]`` (a pure function of the state)."""
    return torch.stack((torch.tanh(x[:, 2] / 10.0), x[:, 0] / 100.0 - x[:, 1] / 1000.0), dim=1)


class ToyExpert:
    """State-conditioned toy expert; chosen rows give bad labels.

    ``nan_rows``: NaN action; ``oob_rows``: action 3.0 (out of bounds); ``invalid_rows``: valid=False
    with ``Failure.UNREACHABLE``. Phase = ``step // 2 % 3`` (segments change within episodes).
    """

    phase_names: ClassVar[list[str]] = ["a", "b", "c"]

    def __init__(
        self,
        *,
        nan_rows: Sequence[int] = (),
        oob_rows: Sequence[int] = (),
        invalid_rows: Sequence[int] = (),
        kind: str = "planner",
        state_conditioned: bool = True,
    ) -> None:
        self.spec = ExpertSpec(name="toy", version="7", kind=kind, state_conditioned=state_conditioned)  # type: ignore[arg-type]
        self.nan_rows = list(nan_rows)
        self.oob_rows = list(oob_rows)
        self.invalid_rows = list(invalid_rows)
        self.calls: list[dict[str, torch.Tensor]] = []
        self.resets: list[list[int]] = []

    def reset(self, env_ids: torch.Tensor, obs: dict[str, torch.Tensor], info: dict[str, Any]) -> None:
        self.resets.append(torch.as_tensor(env_ids).tolist())

    def act(self, obs: dict[str, torch.Tensor], *, env_ids: torch.Tensor) -> ExpertQuery:
        x = obs["x"][env_ids]
        self.calls.append({"x": x.clone()})
        action = toy_expert_action(x)
        valid = torch.ones(x.shape[0], dtype=torch.bool)
        failure = torch.zeros(x.shape[0], dtype=torch.int32)
        rows = x[:, 0].long()
        for r in self.nan_rows:
            action[rows == r] = math.nan
        for r in self.oob_rows:
            action[rows == r] = 3.0
        for r in self.invalid_rows:
            valid[rows == r] = False
            failure[rows == r] = int(Failure.UNREACHABLE)
        phase = (x[:, 2].long() // 2) % 3
        return ExpertQuery(action=action, valid=valid, failure=failure, metadata={"phase": phase})


class ToyStudent(nn.Module):
    """Returns ``STUDENT_ACTION`` except NaN on ``nan_rows`` and 2.0 (out of bounds) on ``oob_rows``.

    ``offset`` is added to the first action dim so two published versions act differently.
    """

    def __init__(
        self, nan_rows: Sequence[int] = (), oob_rows: Sequence[int] = (), offset: float = 0.0
    ) -> None:
        super().__init__()
        self.nan_rows, self.oob_rows = list(nan_rows), list(oob_rows)
        self.register_buffer("offset", torch.tensor([float(offset)]))

    def arch_kwargs(self) -> dict[str, Any]:
        return {"nan_rows": self.nan_rows, "oob_rows": self.oob_rows}

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        out = torch.tensor(STUDENT_ACTION).expand(state.shape[0], 2).clone()
        out[:, 0] += self.offset
        rows = state[:, 0].long()
        for r in self.nan_rows:
            out[rows == r] = math.nan
        for r in self.oob_rows:
            out[rows == r] = 2.0
        return out


register_architecture(TOY_ARCH, ToyStudent, overwrite=True)


def publish_toy_student(
    root: Path, spec: EnvSpec, *, version: int | None = None, offset: float = 0.0, **kwargs: Any
) -> Path:
    model = ToyStudent(offset=offset, **kwargs)
    meta = PolicyMeta.for_env(spec, architecture=TOY_ARCH, arch_kwargs=model.arch_kwargs())
    return publish_snapshot(root, model, meta, version=version)


class LoggingEnv:
    """Wraps a VecEnv; logs, per step, the observation the env last returned and the action.

    ``steps[i]`` = ``(obs_before, action, reward, terminated, truncated)`` with ``obs_before`` the
    full-batch observation dict the caller saw before step ``i`` (cloned).
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.spec = env.spec
        self.current: dict[str, torch.Tensor] | None = None
        self.steps: list[
            tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
        ] = []

    def reset(self, env_ids: torch.Tensor | None = None, seed: int | None = None):
        obs, info = self.env.reset(env_ids=env_ids, seed=seed)
        self.current = {k: v.clone() for k, v in obs.items()}
        return obs, info

    def step(self, action: torch.Tensor):
        assert self.current is not None
        before = self.current
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps.append((before, action.clone(), reward.clone(), terminated.clone(), truncated.clone()))
        self.current = {k: v.clone() for k, v in obs.items()}
        return obs, reward, terminated, truncated, info

    def safe_hold_action(self, env_ids: torch.Tensor | None = None) -> torch.Tensor:
        from odsd.envs import safe_hold_action

        return safe_hold_action(self.env, env_ids)

    def close(self) -> None:
        self.env.close()

    def row_episodes(self) -> dict[int, list[list[int]]]:
        """For each row, its finished episodes as lists of indices into ``steps``."""
        n = self.spec.num_envs
        open_: dict[int, list[int]] = {r: [] for r in range(n)}
        done: dict[int, list[list[int]]] = {r: [] for r in range(n)}
        for i, (_, _, _, term, trunc) in enumerate(self.steps):
            for r in range(n):
                open_[r].append(i)
                if bool(term[r]) or bool(trunc[r]):
                    done[r].append(open_[r])
                    open_[r] = []
        return done


def stored_episodes(store_path: Path) -> list[tuple[Any, dict[str, Any]]]:
    """``(meta, frames)`` of every visible episode, in episode-id order."""
    snap = EpisodeStore.open(store_path, durability="process").snapshot()
    return [(e.meta, snap.episode(e.episode_id)) for e in snap.entries]


class CameraToyEnv(ToyVecEnv):
    """:class:`ToyVecEnv` with a camera ``cam`` whose every pixel is a function of (row, episode, step).

    ``toy_frame(row, episode, step)`` is the frame the env showed; a stored frame that belongs to
    another row, episode or step (or a shifted one) differs from it in most pixels.
    """

    HEIGHT, WIDTH = 6, 10

    def __init__(self, num_envs: int = 4, **kw: Any) -> None:
        super().__init__(num_envs, **kw)
        self.spec = dataclasses.replace(
            self.spec, cameras=(CameraSpec("cam", self.HEIGHT, self.WIDTH, description="toy counter"),)
        )

    def _obs(self) -> dict[str, torch.Tensor]:
        obs = super()._obs()
        frames = [
            toy_frame(r, int(self.episode[r]), int(self.step_count[r]), self.HEIGHT, self.WIDTH)
            for r in range(self.n)
        ]
        obs["observation.images.cam"] = torch.from_numpy(np.stack(frames))
        return obs


def toy_frame(row: int, episode: int, step: int, height: int = 6, width: int = 10) -> np.ndarray:
    """A ``[height, width, 3]`` uint8 frame, distinct for every (row, episode, step)."""
    rng = np.random.default_rng([row, episode + 1, step])
    return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
