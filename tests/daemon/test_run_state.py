"""RunStateStore: numbered manifests, COMPLETE written last, the newest complete one wins."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from odsd.daemon.errors import RunStateError
from odsd.daemon.run_state import COMPLETE, MANIFEST, RunStateStore, newest_run
from odsd.schema.run import RngStates, RunCounters, RunState


def make_state(sequence: int, *, iteration: int = 0, run_id: str = "r1") -> RunState:
    return RunState(
        run_id=run_id,
        incarnation=0,
        sequence=sequence,
        reason="iteration",
        watermark=sequence,
        counters=RunCounters(iteration=iteration),
        beta=0.5**iteration,
        policy_version=0,
        rng=RngStates(torch="", numpy={}, mixer={}, env_seed=0),
        config={},
        config_identity_hash="h",
        schema_hash="s",
        env_layout_hash="e",
    )


def test_write_then_read_back(tmp_path: Path) -> None:
    states = RunStateStore(tmp_path, durable=True)
    assert states.sequences() == [] and states.next_sequence() == 0
    target = states.write(make_state(0, iteration=1))
    assert target == tmp_path / "state" / "00000000"
    assert (target / COMPLETE).exists() and (target / MANIFEST).exists()
    assert states.next_sequence() == 1
    got = states.newest_complete()
    assert got == make_state(0, iteration=1).model_copy(update={"created": got.created})


def test_newest_complete_wins_and_incomplete_ones_are_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    states = RunStateStore(tmp_path, durable=False)
    for seq in range(3):
        states.write(make_state(seq, iteration=seq))
    (tmp_path / "state" / "00000002" / COMPLETE).unlink()  # crashed before COMPLETE
    (tmp_path / "state" / "00000003").mkdir()  # crashed before the manifest
    assert states.newest_complete().counters.iteration == 1
    assert sum("incomplete" in r.getMessage() for r in caplog.records) == 2
    assert states.next_sequence() == 4  # never reuses a directory


def test_a_sequence_directory_is_never_overwritten(tmp_path: Path) -> None:
    states = RunStateStore(tmp_path, durable=False)
    states.write(make_state(0))
    with pytest.raises(FileExistsError):
        states.write(make_state(0, iteration=5))
    assert states.newest_complete().counters.iteration == 0


@pytest.mark.parametrize("damage", ["truncate", "garbage", "schema", "missing"])
def test_damaged_complete_manifest_is_an_error_not_a_fallback(tmp_path: Path, damage: str) -> None:
    states = RunStateStore(tmp_path, durable=False)
    states.write(make_state(0))
    target = states.write(make_state(1, iteration=1))
    manifest = target / MANIFEST
    if damage == "truncate":
        manifest.write_bytes(manifest.read_bytes()[:40])
    elif damage == "garbage":
        manifest.write_bytes(b"\x00\xff" * 10)
    elif damage == "schema":
        manifest.write_text('{"run_id": "r1"}')
    else:
        manifest.unlink()
    with pytest.raises(RunStateError) as err:
        states.newest_complete()
    message = str(err.value)
    assert "00000001" in message and "\n" not in message
    assert err.value.exit_code == 2


def test_no_manifest_at_all(tmp_path: Path) -> None:
    with pytest.raises(RunStateError, match="no complete run-state manifest"):
        RunStateStore(tmp_path).newest_complete()
    (tmp_path / "state" / "00000000").mkdir(parents=True)
    with pytest.raises(RunStateError, match="no complete run-state manifest"):
        RunStateStore(tmp_path).newest_complete()


def test_prune_keeps_the_newest(tmp_path: Path) -> None:
    states = RunStateStore(tmp_path, durable=False, keep=3)
    for seq in range(7):
        states.write(make_state(seq, iteration=seq))
    assert states.sequences() == [4, 5, 6]
    assert states.newest_complete().counters.iteration == 6
    assert states.next_sequence() == 7


def test_prune_never_counts_incomplete_manifests(tmp_path: Path) -> None:
    states = RunStateStore(tmp_path, durable=False, keep=2)
    states.write(make_state(0))
    states.write(make_state(1, iteration=1))
    (tmp_path / "state" / "00000002").mkdir()
    states.write(make_state(3, iteration=3))
    assert states.newest_complete().counters.iteration == 3
    assert 1 in states.sequences()  # the two newest *complete* ones are kept


def test_non_numeric_entries_are_ignored(tmp_path: Path) -> None:
    states = RunStateStore(tmp_path, durable=False)
    states.write(make_state(0))
    (tmp_path / "state" / "tmp-xyz").mkdir()
    (tmp_path / "state" / "README").write_text("x")
    assert states.sequences() == [0]


def test_newest_run_is_the_most_recently_active(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with pytest.raises(RunStateError, match="no runs"):
        newest_run(runs)
    (runs / "empty").mkdir(parents=True)
    with pytest.raises(RunStateError, match="no run has a run-state manifest"):
        newest_run(runs)
    for i, name in enumerate(["b", "a", "c"]):
        RunStateStore(runs / name, durable=False).write(make_state(0, run_id=name))
        os.utime(runs / name / "state", (1000 + i, 1000 + i))
    assert newest_run(runs) == "c"
    os.utime(runs / "a" / "state", (5000, 5000))
    assert newest_run(runs) == "a"
