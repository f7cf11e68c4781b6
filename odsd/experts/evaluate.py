"""Run an expert alone on an env and measure it (success rate, lengths, failures, phases).

::

    result = evaluate_expert(make_env("pick_place", num_envs=256, seed=0), expert, episodes=512)
    result.success_rate        # fraction of episodes with info["success"] at their end
    result.obs_state, result.actions   # with record=True: valid (state, label) pairs

Each row runs a fixed quota of episodes so short episodes are not over-counted; finished rows
are reset explicitly (the env never auto-resets).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from odsd.envs.protocol import VecEnv, safe_hold_action
from odsd.envs.spec import STATE_KEY
from odsd.experts.failures import failure_name
from odsd.experts.protocol import Expert
from odsd.experts.validate import validate_query


@dataclass
class ExpertEvaluation:
    """Outcome of :func:`evaluate_expert`."""

    episodes: int
    successes: int
    lengths: list[int]
    failures: Counter[str] = field(default_factory=Counter)
    obs_state: torch.Tensor | None = None
    actions: torch.Tensor | None = None

    @property
    def success_rate(self) -> float:
        """Successful episodes / episodes."""
        return self.successes / max(1, self.episodes)

    @property
    def mean_length(self) -> float:
        """Mean episode length in steps."""
        return sum(self.lengths) / max(1, len(self.lengths))


def evaluate_expert(
    env: VecEnv, expert: Expert, episodes: int, *, seed: int | None = None, record: bool = False
) -> ExpertEvaluation:
    """Let ``expert`` act alone for ``episodes`` episodes spread over the env rows."""
    spec = env.spec
    n, device = spec.num_envs, spec.device
    quota = torch.full((n,), episodes // n, dtype=torch.long, device=device)
    quota[: episodes % n] += 1
    all_ids = torch.arange(n, device=device)
    obs, info = env.reset(seed=seed)
    expert.reset(all_ids, obs, info)
    active = quota > 0
    result = ExpertEvaluation(episodes=0, successes=0, lengths=[])
    states: list[torch.Tensor] = []
    labels: list[torch.Tensor] = []
    while bool(active.any()):
        query = validate_query(expert.act(obs, env_ids=all_ids), spec, n)
        for code in query.failure[active & ~query.valid].tolist():
            result.failures[failure_name(code)] += 1
        if record:
            keep = active & query.valid
            states.append(spec.flatten_observation(obs)[STATE_KEY][keep])
            labels.append(query.action[keep])
        action = torch.where(query.valid.unsqueeze(1), query.action, safe_hold_action(env))
        obs, _, terminated, truncated, info = env.step(action)
        done = active & (terminated | truncated)
        if bool(done.any()):
            ids = torch.nonzero(done).flatten()
            result.episodes += ids.numel()
            result.successes += int(info["success"][ids].sum())
            result.lengths += info["episode_step"][ids].tolist() if "episode_step" in info else []
            quota[ids] -= 1
            active = quota > 0
            again = ids[active[ids]]
            if again.numel():
                obs, info = env.reset(env_ids=again)
                expert.reset(again, obs, info)
    if record:
        result.obs_state, result.actions = torch.cat(states), torch.cat(labels)
    return result
