"""EnvSpec validation, flattening, features and layout hashing."""

from __future__ import annotations

import pytest
import torch

from odsd.envs import (
    ENVIRONMENT_STATE_KEY,
    STATE_KEY,
    ActionSpec,
    EnvContractError,
    EnvSpec,
    EnvSpecError,
    ObservationKey,
)
from odsd.errors import OdsdError


def make_spec(**overrides: object) -> EnvSpec:
    fields: dict[str, object] = {
        "task": "toy",
        "task_description": "a toy task",
        "observation": (
            ObservationKey("pos", (3,), names=("x", "y", "z")),
            ObservationKey("goal", (2,)),
        ),
        "action": ActionSpec(dim=2, low=(-1.0, -2.0), high=(1.0, 2.0), names=("a", "b"), kind="joint_vel"),
        "step_dt": 0.1,
        "max_episode_steps": 10,
        "num_envs": 4,
        "environment_state_keys": ("goal",),
    }
    fields.update(overrides)
    return EnvSpec(**fields)  # type: ignore[arg-type]


def test_valid_spec_derives_control_hz_and_state_dim() -> None:
    spec = make_spec()
    assert spec.control_hz == pytest.approx(10.0)
    assert spec.state_dim == 5
    assert spec.device == torch.device("cpu")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ActionSpec(dim=2, low=(0.0, 1.0), high=(1.0, 1.0)), "low < high"),
        (lambda: ActionSpec(dim=2, low=(-1.0, -1.0), high=(1.0, float("inf"))), "finite"),
        (lambda: ActionSpec(dim=2, low=-1.0, high=1.0, names=("only_one",)), "1 names for 2"),
        (lambda: ActionSpec(dim=0, low=(), high=()), "positive"),
        (lambda: ObservationKey("pos", (0,)), "positive"),
        (lambda: ObservationKey("pos", (2,), names=("a", "a")), "unique"),
        (lambda: ObservationKey("pos", (2,), dtype="complex64"), "unsupported dtype"),
        (lambda: make_spec(step_dt=0.0), "step_dt"),
        (lambda: make_spec(control_hz=20.0), "disagrees"),
        (lambda: make_spec(num_envs=0), "positive"),
        (lambda: make_spec(observation=(ObservationKey("a", (1,)), ObservationKey("a", (1,)))), "duplicate"),
        (lambda: make_spec(state_keys=("nope",)), "unknown observation keys"),
    ],
)
def test_invalid_specs_raise_one_line_errors(build: object, message: str) -> None:
    with pytest.raises(EnvSpecError, match=message) as info:
        build()  # type: ignore[operator]
    assert isinstance(info.value, OdsdError)
    assert "\n" not in str(info.value)


def test_scalar_bounds_broadcast() -> None:
    action = ActionSpec(dim=3, low=-1.0, high=1.0)  # type: ignore[arg-type]
    assert action.low == (-1.0, -1.0, -1.0)
    assert action.element_names() == ["action.0", "action.1", "action.2"]


def test_flatten_and_features_agree() -> None:
    spec = make_spec()
    obs = {"pos": torch.arange(12.0).reshape(4, 3), "goal": torch.ones(4, 2, dtype=torch.float32)}
    flat = spec.flatten_observation(obs)
    assert flat[STATE_KEY].shape == (4, 5) and flat[STATE_KEY].dtype == torch.float32
    assert torch.equal(flat[STATE_KEY][:, :3], obs["pos"])
    assert flat[ENVIRONMENT_STATE_KEY].shape == (4, 2)
    features = spec.features()
    assert features[STATE_KEY] == {
        "dtype": "float32",
        "shape": (5,),
        "names": ["x", "y", "z", "goal.0", "goal.1"],
    }
    assert features[ENVIRONMENT_STATE_KEY]["shape"] == (2,)
    assert features["action"] == {"dtype": "float32", "shape": (2,), "names": ["a", "b"]}


def test_layout_hash_is_stable_and_sensitive() -> None:
    base = make_spec()
    assert base.layout_hash() == make_spec().layout_hash()
    assert base.layout_hash() == make_spec(num_envs=64, step_dt=0.05).layout_hash()
    changed = [
        make_spec(
            action=ActionSpec(dim=2, low=(-1.0, -2.0), high=(1.0, 3.0), names=("a", "b"), kind="joint_vel")
        ),
        make_spec(
            action=ActionSpec(dim=2, low=(-1.0, -2.0), high=(1.0, 2.0), names=("b", "a"), kind="joint_vel")
        ),
        make_spec(
            action=ActionSpec(dim=2, low=(-1.0, -2.0), high=(1.0, 2.0), names=("a", "b"), kind="joint_pos")
        ),
        make_spec(
            observation=(ObservationKey("pos", (3,), names=("x", "y", "z")), ObservationKey("goal", (3,)))
        ),
        make_spec(state_keys=("goal", "pos")),
    ]
    hashes = {spec.layout_hash() for spec in changed}
    assert base.layout_hash() not in hashes and len(hashes) == len(changed)


def test_validate_observation_catches_contract_breaks() -> None:
    spec = make_spec()
    good = {"pos": torch.zeros(4, 3), "goal": torch.zeros(4, 2)}
    spec.validate_observation(good)
    with pytest.raises(EnvContractError, match="missing"):
        spec.validate_observation({"pos": torch.zeros(4, 3)})
    with pytest.raises(EnvContractError, match="expected"):
        spec.validate_observation({**good, "pos": torch.zeros(3, 3)})
    with pytest.raises(EnvContractError, match="dtype"):
        spec.validate_observation({**good, "pos": torch.zeros(4, 3, dtype=torch.float64)})
    with pytest.raises(EnvContractError, match="non-finite"):
        spec.validate_observation({**good, "goal": torch.full((4, 2), float("nan"))})
    with pytest.raises(EnvContractError, match="expected"):
        spec.check_action(torch.zeros(4, 3))
