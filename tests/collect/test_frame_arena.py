"""The frame arena: shared memory between the collector and its writer process."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from odsd.collect.frame_arena import ArenaView, FrameArena

pytestmark = pytest.mark.skipif(not FrameArena.supported(), reason="needs Linux memfd and procfs")


def _frames(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "observation.images.top": rng.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8),
        "observation.state": rng.standard_normal((n, 5)).astype(np.float32),
        "done": rng.random(n) < 0.5,
        "episode_index": np.arange(n, dtype=np.int64),
    }


def test_put_and_view_round_trip_every_dtype() -> None:
    arena = FrameArena(1 << 20)
    try:
        frames = _frames(17)
        ref = arena.put(frames, wait=lambda: None)
        view = ArenaView(arena.child_path)
        got = view.arrays(ref)
        assert list(got) == list(frames)
        for name, values in frames.items():
            assert got[name].dtype == values.dtype and got[name].shape == values.shape
            np.testing.assert_array_equal(got[name], values)
            assert not got[name].flags.writeable
        assert all(offset % 64 == 0 for _, _, _, offset in ref.fields)
    finally:
        arena.close()


def test_space_is_first_fit_from_the_lowest_offset_and_reused() -> None:
    arena = FrameArena(1 << 16)
    try:
        a = arena.put({"x": np.zeros(1000, np.uint8)}, wait=lambda: None)
        b = arena.put({"x": np.zeros(1000, np.uint8)}, wait=lambda: None)
        assert (a.start, b.start) == (0, 1024)
        arena.release(a)
        c = arena.put({"x": np.zeros(500, np.uint8)}, wait=lambda: None)
        assert c.start == 0  # the freed hole at the bottom, not the end
        d = arena.put({"x": np.zeros(800, np.uint8)}, wait=lambda: None)
        assert d.start == 2048  # does not fit the remaining hole (512..1024)
        assert arena.bytes_in_use == 512 + 1024 + 832
    finally:
        arena.close()


def test_a_full_arena_blocks_until_space_is_released() -> None:
    arena = FrameArena(4096)
    try:
        first = arena.put({"x": np.ones(3000, np.uint8)}, wait=lambda: None)
        waits: list[float] = []
        threading.Timer(0.3, arena.release, args=(first,)).start()
        second = arena.put({"x": np.full(3000, 7, np.uint8)}, wait=lambda: waits.append(time.monotonic()))
        assert waits, "put returned without waiting for space"
        assert second.start == 0
    finally:
        arena.close()


def test_wait_raising_gives_up_and_too_large_batches_are_refused() -> None:
    arena = FrameArena(4096)
    try:
        arena.put({"x": np.ones(3000, np.uint8)}, wait=lambda: None)

        def writer_died() -> None:
            raise RuntimeError("the writer died")

        with pytest.raises(RuntimeError, match="the writer died"):
            arena.put({"x": np.ones(3000, np.uint8)}, wait=writer_died)
        big = {"x": np.ones(5000, np.uint8)}
        assert not arena.fits(big)
        with pytest.raises(ValueError, match="does not fit"):
            arena.put(big, wait=lambda: None)
    finally:
        arena.close()


def test_a_child_process_reads_the_frames_through_the_parent_path() -> None:
    arena = FrameArena(1 << 20)
    try:
        frames = _frames(9, seed=3)
        ref = arena.put(frames, wait=lambda: None)
        code = (
            "import sys, pickle, numpy as np\n"
            "from odsd.collect.frame_arena import ArenaView\n"
            "path, ref = pickle.loads(sys.stdin.buffer.read())\n"
            "got = ArenaView(path).arrays(ref)\n"
            "sys.stdout.buffer.write(pickle.dumps({k: np.array(v) for k, v in got.items()}))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            input=pickle.dumps((arena.child_path, ref)),
            capture_output=True,
            check=True,
            timeout=120,
        )
        got = pickle.loads(out.stdout)
        for name, values in frames.items():
            np.testing.assert_array_equal(got[name], values)
    finally:
        arena.close()
