"""EnvSpec validation, flattening, features and layout hashing."""

from __future__ import annotations

import pytest
import torch

from odsd.envs import (
    ENVIRONMENT_STATE_KEY,
    STATE_KEY,
    ActionSpec,
    CameraSpec,
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


# -- cameras ------------------------------------------------------------------------------------

TOP = CameraSpec("top", 8, 6, description="over the table")
WRIST = CameraSpec("wrist", 4, 5, channels=1, depth=True)


def camera_obs(spec: EnvSpec, n: int = 4) -> dict[str, torch.Tensor]:
    obs = {"pos": torch.zeros(n, 3), "goal": torch.zeros(n, 2)}
    for camera in spec.cameras:
        obs[camera.key] = torch.zeros(n, *camera.shape, dtype=torch.uint8)
        if camera.depth:
            obs[camera.depth_key] = torch.zeros(n, *camera.depth_shape, dtype=torch.uint16)
    return obs


def test_camera_spec_keys_and_shapes() -> None:
    assert TOP.key == "observation.images.top" and TOP.depth_key == "observation.depth.top"
    assert TOP.shape == (8, 6, 3) and WRIST.depth_shape == (4, 5, 1)
    spec = make_spec(cameras=(TOP, WRIST))
    assert spec.camera_keys == (
        "observation.images.top",
        "observation.images.wrist",
        "observation.depth.wrist",
    )
    assert make_spec().camera_keys == () and make_spec().cameras == ()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: CameraSpec("", 8, 8), "plain name"),
        (lambda: CameraSpec("Top", 8, 8), "plain name"),
        (lambda: CameraSpec("top.view", 8, 8), "plain name"),
        (lambda: CameraSpec("top", 0, 8), "height must be a positive integer"),
        (lambda: CameraSpec("top", 8, -1), "width must be a positive integer"),
        (lambda: CameraSpec("top", 8.0, 8), "height must be a positive integer"),
        (lambda: CameraSpec("top", 8, 8, channels=4), "channels must be 1 or 3"),
        (lambda: CameraSpec("top", 8, 8, depth="yes"), "depth must be true or false"),
        (lambda: make_spec(cameras=(TOP, CameraSpec("top", 4, 4))), "duplicate camera names"),
        (lambda: make_spec(cameras=("top",)), "must be CameraSpec"),
        (lambda: make_spec(cameras=(CameraSpec("pos", 4, 4),)), "also observation keys"),
        (
            lambda: make_spec(
                observation=(
                    ObservationKey("goal", (2,)),
                    ObservationKey("observation.images.top", (4, 4, 3)),
                ),
            ),
            "camera field name",
        ),
        (lambda: make_spec(cameras=(TOP,), state_keys=("pos", "top")), "name cameras"),
        (
            lambda: make_spec(cameras=(TOP,), state_keys=("pos", "observation.images.top")),
            "name cameras",
        ),
        (
            lambda: make_spec(
                observation=(
                    ObservationKey("pos", (3,)),
                    ObservationKey("goal", (2,)),
                    ObservationKey("pixels", (4, 4, 3), dtype="uint8"),
                ),
            ),
            "image-like observation keys",
        ),
    ],
)
def test_invalid_cameras_raise_one_line_errors(build: object, message: str) -> None:
    with pytest.raises(EnvSpecError, match=message) as info:
        build()  # type: ignore[operator]
    assert isinstance(info.value, OdsdError)
    assert "\n" not in str(info.value)


def test_camera_features_follow_the_contract() -> None:
    spec = make_spec(cameras=(TOP, WRIST))
    features = spec.features()
    assert features["observation.images.top"] == {
        "dtype": "uint8",
        "shape": (8, 6, 3),
        "names": ["height", "width", "channels"],
        "kind": "image",
    }
    assert features["observation.images.wrist"]["shape"] == (4, 5, 1)
    assert features["observation.depth.wrist"] == {
        "dtype": "uint16",
        "shape": (4, 5, 1),
        "names": ["height", "width", "channels"],
        "kind": "depth",
    }
    assert "observation.depth.top" not in features
    # the vectors are what they are without cameras, and nothing else gained a kind
    plain = make_spec().features()
    for key in (STATE_KEY, ENVIRONMENT_STATE_KEY, "action"):
        assert features[key] == plain[key] and "kind" not in plain[key]


def test_flatten_passes_camera_tensors_through() -> None:
    spec = make_spec(cameras=(TOP, WRIST))
    obs = camera_obs(spec)
    obs["observation.images.top"][1, 2, 3] = 7
    flat = spec.flatten_observation(obs)
    assert flat[STATE_KEY].shape == (4, 5)
    assert flat["observation.images.top"] is obs["observation.images.top"]
    assert flat["observation.depth.wrist"].dtype == torch.uint16
    assert set(flat) == {STATE_KEY, ENVIRONMENT_STATE_KEY, *spec.camera_keys}
    del obs["observation.images.wrist"]
    with pytest.raises(EnvContractError, match="missing camera key"):
        spec.flatten_observation(obs)


def test_validate_observation_checks_camera_tensors() -> None:
    spec = make_spec(cameras=(TOP, WRIST))
    good = camera_obs(spec)
    spec.validate_observation(good)
    top = "observation.images.top"
    bad = [
        ({k: v for k, v in good.items() if k != top}, "missing camera key"),
        ({**good, top: torch.zeros(4, 6, 8, 3, dtype=torch.uint8)}, r"expected \(4, 8, 6, 3\)"),
        ({**good, top: torch.zeros(4, 8, 6, dtype=torch.uint8)}, "expected"),
        ({**good, top: torch.zeros(3, 8, 6, 3, dtype=torch.uint8)}, "expected"),
        ({**good, top: torch.zeros(4, 8, 6, 3)}, "dtype torch.float32, expected torch.uint8"),
        ({**good, "observation.depth.wrist": torch.zeros(4, 4, 5, 1, dtype=torch.int32)}, "torch.uint16"),
        ({**good, top: torch.zeros(4, 8, 6, 3, dtype=torch.uint8, device="meta")}, "is on meta"),
    ]
    for obs, message in bad:
        with pytest.raises(EnvContractError, match=message):
            spec.validate_observation(obs)


# Digests of specs without cameras, computed before cameras existed (issue #17): adding the
# camera fields must not change any of them (stores, snapshots and resumed runs compare them).
PICK_PLACE_HASH = "0c6c014ee151ea1f453216a69a6b0cf43b0836894d2347e19d6e86250be8b05a"
TOY_HASH = "5108c077290039ada2b93f8bfeb1444f93c059ef9716c09e90dcc8d43a8257fa"


def test_layout_hash_without_cameras_is_unchanged() -> None:
    from odsd.envs import make_env

    assert make_spec().layout_hash() == TOY_HASH
    assert make_env("pick_place", num_envs=2).spec.layout_hash() == PICK_PLACE_HASH
    assert "cameras" not in make_spec().layout()


def test_layout_hash_covers_cameras() -> None:
    base = make_spec(cameras=(TOP,))
    assert base.layout_hash() == make_spec(cameras=(TOP,), num_envs=9).layout_hash()
    assert base.layout_hash() == make_spec(cameras=(CameraSpec("top", 8, 6, description="x"),)).layout_hash()
    variants = [
        make_spec(),
        make_spec(cameras=(CameraSpec("top", 8, 7),)),
        make_spec(cameras=(CameraSpec("top", 8, 6, channels=1),)),
        make_spec(cameras=(CameraSpec("top", 8, 6, depth=True),)),
        make_spec(cameras=(CameraSpec("side", 8, 6),)),
        make_spec(cameras=(TOP, WRIST)),
        make_spec(cameras=(WRIST, TOP)),
    ]
    hashes = {spec.layout_hash() for spec in variants}
    assert base.layout_hash() not in hashes and len(hashes) == len(variants)
