"""`ChunkedStudent`: per-row action-chunk queues over a chunk-predicting policy.

A chunking policy (ACT, Diffusion) predicts ``n_action_steps`` actions from one observation. Each
env row keeps its own queue: a row whose queue is empty gets a new chunk predicted from its
current (frozen) observation; every step pops the row's next action. LeRobot's ``select_action``
keeps one queue for the whole batch, which is wrong as soon as rows reset independently::

    student = ChunkedStudent(LeRobotPolicy.load("ckpt/act", env.spec), num_rows=env.spec.num_envs)
    action, position = student.act(flat)   # [n, A] raw actions, [n] int16 position in their chunk
    student.reset_rows(done_rows)          # those rows start a new chunk at their next step

``position`` is 0 on the step a chunk was predicted and counts up to ``chunk_steps - 1``. Only the
rows that need a chunk are run through the policy. A new student (a policy change) is a new
object, so its queues start empty for every row.

A policy with ``n_obs_steps = T > 1`` (Diffusion) predicts from the row's last ``T`` observations:
each row keeps its own history, updated on every step (chunk or not), and a row that resets
starts it over with ``T`` copies of its first observation (what LeRobot's queues do at an episode
start).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from odsd.policies.lerobot_policy import LeRobotPolicy


class ChunkedStudent:
    """Per-row chunk queues for a :class:`LeRobotPolicy` (see module docstring)."""

    def __init__(self, policy: LeRobotPolicy, num_rows: int, *, version: int = 0) -> None:
        self.policy = policy
        self.path: Path = policy.path
        self.version = version
        self.chunk_steps = policy.n_action_steps
        device = policy.spec.device
        self._actions = torch.zeros((num_rows, self.chunk_steps, policy.spec.action.dim), device=device)
        self._position = torch.full((num_rows,), self.chunk_steps, dtype=torch.long, device=device)
        self._rows = torch.arange(num_rows, device=device)
        self.history_steps = policy.n_obs_steps
        self._history: dict[str, torch.Tensor] | None = None  # env key -> [n, T, ...], oldest first
        self._fresh = torch.ones(num_rows, dtype=torch.bool, device=device)  # rows to refill

    def act(self, obs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The next action of every row ``[n, A]`` and its position in its chunk ``[n]`` (int16).

        ``obs`` is the flattened observation (``EnvSpec.flatten_observation``) of all rows.
        """
        history = self.history_steps > 1
        if history:
            obs = self._remember(obs)
        need = self._position >= self.chunk_steps
        if bool(need.any()):
            rows = None if bool(need.all()) else need.nonzero().squeeze(1)
            chunk = self.policy.predict_chunk(obs, rows, history=history)
            if rows is None:
                self._actions.copy_(chunk)
                self._position.zero_()
            else:
                self._actions[rows] = chunk
                self._position[rows] = 0
        position = self._position
        action = self._actions[self._rows, position]
        self._position = position + 1
        return action, position.to(torch.int16)

    def reset_rows(self, rows: torch.Tensor) -> None:
        """Empty the queues (and observation histories) of ``rows`` (their episodes restarted)."""
        self._position[rows] = self.chunk_steps
        self._fresh[rows] = True

    def clear(self) -> None:
        """Empty every row's queue and history."""
        self._position.fill_(self.chunk_steps)
        self._fresh.fill_(True)

    def _remember(self, obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Push this step's observation into every row's history; refill rows that reset."""
        steps = self.history_steps
        if self._history is None:
            self._history = {
                k: obs[k].unsqueeze(1).repeat_interleave(steps, dim=1) for k in self.policy.inputs.values()
            }
        else:
            fresh = self._fresh if bool(self._fresh.any()) else None
            for key, past in self._history.items():
                now = obs[key].unsqueeze(1)
                updated = torch.cat([past[:, 1:], now], dim=1)
                if fresh is not None:
                    updated[fresh] = now[fresh].expand_as(updated[fresh])
                self._history[key] = updated
        self._fresh.fill_(False)
        return self._history
