"""A store on a filesystem that fills up: ``odsd collect`` and ``odsd resume`` end with one line
(exit 6) that reports exactly what is committed, leave no temporaries, lose nothing committed, and
the run resumes once space is freed."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from daemon_helpers import assert_no_partial_episodes, assert_one_line_error, episodes_table, odsd

from odsd.store import EpisodeStore

RUN = "full"


def args(store: Path, *, run_id: str = RUN, max_iterations: int = 100_000) -> list[str]:
    return [
        "collect", "--mode", "dagger_sync", "--task", "reach", "--num-envs", "16",
        "--episodes-per-iteration", "32", "--max-iterations", str(max_iterations), "--store", str(store),
        "--run-id", run_id, "--durability", "process", "--seed", "1",
    ]  # fmt: skip


def run_episodes(store: Path) -> int:
    snap = EpisodeStore.open(store).snapshot()
    return sum(1 for e in snap.episode_ids if snap.entry(e).meta.run_id == RUN)


def temporaries(root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.name.endswith(".partial")]


def reported(error: str) -> int:
    match = re.search(r"stopped with (\d+) episodes committed", error)
    assert match, error
    return int(match.group(1))


@pytest.mark.slow
def test_a_full_disk_is_one_line_exact_count_and_resume_continues_after_space_is_freed(tmpfs) -> None:
    mount = tmpfs.mount("small", size="16m")
    store = mount / "store"
    created = odsd(*args(store, run_id="first", max_iterations=1))
    assert created.returncode == 0, created.stderr[-2000:]
    # Leave ~1.5 MB: the run fills it within a few iterations.
    ballast = mount / "ballast"
    ballast.write_bytes(b"\0" * (shutil.disk_usage(mount).free - 1_500_000))

    full = odsd(*args(store), timeout=400)
    assert full.returncode == 6, full.stderr[-3000:]
    error = assert_one_line_error(full)
    assert "no space left on device" in error and str(store) in error
    assert reported(error) == run_episodes(store) > 0, "the reported count is not what is committed"
    assert temporaries(store) == []
    committed = episodes_table(store)
    assert_no_partial_episodes(store)

    # Still full: resume fails the same way, and loses nothing.
    again = odsd("resume", store, "--run", RUN, timeout=400)
    assert again.returncode == 6, again.stderr[-3000:]
    error = assert_one_line_error(again)
    assert "no space left on device" in error
    assert reported(error) == run_episodes(store)
    assert temporaries(store) == []
    assert episodes_table(store)[: len(committed)] == committed

    # Space freed: the run continues and what was committed stays.
    ballast.unlink()
    before = run_episodes(store)
    done = odsd("resume", store, "--run", RUN, "--max-iterations", str(before // 32 + 2), timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert run_episodes(store) > before
    assert episodes_table(store)[: len(committed)] == committed
    fsck = odsd("store", "fsck", store)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert not (store / "runs" / RUN / "lock").exists()
