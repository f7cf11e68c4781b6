"""`check_env`: a reset/step smoke test of any task, as a pure function returning a report.

::

    report = check_env("pick_place", num_envs=4)
    report.ok                      # every check passed
    report = check_env("pick_place_cam", images_dir=Path("frames"))
    report.images                  # {"observation.images.top": Path("frames/pick_place_cam-top.png"), ...}
    rich.print(report.rich_table())
    json.dumps(report.to_dict())

The CLI (``odsd check-env TASK``) renders the report; this module prints nothing.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from odsd.envs.protocol import SupportsState, VecEnv, reports_success, safe_hold_action
from odsd.envs.spec import EnvSpec

CheckStatus = Literal["ok", "fail", "unsupported", "warning"]


@dataclass
class CheckItem:
    """One named check and its outcome.

    ``status`` is ``ok`` or ``fail``, ``unsupported`` for an optional capability the env does not
    have (not a failure), or ``warning`` for something that works but needs attention.
    """

    name: str
    ok: bool
    detail: str = ""
    status: CheckStatus | None = None

    def __post_init__(self) -> None:
        if self.status is None:
            self.status = "ok" if self.ok else "fail"
        self.ok = self.status != "fail"


@dataclass
class CheckReport:
    """What :func:`check_env` found: the spec, per-check results and step throughput."""

    task: str
    spec: EnvSpec | None
    checks: list[CheckItem] = field(default_factory=list)
    steps_per_s: float | None = None
    images: dict[str, Path] = field(default_factory=dict)
    """Camera field → PNG of row 0 of the first reset frame (written with ``images_dir``)."""

    @property
    def ok(self) -> bool:
        """True when every check passed."""
        return bool(self.checks) and all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (spec layout, params, checks, throughput)."""
        spec = self.spec
        return {
            "task": self.task,
            "ok": self.ok,
            "steps_per_s": self.steps_per_s,
            "checks": [
                {"name": c.name, "ok": c.ok, "status": c.status, "detail": c.detail} for c in self.checks
            ],
            "images": {k: str(v) for k, v in self.images.items()},
            "spec": None
            if spec is None
            else {
                "task_description": spec.task_description,
                "num_envs": spec.num_envs,
                "device": str(spec.device),
                "step_dt": spec.step_dt,
                "control_hz": spec.control_hz,
                "max_episode_steps": spec.max_episode_steps,
                "layout_hash": spec.layout_hash(),
                "layout": spec.layout(),
                "cameras": [
                    {
                        "name": c.name,
                        "key": c.key,
                        "shape": list(c.shape),
                        "depth": c.depth,
                        "description": c.description,
                    }
                    for c in spec.cameras
                ],
                "features": {k: {**v, "shape": list(v["shape"])} for k, v in spec.features().items()},
                "state": None if spec.state is None else {f.name: list(f.shape) for f in spec.state.fields},
            },
        }

    def rich_table(self) -> Any:
        """A ``rich`` renderable: spec summary, observation/action layout and check results."""
        from rich.console import Group
        from rich.markup import escape
        from rich.table import Table

        parts: list[Any] = []
        spec = self.spec
        if spec is not None:
            summary = Table(title=f"{self.task}: {spec.task_description}", show_header=False)
            summary.add_column("field", style="bold")
            summary.add_column("value")
            for name, value in (
                ("num_envs", spec.num_envs),
                ("device", spec.device),
                ("step_dt / control_hz", f"{spec.step_dt:g} s / {spec.control_hz:g} Hz"),
                ("max_episode_steps", spec.max_episode_steps),
                ("action", f"{spec.action.kind} dim={spec.action.dim} normalized={spec.action.normalized}"),
                ("layout_hash", spec.layout_hash()[:16]),
                (
                    "state layout",
                    "none" if spec.state is None else ", ".join(f.name for f in spec.state.fields),
                ),
                ("steps/s", "-" if self.steps_per_s is None else f"{self.steps_per_s:,.0f}"),
            ):
                summary.add_row(name, str(value))
            parts.append(summary)
            layout = Table(title="observation and action layout")
            for column in ("key", "shape", "dtype", "in", "names / bounds"):
                layout.add_column(column)
            for key in spec.observation:
                where = [
                    g
                    for g, keys in (("state", spec.state_keys), ("env", spec.environment_state_keys))
                    if keys and key.name in keys
                ]
                layout.add_row(
                    key.name,
                    str(key.shape),
                    key.dtype,
                    "+".join(where) or "-",
                    ", ".join(key.element_names()),
                )
            bounds = ", ".join(
                f"{n}[{lo:g},{hi:g}]"
                for n, lo, hi in zip(
                    spec.action.element_names(), spec.action.low, spec.action.high, strict=True
                )
            )
            layout.add_row("action", str((spec.action.dim,)), "float32", "-", bounds)
            parts.append(layout)
            if spec.cameras:
                parts.append(self._camera_table(spec))
        checks = Table(title="checks")
        checks.add_column("check")
        checks.add_column("result")
        checks.add_column("detail")
        shown = {
            "ok": "[green]ok[/green]",
            "fail": "[red]FAIL[/red]",
            "unsupported": "[dim]unsupported[/dim]",
            "warning": "[yellow]warning[/yellow]",
        }
        for c in self.checks:
            checks.add_row(c.name, shown[c.status or "ok"], escape(c.detail))
        parts.append(checks)
        return Group(*parts)

    def _camera_table(self, spec: EnvSpec) -> Any:
        from rich.markup import escape
        from rich.table import Table

        table = Table(title="cameras (observation.images.<name>, uint8 HxWxC)")
        for column in ("camera", "HxWxC", "depth"):
            table.add_column(column)
        table.add_column("frame of row 0", overflow="fold")
        table.add_column("description")
        for c in spec.cameras:
            image = self.images.get(c.key)
            table.add_row(
                c.name,
                "x".join(str(d) for d in c.shape),
                "uint16 mm" if c.depth else "-",
                escape(str(image)) if image else "-",
                escape(c.description),
            )
        return table


def check_env(
    task: str,
    num_envs: int = 2,
    device: str | torch.device = "cpu",
    *,
    seed: int = 0,
    steps: int = 20,
    images_dir: Path | None = None,
    images_temp: bool = False,
    **kwargs: Any,
) -> CheckReport:
    """Build ``task`` and run a reset/step smoke test; never raises for env faults.

    Checks: construction, reset observation matches the spec, step output shapes/dtypes, a success
    signal (a warning when the env has none), partial reset leaves other rows untouched, state round
    trip (``unsupported`` when the env declares no state: optional), close. An env with cameras
    also gets a ``camera frames`` check; with ``images_dir`` it writes row 0 of the first reset
    frame of each camera there as ``<task>-<camera>.png`` (depth: ``<task>-<camera>-depth.png``,
    16-bit millimetres) and lists them in ``report.images``; with ``images_temp`` (and no
    ``images_dir``) into a new temporary directory, made only when the env has cameras.
    """
    from odsd.envs.registry import make_env

    report = CheckReport(task=task, spec=None)

    def run(name: str, fn: Any) -> bool:
        try:
            result = fn()
        except Exception as exc:
            report.checks.append(CheckItem(name, False, f"{type(exc).__name__}: {exc}"))
            return False
        status, detail = result if isinstance(result, tuple) else ("ok", result)
        report.checks.append(CheckItem(name, True, detail or "", status=status))
        return True

    holder: dict[str, Any] = {}

    def build() -> str:
        holder["env"] = make_env(task, num_envs=num_envs, device=device, seed=seed, **kwargs)
        report.spec = holder["env"].spec
        return type(holder["env"]).__name__

    if not run("construct", build):
        return report
    env: VecEnv = holder["env"]
    spec = env.spec

    def reset() -> str:
        obs, _info = env.reset(seed=seed)
        spec.validate_observation(obs)
        holder["first"] = obs
        flat = spec.flatten_observation(obs)
        return ", ".join(f"{k}{tuple(v.shape)}" for k, v in flat.items())

    def camera_frames() -> str:
        obs = holder["first"]
        varied = [key for key in spec.camera_keys if bool((obs[key] != obs[key].flatten()[0]).any())]
        blank = [key for key in spec.camera_keys if key not in varied]
        if blank:
            raise AssertionError(f"camera frames are one flat colour: {blank}")
        directory = images_dir
        if directory is None and images_temp:
            directory = Path(tempfile.mkdtemp(prefix=f"odsd-check-env-{safe_name(task)}-"))
        if directory is None:
            return f"{len(spec.camera_keys)} frames, none blank"
        report.images.update(write_frame_pngs(obs, spec, Path(directory), row=0))
        return f"{len(report.images)} PNGs of row 0 in {directory}"

    def step() -> str:
        hold = safe_hold_action(env)
        start = time.perf_counter()
        for _ in range(steps):
            obs, reward, terminated, truncated, info = env.step(hold)
            spec.validate_observation(obs)
            n = spec.num_envs
            for name, value, dtype in (
                ("reward", reward, torch.float32),
                ("terminated", terminated, torch.bool),
                ("truncated", truncated, torch.bool),
                ('info["success"]', info.get("success"), torch.bool),
            ):
                if not isinstance(value, torch.Tensor) or value.shape != (n,) or value.dtype != dtype:
                    raise AssertionError(f"{name} must be a [{n}] {dtype} tensor, got {value!r:.80}")
        elapsed = time.perf_counter() - start
        report.steps_per_s = steps * spec.num_envs / max(elapsed, 1e-9)
        return f"{steps} steps with the safe hold action"

    def partial_reset() -> str:
        before, _ = env.reset(seed=seed)
        after, _ = env.reset(env_ids=torch.tensor([0], device=spec.device))
        others = slice(1, None)
        for key in before:
            if not torch.equal(before[key][others], after[key][others]):
                raise AssertionError(f"resetting row 0 changed other rows of {key!r}")
        return "row 0 reset; rows 1.. unchanged"

    def success_signal() -> tuple[CheckStatus, str]:
        if reports_success(env) is False:
            return "warning", (
                f"no success signal: no step's info had 'is_success' or 'success' in {steps} steps, so "
                "every episode counts as failed (expert_demo commits nothing without --keep-failed, "
                "success rates read 0); define success in a wrapper (docs/envs.md)"
            )
        return "ok", 'info["success"] comes from the env'

    def state_round_trip() -> str | tuple[CheckStatus, str]:
        if not isinstance(env, SupportsState) or spec.state is None:
            return (
                "unsupported",
                "optional: the env declares no simulator state (no --record-state or replay)",
            )
        env.reset(seed=seed)
        state = env.get_state()
        obs_a, *_ = env.step(safe_hold_action(env))
        env.set_state(state)
        obs_b, *_ = env.step(safe_hold_action(env))
        for key in obs_a:
            a, b = obs_a[key], obs_b[key]
            same = torch.allclose(a, b, atol=1e-5) if a.is_floating_point() else torch.equal(a, b)
            if not same:
                raise AssertionError(f"replay from get_state diverged on {key!r}")
        return "step after set_state reproduces the original step"

    if run("reset", reset) and spec.cameras:
        run("camera frames", camera_frames)
    if run("step", step):
        run("success signal", success_signal)
    if spec.num_envs > 1:
        run("partial reset", partial_reset)
    run("state round trip", state_round_trip)
    run("close", lambda: env.close())
    return report


def write_frame_pngs(
    obs: dict[str, torch.Tensor], spec: EnvSpec, directory: Path, *, row: int = 0
) -> dict[str, Path]:
    """Write row ``row`` of every camera tensor in ``obs`` as a PNG; return field → path.

    RGB frames are 8-bit RGB (or grey) PNGs; depth is a 16-bit greyscale PNG in millimetres.

    >>> write_frame_pngs(env.reset()[0], env.spec, Path("frames"))["observation.images.top"]
    PosixPath('frames/pick_place_cam-top.png')
    """
    from PIL import Image

    task = safe_name(spec.task)
    out: dict[str, Path] = {}
    directory.mkdir(parents=True, exist_ok=True)
    for camera in spec.cameras:
        image = obs[camera.key][row].cpu().numpy()
        path = directory / f"{task}-{camera.name}.png"
        Image.fromarray(image[:, :, 0] if camera.channels == 1 else image).save(path)
        out[camera.key] = path
        if camera.depth:
            depth = obs[camera.depth_key][row].cpu().numpy()[:, :, 0].astype(np.uint16)
            path = directory / f"{task}-{camera.name}-depth.png"
            Image.fromarray(depth).save(path)
            out[camera.depth_key] = path
    return out


def parse_task_kwargs(text: str | None) -> dict[str, Any]:
    """``--task-kwargs`` JSON text → a dict (a one-line :class:`~odsd.errors.ConfigError` otherwise)."""
    import json

    from odsd.errors import ConfigError

    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--task-kwargs is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"--task-kwargs must be a JSON object, got {text!r}")
    return value


def prepare_images_dir(directory: Path) -> Path:
    """Create ``odsd check-env --images-dir``; a path that cannot be a directory is a one-line error.

    (exit 3 or 6, not a failed check.)
    """
    from odsd.errors import as_user_error

    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        error = as_user_error(exc)
        if error is None:
            raise
        raise error from exc
    return directory


def safe_name(task: str) -> str:
    """``task`` with every character but letters, digits, ``_`` and ``-`` replaced by ``_`` (file names)."""
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in task)
