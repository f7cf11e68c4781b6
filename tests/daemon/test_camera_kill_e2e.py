"""SIGKILL of ``odsd collect`` while it commits camera frames: no committed episode or frame is lost."""

from __future__ import annotations

import hashlib
import os
import random
import time
from pathlib import Path

import pytest
from daemon_helpers import odsd, spawn
from test_kill_resume_e2e import sigkill_leaving_nothing

from odsd.store import EpisodeStore
from odsd.store.errors import StoreError
from odsd.testing.processes import kill_session

CAMERAS = ("observation.images.top", "observation.images.wrist")
RUN_ID = "cam"


def collect_args(store: Path) -> list[str]:
    return [
        "collect",
        "--mode",
        "dagger_sync",
        "--task",
        "pick_place_cam",
        "--set",
        "task_kwargs.image_size=32",
        "--num-envs",
        "4",
        "--episodes-per-iteration",
        "8",
        "--max-iterations",
        "1000",
        "--store",
        str(store),
        "--run-id",
        RUN_ID,
        "--seed",
        "5",
        "--set",
        "commit_max_age_s=0.5",
    ]


def frame_digests(store: Path) -> dict[int, str]:
    """Per committed episode: sha256 of its camera frames (read and verified through the store)."""
    snap = EpisodeStore.open(store).snapshot()
    out = {}
    for entry in snap.entries:
        frames = snap.episode(entry.episode_id, fields=CAMERAS)
        digest = hashlib.sha256()
        for key in CAMERAS:
            assert frames[key].shape == (entry.meta.length, 32, 32, 3)
            digest.update(frames[key].tobytes())
        out[entry.episode_id] = digest.hexdigest()
    return out


def wait_commits(proc, store: Path, at_least: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if EpisodeStore.open(store, index=False).watermark >= at_least - 1:
                return
        except StoreError:  # the store may not exist yet
            pass
        time.sleep(0.1)
    raise AssertionError(f"fewer than {at_least} commits within {timeout}s")


@pytest.mark.slow
def test_sigkill_while_committing_frames_loses_nothing_committed(tmp_path: Path) -> None:
    seed = int(os.environ.get("ODSD_TEST_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    store = tmp_path / "store"
    log = tmp_path / "odsd.log"
    before: dict[int, str] = {}
    for kill in range(3):
        args = collect_args(store) if kill == 0 else ["resume", str(store), "--run", RUN_ID]
        proc = spawn(*args, log=log, new_session=True)
        try:
            wait_commits(proc, store, at_least=len(before) // 4 + 2 + kill)
            time.sleep(rng.uniform(0.0, 1.5))
        except BaseException:
            kill_session(proc.pid)
            raise
        assert proc.poll() is None, f"seed {seed}: the run ended before its kill\n{log.read_text()[-3000:]}"
        sigkill_leaving_nothing(proc)
        after = frame_digests(store)
        lost = {k: v for k, v in before.items() if after.get(k) != v}
        assert not lost, f"seed {seed}: committed episodes lost or changed by the kill: {sorted(lost)}"
        assert len(after) > len(before), f"seed {seed}: kill {kill}: nothing new was committed"
        before = after
    fsck = odsd("store", "fsck", store)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert "Traceback" not in log.read_text()
