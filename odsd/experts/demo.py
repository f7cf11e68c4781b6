"""`DemoExpert`: open-loop replay of recorded action sequences (BC-only, not state-conditioned).

::

    expert = DemoExpert([actions_ep0, actions_ep1], env.spec)   # each [T_i, A]
    expert.reset(env_ids, obs, info)      # rows start the next demo (round robin) at t = 0
    query = expert.act(obs, env_ids=ids)  # action t of each row's demo; then t += 1

Rows past the end of their demo get ``valid=False`` with ``Failure.DEMO_EXHAUSTED``. Pairing
these actions with learner states by timestep is not DAgger relabeling, which is why
``spec.state_conditioned`` is False and ``dagger_sync`` refuses this expert.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from odsd.envs.spec import EnvSpec
from odsd.experts.errors import ExpertContractError
from odsd.experts.failures import Failure
from odsd.experts.query import ExpertQuery, ExpertSpec


class DemoExpert:
    """Replays demonstrations per env row (see module docstring)."""

    def __init__(self, demos: Sequence[torch.Tensor], env_spec: EnvSpec, *, name: str = "demo") -> None:
        if not demos:
            raise ExpertContractError("DemoExpert needs at least one demonstration")
        dim = env_spec.action.dim
        for i, demo in enumerate(demos):
            if demo.ndim != 2 or demo.shape[1] != dim or demo.shape[0] == 0:
                raise ExpertContractError(f"demo {i} has shape {tuple(demo.shape)}, expected [T>0, {dim}]")
        device = env_spec.device
        self.env_spec = env_spec
        self.lengths = torch.tensor([d.shape[0] for d in demos], device=device)
        self.actions = torch.zeros(len(demos), int(self.lengths.max()), dim, device=device)
        for i, demo in enumerate(demos):
            self.actions[i, : demo.shape[0]] = demo.to(device, torch.float32)
        self.demo_of_row = torch.arange(env_spec.num_envs, device=device) % len(demos)
        self.cursor = torch.zeros(env_spec.num_envs, dtype=torch.long, device=device)
        self._next = env_spec.num_envs
        self.spec = ExpertSpec(name=name, version="1", kind="demo", state_conditioned=False)

    def reset(self, env_ids: torch.Tensor, obs: dict[str, torch.Tensor], info: dict[str, Any]) -> None:
        """Rows ``env_ids`` start the next demonstration (round robin) from its first action."""
        ids = torch.as_tensor(env_ids, device=self.env_spec.device).long().flatten()
        count = len(self.lengths)
        self.demo_of_row[ids] = (self._next + torch.arange(ids.numel(), device=ids.device)) % count
        self._next += ids.numel()
        self.cursor[ids] = 0

    def act(self, obs: dict[str, torch.Tensor], *, env_ids: torch.Tensor) -> ExpertQuery:
        """The current action of each row's demo; advances those rows' cursors."""
        ids = torch.as_tensor(env_ids, device=self.env_spec.device).long().flatten()
        demo, t = self.demo_of_row[ids], self.cursor[ids]
        valid = t < self.lengths[demo]
        action = self.actions[demo, torch.clamp(t, max=self.actions.shape[1] - 1)]
        action = torch.where(valid.unsqueeze(1), action, torch.zeros_like(action))
        failure = torch.where(valid, 0, int(Failure.DEMO_EXHAUSTED)).to(torch.int32)
        self.cursor[ids] += 1
        return ExpertQuery(
            action=action, valid=valid, failure=failure, metadata={"demo_index": demo, "demo_step": t}
        )
