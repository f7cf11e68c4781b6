"""`pick_place_cam`: ``pick_place`` seen through rendered cameras (a top view and a wrist view).

::

    env = PickPlaceCamEnv(num_envs=64, device="cpu", seed=0)          # both cameras, 96x96 RGB
    obs, info = env.reset()
    obs["observation.images.top"]     # [64, 96, 96, 3] uint8
    obs["observation.images.wrist"]   # [64, 96, 96, 3] uint8
    env.spec.flatten_observation(obs)["observation.state"]   # [64, 4]: ee_pos + gripper opening
    PickPlaceCamEnv(num_envs=8, cameras=("top",), image_size=(64, 80), depth=True)

The physics, the perturbations, every constructor kwarg of ``pick_place`` and the observation
keys are ``pick_place``'s (this class only adds cameras), so the ``pick_place`` planner acts on
the same privileged keys and succeeds exactly as often with the same seed. What changes is what
the *student* sees: ``state_keys`` are proprioception only (``ee_pos``, ``gripper``, plus
``ee_vel`` with ``ee_inertia > 0``), the cube and goal positions are
``observation.environment_state`` (recorded, never a policy input), and the cameras carry the rest.

Cameras (both look straight down; image right is world +x, image up is world +y):

- ``top``: orthographic over the whole workspace (0.66 m square, 6.9 mm per pixel at 96 px).
  The table (a soft per-row texture), the goal (a green ring with a centre dot: the cube must
  end up inside the ring), the cube (red top face, whiter the higher it is lifted, with a
  shadow that moves away from it as it rises), and the gripper (two fingers joined by a bar
  across the palm: the fingers are far apart when open, close together when closed; lighter
  the higher the gripper, with its own shadow on the table).
- ``wrist``: a 90° pinhole camera 6 cm above the end effector, looking down between the
  fingers. The cube and the goal grow as the gripper approaches; the two fingers enter from the
  left and right edges and meet towards the centre as the gripper closes; a held cube fills the
  middle of the view.

Looks are jittered per row (brightness, colour tint, table tone and texture, light direction)
from a side stream of the row's own random stream, drawn at each reset: deterministic per row
seed, part of ``get_state`` (field ``look``), and without changing the numbers the physics
draws. Rendering is batched torch on the env's device (no per-row Python, no host copies);
``bench/cameras_env.py`` measures its cost. A partial reset re-renders only the reset rows.
Optional depth (``depth=True``): ``observation.depth.<camera>`` uint16 millimetres along the
view axis (the top camera's eye is 0.5 m above the table).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Sequence
from typing import Any

import torch

from odsd.envs.errors import EnvSpecError
from odsd.envs.render import (
    Camera,
    Canvas,
    DownCamera,
    OrthoCamera,
    nonneg,
    radius2,
    rect_mask,
    span,
    square_mask,
)
from odsd.envs.spec import CameraSpec, EnvSpec, StateField
from odsd.envs.tasks.pick_place import CUBE_HALF, PickPlaceEnv

CAMERA_NAMES = ("top", "wrist")
DEFAULT_IMAGE_SIZE = 96
MIN_IMAGE_SIZE = 16
MAX_IMAGE_SIZE = 1024
CAMERA_DESCRIPTIONS = {
    "top": (
        "orthographic, straight down over the workspace: table, goal ring, cube (whiter and with a "
        "farther shadow when lifted), gripper fingers (apart = open)"
    ),
    "wrist": (
        "90° pinhole 6 cm above the end effector, looking down between the fingers: cube and goal "
        "grow on approach; fingers meet when closed"
    ),
}

TOP_HALF_EXTENT = 0.32
TOP_EYE_Z = 0.5
WRIST_EYE_OFFSET = 0.06
WRIST_TAN_HALF_FOV = 1.0
GOAL_RING = (0.024, 0.034)
GOAL_DOT = 0.007
FINGER_GAP = (0.016, 0.034)
"""Half distance between the finger centres, closed and open (linear in the opening)."""
FINGER_HALF_X = 0.007
FINGER_HALF_Y = 0.015
FINGER_TIP_BELOW = 0.015
FINGER_TOP_ABOVE = 0.02
PALM_HALF_Y = 0.005
WRIST_FINGER_HALF_Y = 0.008
"""The wrist camera sees the fingers' narrow edge (the top view sees them whole)."""
SHADOW_SLOPE = 0.5
"""Shadow displacement (m) per metre of height: the light comes from 63° above the horizon."""
SHADOW_DARKEN = 0.35
LIFT_FULL = 0.12
GRIPPER_HIGH = 0.3

TABLE, GOAL, CUBE_SIDE, CUBE_TOP, GRIPPER = range(5)
_BASE_COLORS = (
    (0.62, 0.56, 0.48),  # table
    (0.10, 0.72, 0.25),  # goal
    (0.50, 0.08, 0.06),  # cube side
    (0.85, 0.15, 0.10),  # cube top, resting
    (0.10, 0.18, 0.50),  # gripper, low
)
_CUBE_TOP_LIFTED = (1.0, 0.62, 0.50)
_GRIPPER_HIGH = (0.55, 0.70, 1.00)

LOOK_FIELDS = (
    "brightness",
    "tint_r",
    "tint_g",
    "tint_b",
    "light",
    "tex_px",
    "tex_py",
    "tex_freq",
    "tex_amp",
    "tone",
)
LOOK_STREAM = 1
"""Side stream of each row's random stream that the looks are drawn from (see RowRandom.side_uniform)."""

_PICK_PLACE_KWARGS = frozenset(inspect.signature(PickPlaceEnv.__init__).parameters) - {
    "self",
    "num_envs",
    "device",
    "seed",
}


def camera_specs(
    cameras: Sequence[str], image_size: int | Sequence[int], depth: bool
) -> tuple[CameraSpec, ...]:
    """The checked camera list of a ``pick_place_cam`` configuration (one-line errors).

    >>> camera_specs(("top",), 64, False)[0].shape
    (64, 64, 3)
    """
    if isinstance(cameras, str) or not isinstance(cameras, Sequence):
        raise EnvSpecError(
            f"pick_place_cam: cameras must be a list of names from {list(CAMERA_NAMES)}, got {cameras!r}"
        )
    names = list(cameras)
    unknown = [c for c in names if c not in CAMERA_NAMES]
    if unknown or not names or len(set(names)) != len(names):
        raise EnvSpecError(
            f"pick_place_cam: cameras must be distinct names from {list(CAMERA_NAMES)} (at least one), "
            f"got {names!r}; for no cameras use pick_place"
        )
    size = [image_size, image_size] if isinstance(image_size, int) else list(image_size)
    if len(size) != 2 or not all(
        isinstance(s, int) and not isinstance(s, bool) and MIN_IMAGE_SIZE <= s <= MAX_IMAGE_SIZE for s in size
    ):
        raise EnvSpecError(
            f"pick_place_cam: image_size must be an integer or [height, width] in "
            f"[{MIN_IMAGE_SIZE}, {MAX_IMAGE_SIZE}], got {image_size!r}"
        )
    if not isinstance(depth, bool):
        raise EnvSpecError(f"pick_place_cam: depth must be true or false, got {depth!r}")
    height, width = size
    return tuple(
        CameraSpec(name, height, width, depth=depth, description=CAMERA_DESCRIPTIONS[name]) for name in names
    )


class PickPlaceCamEnv(PickPlaceEnv):
    """``pick_place`` with rendered cameras (see module docstring); takes every ``pick_place`` kwarg."""

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        *,
        cameras: Sequence[str] = CAMERA_NAMES,
        image_size: int | Sequence[int] = DEFAULT_IMAGE_SIZE,
        depth: bool = False,
        **pick_place_kwargs: Any,
    ) -> None:
        unknown = sorted(set(pick_place_kwargs) - _PICK_PLACE_KWARGS)
        if unknown:
            raise EnvSpecError(
                f"pick_place_cam: unknown task arguments {unknown}; it takes cameras, image_size, depth "
                f"and pick_place's: {', '.join(sorted(_PICK_PLACE_KWARGS))}"
            )
        self._cameras = camera_specs(cameras, image_size, depth)
        self._frames: dict[str, torch.Tensor] | None = None
        self._pending: torch.Tensor | None = None
        super().__init__(num_envs, device, seed, **pick_place_kwargs)

    def _task_spec(self, spec: EnvSpec) -> EnvSpec:
        proprio = tuple(k for k in ("ee_pos", "gripper", "ee_vel") if k in spec.observation_keys)
        return dataclasses.replace(
            spec,
            task="pick_place_cam",
            task_description="pick the cube and place it at the goal (seen through cameras)",
            state=self.state_spec(),
            state_keys=proprio,
            cameras=self._cameras,
        )

    @classmethod
    def physical_fields(cls) -> tuple[StateField, ...]:
        return (*PickPlaceEnv.physical_fields(), StateField("look", (len(LOOK_FIELDS),)))

    def _reset_rows(self, ids: torch.Tensor) -> None:
        super()._reset_rows(ids)
        self.s["look"][ids] = self.rng.side_uniform(ids, len(LOOK_FIELDS), LOOK_STREAM)
        self._pending = ids

    def _observe(self) -> dict[str, torch.Tensor]:
        obs = super()._observe()
        rows, self._pending = self._pending, None
        if self._frames is None or rows is None or rows.numel() == self.spec.num_envs:
            frames = self.render()
        else:  # a partial reset: only the reset rows look different
            frames = {}
            update = self.render(rows)
            for key, old in self._frames.items():
                new = old.clone()
                # uint16 has no index_put on CPU; the same bits through int16 do
                target = new.view(torch.int16) if new.dtype == torch.uint16 else new
                target[rows] = update[key].view(target.dtype)
                frames[key] = new
        self._frames = frames
        obs.update(frames)
        return obs

    def render(self, rows: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Frames of ``rows`` (all when ``None``) from the current state: ``{camera key: [m, H, W, C]}``."""
        s = self.s if rows is None else {k: v[rows] for k, v in self.s.items()}
        scene = _Scene(s, self.spec.params["cube_rest_z"])
        out: dict[str, torch.Tensor] = {}
        for camera in self._cameras:
            rgb, depth = scene.draw(camera, self.device)
            out[camera.key] = rgb
            if depth is not None:
                out[camera.depth_key] = depth
        return out


class _Scene:
    """One batch of states, drawn from any of the task's cameras."""

    def __init__(self, s: dict[str, torch.Tensor], rest_z: float) -> None:
        self.ee = s["ee_pos"]
        self.opening = s["gripper"][:, 0]
        self.cube = s["cube_pos"]
        self.goal = s["goal_pos"]
        self.rest_z = rest_z
        look = s["look"]
        self.n = look.shape[0]
        self.brightness = 0.85 + 0.3 * look[:, 0]
        self.tint = 0.95 + 0.1 * look[:, 1:4]
        azimuth = -math.pi / 4 + (look[:, 4] - 0.5) * 0.8
        self.light = torch.stack((torch.cos(azimuth), torch.sin(azimuth)), dim=1) * SHADOW_SLOPE
        self.tex_phase = look[:, 5:7] * 2 * math.pi
        self.tex_freq = 30.0 + 30.0 * look[:, 7]
        self.tex_amp = 0.03 + 0.05 * look[:, 8]
        self.tone = (look[:, 9] - 0.5) * 0.1
        self.half_gap = FINGER_GAP[0] + (FINGER_GAP[1] - FINGER_GAP[0]) * self.opening.clamp(0.0, 1.0)
        self.lift = ((self.cube[:, 2] - rest_z) / LIFT_FULL).clamp(0.0, 1.0)

    def draw(self, spec: CameraSpec, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        n = self.n
        if spec.name == "top":
            camera: Camera = OrthoCamera(spec.height, spec.width, TOP_HALF_EXTENT, TOP_EYE_Z, device)
        else:
            eye = self.ee + torch.tensor((0.0, 0.0, WRIST_EYE_OFFSET), device=device)
            camera = DownCamera(spec.height, spec.width, WRIST_TAN_HALF_FOV, eye, device)
        zero = torch.zeros(n, device=device)
        canvas = Canvas(n, spec.height, spec.width, camera.depth(zero), device=device, with_depth=spec.depth)

        goal_r2 = radius2(camera, zero, self.goal[:, :2])
        # inside the ring where (r² - a²)(b² - r²) >= 0, on the dot where c² - r² >= 0
        ring = nonneg(
            torch.maximum(
                (goal_r2 - GOAL_RING[0] ** 2) * (GOAL_RING[1] ** 2 - goal_r2), GOAL_DOT**2 - goal_r2
            )
        )
        canvas.paint(ring, GOAL, camera.depth(zero))

        cube_bottom = self.cube[:, 2] - CUBE_HALF
        shadow = square_mask(
            camera, zero, self.cube[:, :2] + self.light * (cube_bottom + 0.012).unsqueeze(1), CUBE_HALF
        )
        if spec.name == "top":
            reach = self.half_gap + FINGER_HALF_X
            at = self.ee[:, :2] + self.light * (self.ee[:, 2] + FINGER_TOP_ABOVE).unsqueeze(1)
            x, y = at[:, 0], at[:, 1]
            gripper_shadow = rect_mask(
                camera, zero, x - reach, x + reach, y - FINGER_HALF_Y, y + FINGER_HALF_Y
            )
            shadow = torch.maximum(shadow, gripper_shadow)
        else:  # the top view cannot see the cube's sides
            canvas.paint(
                square_mask(camera, cube_bottom, self.cube[:, :2], CUBE_HALF),
                CUBE_SIDE,
                camera.depth(cube_bottom),
            )
        cube_top = self.cube[:, 2] + CUBE_HALF
        canvas.paint(
            square_mask(camera, cube_top, self.cube[:, :2], CUBE_HALF), CUBE_TOP, camera.depth(cube_top)
        )

        if spec.name == "top":
            self._top_gripper(camera, canvas)
        else:
            assert isinstance(camera, DownCamera)
            self._wrist_fingers(camera, canvas)

        xs, ys = camera.coords(zero)
        wave_x = torch.sin(xs * self.tex_freq.unsqueeze(1) + self.tex_phase[:, 0:1])
        wave_y = torch.sin(ys * self.tex_freq.unsqueeze(1) + self.tex_phase[:, 1:2])
        texture = 1.0 + self.tex_amp.view(n, 1, 1) * wave_y.unsqueeze(2) * wave_x.unsqueeze(1)
        shade = texture * (1.0 - SHADOW_DARKEN * shadow)
        rgb = canvas.rgb(self._palette(top=spec.name == "top", device=device), shade, shaded=GOAL)
        return rgb, canvas.depth_mm() if spec.depth else None

    def _top_gripper(self, camera: Camera, canvas: Canvas) -> None:
        h = self.ee[:, 2] + FINGER_TOP_ABOVE
        x, y = self.ee[:, 0], self.ee[:, 1]
        reach = self.half_gap + FINGER_HALF_X
        gripper = rect_mask(camera, h, x - reach, x + reach, y - PALM_HALF_Y, y + PALM_HALF_Y)
        xs, ys = camera.coords(h)
        fingers = span(ys, y - FINGER_HALF_Y, y + FINGER_HALF_Y).unsqueeze(2) * span(
            (xs - x.unsqueeze(1)).abs(), self.half_gap - FINGER_HALF_X, reach
        ).unsqueeze(1)
        canvas.paint(torch.maximum(gripper, fingers), GRIPPER, camera.depth(h))

    def _wrist_fingers(self, camera: DownCamera, canvas: Canvas) -> None:
        """Both fingers (vertical slabs at ``±half_gap`` in x) as seen from the camera between them."""
        tip = WRIST_EYE_OFFSET + FINGER_TIP_BELOW
        top = WRIST_EYE_OFFSET - FINGER_TOP_ABOVE
        inner = (self.half_gap - FINGER_HALF_X).unsqueeze(1)
        outer = (self.half_gap + FINGER_HALF_X).unsqueeze(1)
        u = camera.u.abs().unsqueeze(0)
        v = camera.v.abs()
        # [n, W]: the ray meets the slab's x range at some depth in [top, tip]
        columns = ((u * tip >= inner) & (u * top <= outer)).to(torch.float32)
        rows = (v * top <= WRIST_FINGER_HALF_Y).to(torch.float32).view(1, -1, 1)
        # a ray at (u, v) enters the inner face at depth inner / u, where |v| * depth <= half width
        within = nonneg(WRIST_FINGER_HALF_Y * u.unsqueeze(1) - v.view(1, -1, 1) * inner.unsqueeze(2))
        mask = within * rows * columns.unsqueeze(1)
        depth = None
        if canvas.depth is not None:
            depth = (inner.unsqueeze(2) / u.clamp_min(1e-6).unsqueeze(1)).clamp(top, tip).expand_as(mask)
        canvas.paint(mask, GRIPPER, depth)

    def _palette(self, *, top: bool, device: torch.device) -> torch.Tensor:
        base = torch.tensor(_BASE_COLORS, device=device).expand(self.n, -1, -1).clone()
        base[:, TABLE] += self.tone.unsqueeze(1)
        lifted = torch.tensor(_CUBE_TOP_LIFTED, device=device)
        base[:, CUBE_TOP] = torch.lerp(base[:, CUBE_TOP], lifted.expand(self.n, 3), self.lift.unsqueeze(1))
        if top:
            high = (self.ee[:, 2] / GRIPPER_HIGH).clamp(0.0, 1.0).unsqueeze(1)
            base[:, GRIPPER] = torch.lerp(
                base[:, GRIPPER], torch.tensor(_GRIPPER_HIGH, device=device).expand(self.n, 3), high
            )
        return (base * (self.brightness.unsqueeze(1) * self.tint).unsqueeze(1)).clamp(0.0, 1.0)
