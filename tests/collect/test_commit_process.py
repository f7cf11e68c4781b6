"""The writer process: real stores, real child processes, real signals."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from odsd.collect.commit_process import CommitProcess, CommitProcessError
from odsd.collect.commit_worker import CommitStats
from odsd.collect.finished import FinishedBatch, FinishedEpisode, RunInfo
from odsd.schema import CommitContext, EpisodeMeta
from odsd.store import CommitResult, Episode, EpisodeStore
from odsd.store.errors import SchemaMismatchError
from odsd.testing.processes import kill_session, wait_session_gone

FEATURES = {"x": {"dtype": "float32", "shape": [], "names": None}}
COLLECTOR_FIELDS = {
    "segment_id": {"dtype": "int16", "shape": [], "names": None},
    "policy_version": {"dtype": "int32", "shape": [], "names": None},
    "episode_step": {"dtype": "int32", "shape": [], "names": None},
    "terminated": {"dtype": "bool", "shape": [], "names": None},
    "truncated": {"dtype": "bool", "shape": [], "names": None},
    "segment_step": {"dtype": "int32", "shape": [], "names": None},
    "segment_start": {"dtype": "bool", "shape": [], "names": None},
}
"""Recorded and derived fields a FinishedBatch needs (built in the child)."""


def episode(i: int, length: int = 2) -> Episode:
    return Episode(
        frames={"x": np.full(length, i, dtype=np.float32)}, meta=EpisodeMeta(length=length, seed=i)
    )


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    EpisodeStore.create(tmp_path / "s", features=FEATURES, fps=10, durability="process")
    return tmp_path / "s"


def committed_seeds(root: Path) -> list[int]:
    snap = EpisodeStore.open(root).snapshot()
    return [snap.entry(e).meta.seed for e in snap.episode_ids]


def wait_for(pred, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_commits_in_batches_with_context_and_callbacks(store_root: Path) -> None:
    seen: list[tuple[CommitResult, CommitStats]] = []
    ctx = CommitContext(iteration=4, beta=0.5, policy_version=3)
    w = CommitProcess(
        store_root,
        run_id="r",
        writer_id="w1",
        max_batch_episodes=3,
        max_batch_age_s=60.0,
        context=lambda: ctx,
        on_commit=lambda r, s: seen.append((r, s)),
    )
    for i in range(7):
        w.submit(episode(i, length=i + 1))
    w.drain()
    assert w.depth == 0
    assert w.close() == 0
    assert committed_seeds(store_root) == list(range(7))
    assert [s.episodes for _, s in seen] == [3, 3, 1]
    assert [s.frames for _, s in seen] == [6, 15, 7]
    store = EpisodeStore.open(store_root)
    records = [store.log.read(r.seq) for r, _ in seen]
    assert {rec.writer_id for rec in records} == {"w1"} and all(rec.context == ctx for rec in records)


def test_finished_batches_get_their_metadata_in_the_child(store_root: Path, tmp_path: Path) -> None:
    features = {**FEATURES, **COLLECTOR_FIELDS}
    root = tmp_path / "f"
    EpisodeStore.create(root, features=features, fps=10, durability="process")
    run = RunInfo("r", "w2", 7, "task", "planner:t", "1", ("reach", "grasp"), True, tuple(features))
    eps = [
        FinishedEpisode(3, 0, True, True, False, 2, 0.25, "a", "b", True, False),
        FinishedEpisode(2, 1, False, False, True, 2, 0.25, "c", "d", True, False),
    ]
    frames = {
        "x": np.arange(5, dtype=np.float32),
        "segment_id": np.array([0, 1, 1, 0, 0], dtype=np.int16),
        "policy_version": np.array([5, 5, 6, 6, 6], dtype=np.int32),
    }
    w = CommitProcess(root, run_id="r", writer_id="w2")
    w.submit(FinishedBatch(frames, np.array([0, 3, 5]), eps, run))
    w.close()
    snap = EpisodeStore.open(root).snapshot()
    metas = [snap.entry(e).meta for e in snap.episode_ids]
    assert [m.success for m in metas] == [True, False]
    assert [m.terminal_reason for m in metas] == ["success", "truncated"]
    assert [(m.policy_version_first, m.policy_version_last) for m in metas] == [(5, 6), (6, 6)]
    assert [[(r.name, r.start, r.end) for r in m.segments] for m in metas] == [
        [("reach", 0, 1), ("grasp", 1, 3)],
        [("reach", 0, 2)],
    ]
    assert snap.read("episode_step").tolist() == [0, 1, 2, 0, 1]
    assert snap.read("truncated").tolist() == [False, False, False, False, True]
    assert snap.read("segment_start").tolist() == [True, True, False, True, False]


def test_finished_frames_travel_through_a_small_arena_and_large_batches_pickled(tmp_path: Path) -> None:
    """Batches share a 4 KiB frame arena (space is reused as commits free it); one too large for it
    is pickled instead; every frame arrives exactly."""
    features = {"x": {"dtype": "float32", "shape": [16], "names": None}, **COLLECTOR_FIELDS}
    root = tmp_path / "a"
    EpisodeStore.create(root, features=features, fps=10, durability="process")
    run = RunInfo("r", "wa", 7, "task", None, None, ("reach",), False, tuple(features))
    rng = np.random.default_rng(0)
    sent = []
    w = CommitProcess(root, run_id="r", writer_id="wa", max_batch_episodes=1, frame_arena_bytes=4096)
    for length in [3, 5, 2, 40, 4, 6]:  # 40 frames x 64 B of x alone: more than the arena
        x = rng.standard_normal((length, 16)).astype(np.float32)
        frames = {
            "x": x,
            "segment_id": np.zeros(length, np.int16),
            "policy_version": np.zeros(length, np.int32),
        }
        ep = FinishedEpisode(length, 0, False, False, True, 0, 1.0, "a", "b", True, False)
        w.submit(FinishedBatch(frames, np.array([0, length]), [ep], run))
        sent.append(x)
    w.drain()
    assert w.close() == 0
    snap = EpisodeStore.open(root).snapshot()
    np.testing.assert_array_equal(snap.read("x"), np.concatenate(sent))
    assert [snap.entry(e).meta.length for e in snap.episode_ids] == [3, 5, 2, 40, 4, 6]


def test_close_with_discard_drops_what_is_not_committed(store_root: Path) -> None:
    w = CommitProcess(store_root, run_id="r", writer_id="w3", max_batch_episodes=1000, max_batch_age_s=60.0)
    w.submit(episode(0))
    w.drain()
    for i in range(1, 5):
        w.submit(episode(i))
    assert w.close(discard_pending=True) == 4
    assert committed_seeds(store_root) == [0]


def test_a_store_that_cannot_be_opened_is_one_clear_error(tmp_path: Path) -> None:
    w = CommitProcess(tmp_path / "missing", run_id="r", writer_id="w4")
    with pytest.raises(Exception, match="missing") as info:
        w.submit(episode(0))
        w.drain(timeout_s=60)
    assert "Traceback" not in str(info.value)
    with pytest.raises(Exception, match="missing"):
        w.close()


def test_a_commit_error_comes_back_with_its_type_and_message(store_root: Path) -> None:
    w = CommitProcess(store_root, run_id="r", writer_id="w5", max_batch_episodes=1)
    bad = Episode(frames={"y": np.zeros(2, np.float32)}, meta=EpisodeMeta(length=2))
    w.submit(bad)
    with pytest.raises(SchemaMismatchError, match=r"missing \['x'\], unexpected \['y'\]"):
        w.drain(timeout_s=60)
    assert w.failed


def writer_with_one_commit(store_root: Path, writer_id: str) -> tuple[CommitProcess, int]:
    """A writer process that has committed ``episode(0)``, and its pid."""
    w = CommitProcess(store_root, run_id="r", writer_id=writer_id, max_batch_episodes=1)
    w.submit(episode(0))
    w.drain()
    assert w.pid is not None
    return w, w.pid


def test_a_killed_writer_process_is_reported_and_committed_data_stays(store_root: Path) -> None:
    w, pid = writer_with_one_commit(store_root, "w6")
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: w.failed)
    with pytest.raises(CommitProcessError, match="writer process died"):
        w.submit(episode(1))
    with pytest.raises(CommitProcessError):
        w.close()
    assert committed_seeds(store_root) == [0]


def test_the_writer_process_ignores_sigint_and_sigterm(store_root: Path) -> None:
    w, pid = writer_with_one_commit(store_root, "w7")
    os.kill(pid, signal.SIGINT)
    os.kill(pid, signal.SIGTERM)
    w.submit(episode(1))
    w.drain()
    w.close()
    assert committed_seeds(store_root) == [0, 1]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_the_writer_process_dies_with_a_killed_parent(store_root: Path, tmp_path: Path) -> None:
    """A script without a __main__ guard (spawn must not re-run it) starts a writer, then is killed."""
    pid_file = tmp_path / "child.pid"
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import time
            from odsd.collect.commit_process import CommitProcess
            w = CommitProcess({str(store_root)!r}, run_id="r", writer_id="w8")
            w.drain()
            open({str(pid_file)!r}, "w").write(str(w.pid))
            time.sleep(60)
            """
        )
    )
    parent = subprocess.Popen([sys.executable, str(script)])
    try:
        assert wait_for(pid_file.exists, timeout=60), "the writer never started"
        child = int(pid_file.read_text())
        parent.kill()
        parent.wait(timeout=10)

        def gone() -> bool:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return True
            # a zombie until init reaps it counts as dead
            stat = Path(f"/proc/{child}/stat")
            return not stat.exists() or stat.read_text().split()[2] == "Z"

        assert wait_for(gone, timeout=10), "the writer process outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_collector_inside_a_pool_worker_commits_from_a_thread(tmp_path: Path) -> None:
    script = tmp_path / "pool_parent.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import multiprocessing as mp
            from pathlib import Path

            def collect(store):
                from odsd.collect import CollectConfig, Collector
                cfg = CollectConfig(mode="expert_demo", task="reach", expert="planner", num_envs=2,
                                    max_episodes=3, store=Path(store))
                return Collector(cfg).run().episodes_committed

            if __name__ == "__main__":
                with mp.get_context("spawn").Pool(1) as pool:
                    print("committed", pool.apply(collect, ({str(tmp_path / "s")!r},)))
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "committed 3" in out.stdout
    assert "committing from a thread instead" in out.stderr
    assert len(EpisodeStore.open(tmp_path / "s").snapshot().episode_ids) == 3


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
@pytest.mark.parametrize("moment", ["writer-starting", "writer-ready", "random"])
def test_no_process_survives_a_parent_killed_at_any_moment(
    store_root: Path, tmp_path: Path, moment: str
) -> None:
    """SIGKILL of the parent while its writer child is still starting (importing, before it could
    arm PDEATHSIG), once it is ready, or at a random moment: no process of the parent's session
    (the writer, multiprocessing's resource tracker) outlives it."""
    script = textwrap.dedent(
        f"""
        from odsd.collect.commit_process import CommitProcess
        w = CommitProcess({str(store_root)!r}, run_id="r", writer_id="w9")
        print("started", w.pid, flush=True)
        w.wait_ready()
        print("ready", flush=True)
        w.drain()
        import time
        time.sleep(60)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert parent.stdout is not None
        started = parent.stdout.readline().split()
        assert started[0] == "started", started
        if moment == "writer-ready":
            assert parent.stdout.readline().strip() == "ready"
        elif moment == "random":
            time.sleep(random.uniform(0.0, 2.0))
        parent.kill()
        parent.wait(timeout=10)
        survivors = wait_session_gone(parent.pid)
        assert survivors == {}, f"outlived their killed parent: {survivors}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        kill_session(parent.pid)


def test_the_writer_process_imports_no_torch() -> None:
    """What the child imports (commit_process, auto-compaction, the store) leaves torch out: it
    costs seconds of CPU at every start, on the core the collection loop shares."""
    code = (
        "import sys\n"
        "import odsd.collect.commit_process, odsd.collect.auto_compact, odsd.collect.config, odsd.store\n"
        "from odsd.collect.commit_process import _child_main\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'lerobot', 'gymnasium')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", out.stdout
