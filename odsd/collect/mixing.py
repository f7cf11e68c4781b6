"""Per-row beta mixing from a seeded generator whose state can be saved and restored."""

from __future__ import annotations

import base64
from typing import Literal

import torch

MixingUnit = Literal["step", "episode"]


class BetaMixer:
    """Decides, per env row, whether the expert's label is executed.

    With ``unit="step"`` a fresh draw is made for every row at every step; with
    ``unit="episode"`` one draw per row is made when its episode starts. Draws come from a
    CPU ``torch.Generator`` so that the sequence is the same on every device and resumes
    exactly from :meth:`state`.
    """

    def __init__(self, num_envs: int, *, seed: int, unit: MixingUnit = "step") -> None:
        self.num_envs = num_envs
        self.unit: MixingUnit = unit
        self.generator = torch.Generator(device="cpu")
        self.generator.manual_seed(seed)
        self._episode_draw = torch.rand(num_envs, generator=self.generator)

    def start_episodes(self, env_ids: torch.Tensor) -> None:
        """Draw the per-episode decision for rows that just reset (no-op for per-step mixing)."""
        if self.unit == "episode" and env_ids.numel():
            self._episode_draw[env_ids.cpu()] = torch.rand(int(env_ids.numel()), generator=self.generator)

    def use_expert(self, beta: float, device: torch.device) -> torch.Tensor:
        """Bool [num_envs]: rows whose behavior action comes from the expert this step."""
        if beta >= 1.0:
            return torch.ones(self.num_envs, dtype=torch.bool, device=device)
        if beta <= 0.0:
            return torch.zeros(self.num_envs, dtype=torch.bool, device=device)
        draw = (
            torch.rand(self.num_envs, generator=self.generator) if self.unit == "step" else self._episode_draw
        )
        return (draw < beta).to(device)

    def state(self) -> dict[str, str]:
        return {
            "generator": base64.b64encode(self.generator.get_state().numpy().tobytes()).decode(),
            "episode_draw": base64.b64encode(self._episode_draw.numpy().tobytes()).decode(),
        }

    def restore(self, state: dict[str, str]) -> None:
        gen = torch.frombuffer(bytearray(base64.b64decode(state["generator"])), dtype=torch.uint8)
        self.generator.set_state(gen.clone())
        draws = torch.frombuffer(bytearray(base64.b64decode(state["episode_draw"])), dtype=torch.float32)
        self._episode_draw = draws.clone()
