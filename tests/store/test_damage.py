"""The store-damage battery: every kind of on-disk damage in ``odsd.testing.damage`` is detected.

For each kind: ``odsd store fsck`` (and ``--repair``) exits 4 naming the damaged file; ``odsd store
inspect`` and the ``Snapshot`` reader refuse with one line, or, for damage outside the committed
history (a torn trailing record, a checkpoint), serve exactly the committed data.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from odsd.store import CorruptStoreError, EpisodeStore
from odsd.testing.damage import COMMITS, DAMAGES, Damage, assert_refused, build_store, run_odsd
from odsd.testing.store import check_snapshot


@pytest.fixture(params=sorted(DAMAGES))
def damaged(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Damage]:
    store = build_store(tmp_path / "store")
    return store.root, DAMAGES[request.param](store.root)


def _findings_name(report: dict, path: Path) -> bool:
    return any(str(path) in f["path"] or str(path) in f["message"] for f in report["findings"])


@pytest.mark.parametrize("repair", [False, True], ids=["check", "repair"])
def test_fsck_exits_4_naming_the_file(damaged: tuple[Path, Damage], repair: bool) -> None:
    root, damage = damaged
    args = ["store", "fsck", root, "--json", *(["--repair"] if repair else [])]
    proc = run_odsd(*args)
    if damage.kind == "deleted_log":  # nothing to check without a log: the store does not open
        assert_refused(proc, 4, damage.path)
        return
    assert proc.returncode == 4, f"{damage.kind}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    report = json.loads(proc.stdout)
    assert not report["ok"]
    errors = {"findings": [f for f in report["findings"] if f["severity"] == "error"]}
    assert _findings_name(errors, damage.path), f"{damage.kind}: {damage.path} not named in {errors}"


def test_fsck_text_output(damaged: tuple[Path, Damage]) -> None:
    root, damage = damaged
    proc = run_odsd("store", "fsck", root)
    assert proc.returncode == 4 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert str(damage.path) in proc.stdout + proc.stderr


def test_inspect(damaged: tuple[Path, Damage]) -> None:
    root, damage = damaged
    proc = run_odsd("store", "inspect", root, "--json")
    if damage.inspect_detects:
        assert_refused(proc, 4, damage.path)
    else:
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr


def test_snapshot_reader(damaged: tuple[Path, Damage]) -> None:
    root, damage = damaged
    if damage.readers_refuse:
        with pytest.raises(CorruptStoreError) as exc:
            EpisodeStore.open(root).snapshot().load()
        message = str(exc.value)
        assert str(damage.path) in message and "\n" not in message, message
        return
    snap = EpisodeStore.open(root).snapshot()
    expected = COMMITS - 2 if damage.kind == "torn_tail" else COMMITS - 1
    assert snap.watermark == expected
    check_snapshot(snap)  # every value returned is the committed one


SEGMENT_DAMAGES = sorted(
    k for k in DAMAGES if k.startswith(("missing_", "flipped_chunk", "truncated_", "meta_"))
)


@pytest.mark.parametrize("kind", [*SEGMENT_DAMAGES, "symlink_out"])
def test_snapshot_reads_one_episode_of_the_damaged_segment(tmp_path: Path, kind: str) -> None:
    """The per-episode path (no column loaded) refuses like the column path; other segments stay readable."""
    root = build_store(tmp_path / "store").root
    damage = DAMAGES[kind](root)
    snap = EpisodeStore.open(root).snapshot()
    by_commit = {e.commit_seq: e.episode_id for e in snap.entries}
    with pytest.raises(CorruptStoreError) as exc:
        snap.episode(by_commit[1])
    assert str(damage.path) in str(exc.value)
    snap.episode(by_commit[0])


def test_collect_commits_past_a_torn_trailing_record(tmp_path: Path) -> None:
    """One flipped byte in the newest record does not stop `odsd collect`; fsck still tells."""
    store = tmp_path / "store"
    args = ["collect", "--mode", "expert_demo", "--task", "reach", "--num-envs", "2", "--max-episodes", "2"]
    args += ["--keep-failed", "--durability", "process", "--store", str(store)]
    first = run_odsd(*args, "--run-id", "first")
    assert first.returncode == 0, first.stderr
    damage = DAMAGES["torn_tail"](store)
    before = EpisodeStore.open(store).snapshot()
    second = run_odsd(*args, "--run-id", "second")
    assert second.returncode == 0, second.stderr
    assert "Traceback" not in second.stderr
    snap = EpisodeStore.open(store).snapshot()
    runs = [e.meta.run_id for e in snap.entries]
    assert runs[: before.num_episodes] == ["first"] * before.num_episodes and "second" in runs
    assert snap.watermark > before.watermark
    report = json.loads(run_odsd("store", "fsck", store, "--json").stdout)
    assert report["ok"], report
    quarantined = [
        f for f in report["findings"] if f["path"].startswith(str(damage.path.parent / "_quarantine"))
    ]
    assert quarantined and quarantined[0]["severity"] == "warning"
