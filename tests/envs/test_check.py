"""check_env and ``odsd check-env`` with cameras: the camera table, the frame PNGs, task kwargs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from odsd.envs import check_env

ENV = {"OMP_NUM_THREADS": "1"}


def odsd(*args: object) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-m", "odsd", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **ENV},
    )


def test_check_env_writes_one_png_per_camera(tmp_path: Path) -> None:
    report = check_env("pick_place_cam", images_dir=tmp_path, image_size=40, depth=True)
    assert report.ok, [c for c in report.checks if not c.ok]
    assert {c.name for c in report.checks} >= {"camera frames", "partial reset", "state round trip"}
    assert set(report.images) == {
        "observation.images.top",
        "observation.depth.top",
        "observation.images.wrist",
        "observation.depth.wrist",
    }
    top = np.asarray(Image.open(report.images["observation.images.top"]))
    assert top.shape == (40, 40, 3) and top.dtype == np.uint8
    depth = np.asarray(Image.open(report.images["observation.depth.top"]))
    assert depth.shape == (40, 40) and int(depth.max()) == 500
    cameras = report.to_dict()["spec"]["cameras"]
    assert [c["name"] for c in cameras] == ["top", "wrist"] and cameras[0]["shape"] == [40, 40, 3]


def test_check_env_without_cameras_writes_nothing(tmp_path: Path) -> None:
    report = check_env("pick_place", images_dir=tmp_path / "frames")
    assert report.ok and report.images == {}
    assert "camera frames" not in {c.name for c in report.checks}
    assert report.to_dict()["spec"]["cameras"] == []
    assert not (tmp_path / "frames").exists()


def test_cli_prints_cameras_and_writes_pngs(tmp_path: Path) -> None:
    frames = tmp_path / "frames"
    proc = odsd(
        "check-env", "pick_place_cam", "--images-dir", frames, "--task-kwargs", '{"image_size": [32, 48]}'
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    for name in ("top", "wrist"):
        path = frames / f"pick_place_cam-{name}.png"
        with Image.open(path) as image:
            assert image.size == (48, 32) and image.mode == "RGB"
        assert "32x48x3" in proc.stdout
    assert "cameras" in proc.stdout and str(frames) in proc.stdout.replace("\n", "")


def test_cli_json_lists_images_in_a_temp_dir_by_default() -> None:
    proc = odsd("check-env", "pick_place_cam", "--json", "--task-kwargs", '{"cameras": ["wrist"]}')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["ok"] is True
    path = Path(report["images"]["observation.images.wrist"])
    try:
        assert path.parent.name.startswith("odsd-check-env-pick_place_cam-")
        with Image.open(path) as image:
            assert image.size == (96, 96)
    finally:
        for file in path.parent.iterdir():
            file.unlink()
        path.parent.rmdir()


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["--task-kwargs", "{nope"], 2, "--task-kwargs is not JSON"),
        (["--task-kwargs", "[1]"], 2, "must be a JSON object"),
        (["--images-dir", "{file}/sub"], 3, "cannot use path"),
    ],
)
def test_cli_bad_inputs_are_one_line(tmp_path: Path, args: list[str], code: int, text: str) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    proc = odsd("check-env", "pick_place_cam", *(a.replace("{file}", str(file)) for a in args))
    assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert text in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_bad_task_option_fails_the_construct_check() -> None:
    proc = odsd("check-env", "pick_place_cam", "--json", "--task-kwargs", '{"cameras": ["side"]}')
    assert proc.returncode == 1
    construct = json.loads(proc.stdout)["checks"][0]
    assert construct["name"] == "construct" and not construct["ok"] and "side" in construct["detail"]
