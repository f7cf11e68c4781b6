"""`pick_place_cam`: pick_place's physics with rendered top and wrist cameras."""

from __future__ import annotations

import pytest
import torch

from odsd.envs import ENVIRONMENT_STATE_KEY, STATE_KEY, EnvSpecError, make_env
from odsd.envs.tasks.pick_place_cam import CAMERA_NAMES, PickPlaceCamEnv
from odsd.errors import OdsdError
from odsd.experts import make_expert
from odsd.experts.planners import PickPlacePlanner

TOP, WRIST = "observation.images.top", "observation.images.wrist"
SIZE = 48  # small frames keep the tests quick; the geometry does not depend on the size


def cam_env(num_envs: int = 4, seed: int = 0, **kwargs: object) -> PickPlaceCamEnv:
    env = make_env("pick_place_cam", num_envs=num_envs, seed=seed, image_size=SIZE, **kwargs)
    assert isinstance(env, PickPlaceCamEnv)
    return env


def frames(obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in obs.items() if k.startswith(("observation.images.", "observation.depth."))}


def set_rows(env: PickPlaceCamEnv, **fields: torch.Tensor) -> dict[str, torch.Tensor]:
    """Overwrite physical state fields of every row through set_state; the new observation."""
    state = env.get_state()
    state.update(fields)
    return env.set_state(state)


def test_spec_cameras_state_keys_and_features() -> None:
    env = cam_env()
    spec = env.spec
    assert spec.task == "pick_place_cam"
    assert [c.name for c in spec.cameras] == list(CAMERA_NAMES)
    assert all(c.description for c in spec.cameras)
    # the student sees proprioception and pixels; the cube and goal are privileged
    assert spec.state_keys == ("ee_pos", "gripper")
    assert spec.environment_state_keys == ("cube_pos", "goal_pos")
    assert set(make_env("pick_place", num_envs=1).spec.observation_keys) == set(spec.observation_keys)
    features = spec.features()
    assert features[STATE_KEY]["shape"] == (4,)
    assert features[TOP] == {
        "dtype": "uint8",
        "shape": (SIZE, SIZE, 3),
        "names": ["height", "width", "channels"],
        "kind": "image",
    }
    assert make_env("pick_place_cam", num_envs=1, ee_inertia=0.5).spec.state_keys == (
        "ee_pos",
        "gripper",
        "ee_vel",
    )
    noisy = make_env("pick_place_cam", num_envs=1, cube_obs_noise=0.004).spec
    assert noisy.environment_state_keys == ("cube_true_pos", "goal_pos")


def test_frames_have_the_declared_shape_dtype_and_device() -> None:
    env = cam_env(num_envs=3)
    obs, _ = env.reset(seed=1)
    env.spec.validate_observation(obs)
    for key in (TOP, WRIST):
        assert obs[key].shape == (3, SIZE, SIZE, 3) and obs[key].dtype == torch.uint8
        assert obs[key].device == env.spec.device and obs[key].is_contiguous()
    flat = env.spec.flatten_observation(obs)
    assert set(flat) == {STATE_KEY, ENVIRONMENT_STATE_KEY, TOP, WRIST}
    obs, *_ = env.step(env.safe_hold_action())
    env.spec.validate_observation(obs)


def test_options_choose_cameras_size_and_depth() -> None:
    env = make_env("pick_place_cam", num_envs=2, seed=0, cameras=["wrist"], image_size=[32, 40], depth=True)
    obs, _ = env.reset(seed=0)
    assert env.spec.camera_keys == (WRIST, "observation.depth.wrist")
    assert TOP not in obs and obs[WRIST].shape == (2, 32, 40, 3)
    depth = obs["observation.depth.wrist"]
    assert depth.shape == (2, 32, 40, 1) and depth.dtype == torch.uint16
    # millimetres along the view axis: the table is (ee height + 6 cm) away, the fingers nearer
    ee_z_mm = obs["ee_pos"][:, 2] * 1000 + 60
    farthest = depth.to(torch.int32).amax(dim=(1, 2, 3)).to(torch.float32)
    assert torch.allclose(farthest, ee_z_mm, atol=1.0)
    assert int(depth.to(torch.int32).min()) >= 20
    top = make_env("pick_place_cam", num_envs=1, cameras=("top",), depth=True).reset(seed=0)[0]
    assert int(top["observation.depth.top"].to(torch.int32).max()) == 500  # the eye is 0.5 m above the table


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cameras": ["side"]}, "cameras must be distinct names"),
        ({"cameras": []}, "at least one"),
        ({"cameras": ["top", "top"]}, "distinct"),
        ({"cameras": "top"}, "must be a list"),
        ({"image_size": 4}, "image_size"),
        ({"image_size": [32]}, "image_size"),
        ({"image_size": "96"}, "image_size"),
        ({"depth": "yes"}, "depth must be true or false"),
        ({"no_such_option": 1}, "unknown task arguments"),
        ({"action_noise": "x"}, "action_noise must be a finite number"),
    ],
)
def test_bad_options_are_one_line_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(EnvSpecError, match=message) as info:
        make_env("pick_place_cam", num_envs=1, **kwargs)
    assert isinstance(info.value, OdsdError) and "\n" not in str(info.value)


def test_same_seed_same_frames_and_rows_differ() -> None:
    a, b = cam_env(seed=5), cam_env(seed=5)
    hold = a.safe_hold_action()
    for _ in range(3):
        obs_a, *_ = a.step(hold)
        obs_b, *_ = b.step(hold)
    for key in (TOP, WRIST):
        assert torch.equal(obs_a[key], obs_b[key])
        for i in range(1, 4):
            assert not torch.equal(obs_a[key][0], obs_a[key][i])
    other = cam_env(seed=6).reset(seed=6)[0]
    assert not torch.equal(other[TOP], a.reset(seed=5)[0][TOP])
    # row i of reset(seed) is row i whatever the batch size: the looks come from the row's stream
    small = make_env("pick_place_cam", num_envs=2, seed=5, image_size=SIZE).reset(seed=5)[0]
    assert torch.equal(small[TOP], a.reset(seed=5)[0][TOP][:2])


def test_looks_are_drawn_without_disturbing_the_physics_stream() -> None:
    cam, plain = cam_env(seed=3), make_env("pick_place", num_envs=4, seed=3)
    action = torch.tensor([[0.3, -0.2, -0.5, -1.0]]).repeat(4, 1)
    for _ in range(10):
        obs_cam, reward_cam, *_ = cam.step(action)
        obs_plain, reward_plain, *_ = plain.step(action)
    for key, value in obs_plain.items():
        assert torch.equal(obs_cam[key], value), key
    assert torch.equal(reward_cam, reward_plain)


def test_moving_and_lifting_the_cube_changes_both_views() -> None:
    env = cam_env(num_envs=1)
    obs = env.reset(seed=0)[0]
    ee = obs["ee_pos"].clone()
    cube = torch.tensor([[ee[0, 0] + 0.01, ee[0, 1], 0.02]])  # under the wrist camera
    resting = set_rows(env, cube_pos=cube)
    lifted = set_rows(env, cube_pos=cube + torch.tensor([[0.0, 0.0, 0.05]]))
    moved = set_rows(env, cube_pos=cube + torch.tensor([[0.03, 0.0, 0.0]]))
    for key in (TOP, WRIST):
        assert not torch.equal(resting[key], lifted[key]), f"{key}: lifting is invisible"
        assert not torch.equal(resting[key], moved[key]), f"{key}: moving is invisible"
    # a lifted cube is whiter from above (the height cue of the top view)
    assert lifted[TOP].to(torch.int32).sum() > resting[TOP].to(torch.int32).sum()
    # and nearer the wrist camera, so it covers more of the wrist view
    red = lambda img: ((img[..., 0].int() - img[..., 2].int()) > 80).sum()  # noqa: E731
    assert red(lifted[WRIST]) > red(resting[WRIST])


def test_the_gripper_opening_is_visible() -> None:
    env = cam_env(num_envs=1)
    env.reset(seed=0)
    opened = set_rows(env, gripper=torch.ones(1, 1))
    closed = set_rows(env, gripper=torch.zeros(1, 1))
    for key in (TOP, WRIST):
        assert not torch.equal(opened[key], closed[key]), f"{key}: open and closed look the same"
    # in the wrist view the fingers reach further into the middle column band when closed
    band = slice(SIZE // 2 - SIZE // 8, SIZE // 2 + SIZE // 8)

    def blue(img: torch.Tensor) -> torch.Tensor:
        return ((img[0, :, :, 2].int() - img[0, :, :, 0].int()) > 60)[:, band].sum()

    assert blue(closed[WRIST]) > blue(opened[WRIST])


def test_a_partial_reset_changes_only_the_reset_rows_frames() -> None:
    env = cam_env(num_envs=4)
    env.reset(seed=0)
    before, *_ = env.step(env.safe_hold_action())
    after, _ = env.reset(env_ids=torch.tensor([2]))
    full = env.render()
    for key in (TOP, WRIST):
        keep = torch.tensor([0, 1, 3])
        assert torch.equal(after[key][keep], before[key][keep])
        assert not torch.equal(after[key][2], before[key][2])
        assert torch.equal(after[key], full[key])  # the partial re-render equals a full one
    # the tensors handed out earlier are not modified in place
    assert not torch.equal(before[TOP][2], after[TOP][2])


def test_partial_reset_with_depth() -> None:
    env = cam_env(num_envs=3, depth=True)
    before = env.reset(seed=0)[0]
    after = env.reset(env_ids=torch.tensor([0]))[0]
    key = "observation.depth.top"
    assert after[key].dtype == torch.uint16
    assert torch.equal(after[key][1:], before[key][1:])
    assert torch.equal(after[key], env.render()[key])


def test_state_round_trip_reproduces_frames() -> None:
    env = cam_env(num_envs=2)
    env.reset(seed=0)
    state = env.get_state()
    assert "look" in state
    first, *_ = env.step(env.safe_hold_action())
    env.reset(seed=9)
    env.set_state(state)
    again, *_ = env.step(env.safe_hold_action())
    for key in (TOP, WRIST):
        assert torch.equal(first[key], again[key])


def run_planner(task: str, seed: int, rows: int, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    env = make_env(task, num_envs=rows, seed=seed, **({"image_size": 32} if task == "pick_place_cam" else {}))
    expert = make_expert("planner", env.spec)
    obs, _ = env.reset(seed=seed)
    ids = torch.arange(rows)
    for _ in range(steps):
        obs, _r, terminated, truncated, info = env.step(expert.act(obs, env_ids=ids).action)
        if bool((terminated | truncated).all()):
            break
    return info["success"], obs["cube_pos"]


def test_the_pick_place_planner_solves_it_as_on_pick_place() -> None:
    expert = make_expert("planner", cam_env(num_envs=1).spec)
    assert isinstance(expert, PickPlacePlanner)
    success_cam, cube_cam = run_planner("pick_place_cam", seed=11, rows=16, steps=120)
    success, cube = run_planner("pick_place", seed=11, rows=16, steps=120)
    assert torch.equal(success_cam, success) and torch.equal(cube_cam, cube)
    assert success.float().mean() >= 0.75
