"""Per-row validation of expert queries against the env's action contract.

::

    query = validate_query(expert.act(obs, env_ids=ids), env.spec, n_rows=len(ids))
    query.valid      # [n] bool: expert said valid AND finite AND within bounds
    query.failure    # [n] int32: first reason per row (0 = none)

Row problems never spread: a NaN row or an out-of-bounds row becomes ``valid=False`` with its
reason, and its action is replaced by a neutral in-bounds value so no NaN reaches downstream
statistics. Problems of the whole query (not a tensor, wrong batch size or action dim, non-float
dtype, wrong device, malformed ``valid``/``confidence``/``failure``, unknown failure codes) raise
:class:`~odsd.experts.errors.ExpertContractError` with a one-line message.
"""

from __future__ import annotations

import torch

from odsd.envs.spec import EnvSpec, same_device
from odsd.experts.errors import ExpertContractError
from odsd.experts.failures import Failure, is_registered
from odsd.experts.query import ExpertQuery

BOUNDS_ATOL = 1e-5


def _check_vector(
    name: str, value: torch.Tensor | None, n_rows: int, spec: EnvSpec, kinds: tuple[str, ...]
) -> None:
    if value is None:
        return
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != (n_rows,):
        got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise ExpertContractError(f"expert {name} must be a [{n_rows}] tensor, got {got}")
    kind = "bool" if value.dtype == torch.bool else "float" if value.is_floating_point() else "int"
    if kind not in kinds:
        raise ExpertContractError(f"expert {name} has dtype {value.dtype}, expected {'/'.join(kinds)}")
    if not same_device(value.device, spec.device):
        raise ExpertContractError(f"expert {name} is on {value.device}, env runs on {spec.device}")


def validate_query(query: ExpertQuery, spec: EnvSpec, n_rows: int) -> ExpertQuery:
    """Check ``query`` for ``n_rows`` rows of ``spec``; return a new, sanitized query."""
    if not isinstance(query, ExpertQuery):
        raise ExpertContractError(f"expert returned {type(query).__name__}, expected ExpertQuery")
    action = query.action
    expected = (n_rows, spec.action.dim)
    if not isinstance(action, torch.Tensor):
        raise ExpertContractError(f"expert action must be a tensor, got {type(action).__name__}")
    if tuple(action.shape) != expected:
        raise ExpertContractError(f"expert action has shape {tuple(action.shape)}, expected {expected}")
    if not action.is_floating_point():
        raise ExpertContractError(f"expert action has dtype {action.dtype}, expected a float dtype")
    if not same_device(action.device, spec.device):
        raise ExpertContractError(f"expert action is on {action.device}, env runs on {spec.device}")
    _check_vector("valid", query.valid, n_rows, spec, ("bool",))
    if query.valid is None:
        raise ExpertContractError("expert query has no valid mask")
    _check_vector("confidence", query.confidence, n_rows, spec, ("float",))
    _check_vector("failure", query.failure, n_rows, spec, ("int",))

    action = action.to(torch.float32)
    low, high = spec.action.low_tensor(spec.device), spec.action.high_tensor(spec.device)
    finite = torch.isfinite(action).all(dim=1)
    in_bounds = ((action >= low - BOUNDS_ATOL) & (action <= high + BOUNDS_ATOL)).all(dim=1)

    own = torch.zeros(n_rows, dtype=torch.int32, device=spec.device)
    if query.failure is not None:
        own = query.failure.to(torch.int32)
        unknown = sorted({int(c) for c in torch.unique(own).tolist() if not is_registered(int(c))})
        if unknown:
            raise ExpertContractError(f"expert reported unregistered failure codes {unknown}")
    own = torch.where(query.valid, torch.zeros_like(own), own)
    own = torch.where(~query.valid & (own == 0), torch.full_like(own, Failure.UNSPECIFIED), own)

    failure = own
    failure = torch.where((failure == 0) & ~finite, torch.full_like(failure, Failure.NON_FINITE), failure)
    failure = torch.where(
        (failure == 0) & finite & ~in_bounds, torch.full_like(failure, Failure.OUT_OF_BOUNDS), failure
    )
    valid = failure == 0

    neutral = torch.clamp(torch.zeros_like(low), low, high).expand_as(action)
    clean = torch.where(valid.unsqueeze(1), torch.clamp(action, low, high), neutral)
    confidence = None
    if query.confidence is not None:
        confidence = torch.where(
            valid, query.confidence.to(torch.float32), torch.zeros_like(query.confidence, dtype=torch.float32)
        )
    return ExpertQuery(
        action=clean, valid=valid, confidence=confidence, failure=failure, metadata=dict(query.metadata)
    )
