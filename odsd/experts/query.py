"""`ExpertSpec` and `ExpertQuery`: what an expert is and what one query returns.

::

    query = ExpertQuery(
        action=torch.zeros(n, A),                  # [n, A] in the env's raw action space
        valid=torch.ones(n, dtype=torch.bool),     # [n]
        confidence=None,                            # or [n] float32
        failure=None,                               # or [n] int32 codes (odsd.experts.failures)
        metadata={"phase": torch.zeros(n, dtype=torch.long)},
    )
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

ExpertKind = Literal["planner", "policy", "demo"]


@dataclass(frozen=True)
class ExpertSpec:
    """Identity of an expert. ``state_conditioned`` experts can label any state (DAgger)."""

    name: str
    version: str
    kind: ExpertKind
    state_conditioned: bool


@dataclass
class ExpertQuery:
    """One batched expert answer; see the module docstring for shapes."""

    action: torch.Tensor
    valid: torch.Tensor
    confidence: torch.Tensor | None = None
    failure: torch.Tensor | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
