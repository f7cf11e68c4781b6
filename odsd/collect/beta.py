"""Beta schedules: the probability that the expert acts, a pure function of the iteration counter."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class BetaSchedule(BaseModel):
    """``beta_k`` for iteration ``k``.

    - ``exponential``: ``max(beta_min, init_beta * decay**k)``
    - ``linear``: ``max(beta_min, init_beta - decay * k)``
    - ``constant``: ``init_beta``

    >>> BetaSchedule(init_beta=1.0, decay=0.5, beta_min=0.1).value(3)
    0.125
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["exponential", "linear", "constant"] = "exponential"
    init_beta: float = Field(default=1.0, ge=0.0, le=1.0)
    decay: float = Field(default=0.5, ge=0.0)
    beta_min: float = Field(default=0.0, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _check(self) -> BetaSchedule:
        if self.kind == "exponential" and self.decay > 1.0:
            raise ValueError(f"exponential decay must be in [0, 1], got {self.decay}")
        if self.beta_min > self.init_beta and self.kind != "constant":
            raise ValueError(f"beta_min {self.beta_min} exceeds init_beta {self.init_beta}")
        return self

    def value(self, k: int) -> float:
        if k < 0:
            raise ValueError(f"iteration must be >= 0, got {k}")
        if self.kind == "constant":
            return self.init_beta
        if self.kind == "linear":
            return max(self.beta_min, self.init_beta - self.decay * k)
        return max(self.beta_min, self.init_beta * self.decay**k)
