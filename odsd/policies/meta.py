"""`PolicyMeta`: the pydantic model of a snapshot's ``policy.json``.

::

    meta = PolicyMeta.for_env(env.spec, architecture="reference_mlp", arch_kwargs=model.arch_kwargs())
    meta.layout_hash == env.spec.layout_hash()
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from odsd.envs.spec import EnvSpec

FORMAT_VERSION = 1


class NormalizationStats(BaseModel):
    """Frozen statistics the policy was trained with (also stored as model buffers)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    obs_mean: list[float] | None = None
    obs_std: list[float] | None = None
    action_low: list[float] | None = None
    action_high: list[float] | None = None


class PolicyMeta(BaseModel):
    """Everything needed to rebuild and trust a snapshot, minus the weights."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = FORMAT_VERSION
    architecture: str
    arch_kwargs: dict[str, Any] = Field(default_factory=dict)
    task: str | None = None
    layout: dict[str, Any]
    layout_hash: str
    normalization: NormalizationStats = Field(default_factory=NormalizationStats)
    version: int | None = None
    parent_watermark: int | None = None
    stats_version: str | None = None
    weights_sha256: str | None = None
    created: datetime = Field(default_factory=lambda: datetime.now(UTC))
    extra: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def for_env(
        cls, spec: EnvSpec, *, architecture: str, arch_kwargs: dict[str, Any], **fields: Any
    ) -> PolicyMeta:
        """Metadata whose layout (and hash) is taken from ``spec``."""
        return cls(
            architecture=architecture,
            arch_kwargs=arch_kwargs,
            task=spec.task,
            layout=spec.layout(),
            layout_hash=spec.layout_hash(),
            **fields,
        )
