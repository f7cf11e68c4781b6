"""Per-row expert validation: bad rows are isolated, whole-query contract breaks raise."""

from __future__ import annotations

import pytest
import torch

from odsd.envs import make_env
from odsd.envs.spec import EnvSpec
from odsd.experts import (
    ExpertContractError,
    ExpertQuery,
    Failure,
    failure_name,
    failure_reasons,
    register_failure_reason,
    validate_query,
)
from odsd.experts.errors import ExpertError


@pytest.fixture
def spec() -> EnvSpec:
    return make_env("pick_place", num_envs=4, seed=0).spec


def query(action: torch.Tensor, **kw: object) -> ExpertQuery:
    valid = kw.pop("valid", torch.ones(action.shape[0], dtype=torch.bool))
    return ExpertQuery(action=action, valid=valid, **kw)  # type: ignore[arg-type]


def test_nan_and_out_of_bounds_rows_do_not_touch_other_rows(spec: EnvSpec) -> None:
    action = torch.full((4, 4), 0.5)
    action[1, 2] = float("nan")
    action[2, 0] = 1.5
    action[3, 3] = 1.0 + 1e-7  # inside the tolerance: clamped, valid
    out = validate_query(query(action, metadata={"k": 1}), spec, 4)
    assert out.valid.tolist() == [True, False, False, True]
    assert out.failure.tolist() == [0, Failure.NON_FINITE, Failure.OUT_OF_BOUNDS, 0]
    assert torch.equal(out.action[0], action[0])
    assert torch.isfinite(out.action).all() and (out.action.abs() <= 1).all()
    assert torch.equal(out.action[1], torch.zeros(4))
    assert out.metadata == {"k": 1}


def test_expert_reported_failures_are_kept(spec: EnvSpec) -> None:
    failure = torch.tensor([0, Failure.UNREACHABLE, 0, 0], dtype=torch.int32)
    valid = torch.tensor([True, False, False, True])
    out = validate_query(query(torch.zeros(4, 4), valid=valid, failure=failure), spec, 4)
    assert out.valid.tolist() == [True, False, False, True]
    assert [failure_name(c) for c in out.failure.tolist()] == ["none", "unreachable", "unspecified", "none"]


def test_confidence_is_zeroed_on_invalid_rows(spec: EnvSpec) -> None:
    action = torch.zeros(4, 4)
    action[0, 0] = 3.0
    out = validate_query(query(action, confidence=torch.full((4,), 0.9)), spec, 4)
    assert out.confidence.tolist() == pytest.approx([0.0, 0.9, 0.9, 0.9])


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (lambda: query(torch.zeros(3, 4)), r"shape \(3, 4\), expected \(4, 4\)"),
        (lambda: query(torch.zeros(4, 3)), r"shape \(4, 3\), expected \(4, 4\)"),
        (lambda: query(torch.zeros(4, 4, dtype=torch.long)), "float dtype"),
        (lambda: query(torch.zeros(4, 4, device="meta")), "is on meta"),
        (lambda: query(torch.zeros(4, 4), valid=torch.ones(4)), "valid has dtype"),
        (lambda: query(torch.zeros(4, 4), valid=torch.ones(3, dtype=torch.bool)), r"valid must be a \[4\]"),
        (lambda: query(torch.zeros(4, 4), failure=torch.full((4,), 12345)), "unregistered failure codes"),
        (
            lambda: ExpertQuery(action=[[0.0] * 4] * 4, valid=torch.ones(4, dtype=torch.bool)),
            "must be a tensor",
        ),  # type: ignore[arg-type]
    ],
)
def test_contract_violations_raise_one_clear_line(spec: EnvSpec, bad: object, message: str) -> None:
    with pytest.raises(ExpertContractError, match=message) as info:
        validate_query(bad(), spec, 4)  # type: ignore[operator]
    assert "\n" not in str(info.value)


def test_float64_actions_are_accepted_as_float32(spec: EnvSpec) -> None:
    out = validate_query(query(torch.zeros(4, 4, dtype=torch.float64)), spec, 4)
    assert out.action.dtype == torch.float32 and out.valid.all()


def test_failure_registry() -> None:
    register_failure_reason(1000, "odsd_test_reason", "for the test")
    register_failure_reason(1000, "odsd_test_reason")  # idempotent
    assert failure_reasons()[1000] == "odsd_test_reason"
    with pytest.raises(ExpertError, match="already registered"):
        register_failure_reason(1000, "other")
    with pytest.raises(ExpertError, match="already registered"):
        register_failure_reason(1001, "non_finite")
    assert failure_name(424242) == "unknown_424242"
    assert [failure_name(i) for i in range(7)] == [
        "none",
        "non_finite",
        "out_of_bounds",
        "contract",
        "unreachable",
        "timeout",
        "planner_failed",
    ]
