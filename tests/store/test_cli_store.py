"""``odsd store …`` commands, run as a user would: ``python -m odsd`` in a subprocess.

Contract: every user-caused error prints exactly one stderr line starting ``odsd: error:`` and
no traceback; exit codes 2 usage/config, 3 store error, 4 corrupt store (fsck: errors found).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from odsd.store import MANIFEST, EpisodeStore
from odsd.store.log import LOG_DIR, QUARANTINE_DIR, record_name
from odsd.store.segments import write_segment
from odsd.testing.store import check_snapshot, make_episode, make_frames

REPO = Path(__file__).resolve().parents[2]


def odsd(*args: str | Path, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "odsd", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    if check is not None:
        assert proc.returncode == check, (
            f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
    return proc


def odsd_json(*args: str | Path, check: int | None = 0) -> dict[str, Any]:
    proc = odsd(*args, "--json", check=check)
    return json.loads(proc.stdout)


def assert_one_line_error(
    proc: subprocess.CompletedProcess[str], code: int | tuple[int, ...], *needles: str
) -> str:
    codes = (code,) if isinstance(code, int) else code
    assert proc.returncode in codes, f"exit {proc.returncode}, expected {codes}; stderr: {proc.stderr}"
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {lines}"
    assert lines[0].startswith("odsd: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


@pytest.fixture
def features_file(tmp_path: Path, features: dict[str, Any]) -> Path:
    path = tmp_path / "features.json"
    path.write_text(json.dumps(features))
    return path


@pytest.fixture
def populated(tmp_store: EpisodeStore, features: dict[str, Any]) -> EpisodeStore:
    """5 commits / 6 episodes of two runs, 3 iterations."""
    for i in range(5):
        writer = tmp_store.writer(run_id=f"run-{i % 2}")
        eps = [make_episode(features, 4 + i, seed=i, iteration=i % 3)]
        if i == 2:
            eps.append(make_episode(features, 3, seed=100, iteration=2))
        writer.commit(eps)
    return tmp_store


def _record(store: EpisodeStore, seq: int) -> Path:
    return store.root / LOG_DIR / record_name(seq)


# -- init / inspect ------------------------------------------------------------------------------


def test_init_and_inspect_empty(tmp_path: Path, features_file: Path, features: dict[str, Any]) -> None:
    path = tmp_path / "new-store"
    odsd("store", "init", path, "--features", features_file, "--fps", "15")
    info = odsd_json("store", "inspect", path)
    assert info["watermark"] == -1 and info["episodes"] == 0 and info["frames"] == 0 and info["bytes"] == 0
    assert (
        info["format_version"] == 1 and info["segments"] == 0 and info["shards"] == 0 and info["runs"] == []
    )
    store = EpisodeStore.open(path)
    assert info["store_id"] == store.manifest.store_id
    assert store.manifest.fps == 15 and set(store.features) == set(features)
    human = odsd("store", "inspect", path)
    assert store.manifest.store_id in human.stdout
    odsd(
        "store",
        "init",
        tmp_path / "fast",
        "--features",
        features_file,
        "--fps",
        "10",
        "--durability",
        "process",
    )
    assert EpisodeStore.open(tmp_path / "fast").watermark == -1


def test_init_errors(tmp_path: Path, features_file: Path, tmp_store: EpisodeStore) -> None:
    assert_one_line_error(
        odsd("store", "init", tmp_store.root, "--features", features_file, "--fps", "10", check=None),
        3,
        str(tmp_store.root),
        "already exists",
    )
    missing = tmp_path / "nope.json"
    assert_one_line_error(
        odsd("store", "init", tmp_path / "a", "--features", missing, "--fps", "10", check=None),
        2,
        str(missing),
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert_one_line_error(
        odsd("store", "init", tmp_path / "b", "--features", bad, "--fps", "10", check=None), 2, str(bad)
    )
    bad.write_text(json.dumps({"x": {"dtype": "complex128", "shape": [2]}}))
    assert_one_line_error(
        odsd("store", "init", tmp_path / "c", "--features", bad, "--fps", "10", check=None),
        (2, 3),
        "complex128",
    )
    assert not (tmp_path / "c" / MANIFEST).exists()
    proc = odsd("store", "init", tmp_path / "d", "--features", features_file, check=None)  # no --fps
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "--fps" in proc.stderr
    assert_one_line_error(
        odsd(
            "store",
            "init",
            tmp_path / "e",
            "--features",
            features_file,
            "--fps",
            "10",
            "--durability",
            "sometimes",
            check=None,
        ),
        2,
    )


def test_inspect_populated(populated: EpisodeStore) -> None:
    info = odsd_json("store", "inspect", populated.root)
    snap = populated.snapshot()
    assert (info["watermark"], info["episodes"], info["frames"]) == (4, 6, snap.num_frames)
    assert info["segments"] == 5 and info["shards"] == 0
    state = populated.refresh()
    assert info["bytes"] == sum(state.segments[s].nbytes for s in snap.segments) > 0
    assert set(info["runs"]) == {"run-0", "run-1"}
    old = odsd_json("store", "inspect", populated.root, "--watermark", "1")
    assert (old["watermark"], old["episodes"], old["frames"]) == (1, 2, 4 + 5)


def test_inspect_errors(tmp_path: Path, populated: EpisodeStore) -> None:
    assert_one_line_error(
        odsd("store", "inspect", tmp_path / "missing", check=None), 3, str(tmp_path / "missing")
    )
    (tmp_path / "plain").mkdir()
    assert_one_line_error(odsd("store", "inspect", tmp_path / "plain", check=None), 3, "not an odsd store")
    # A watermark beyond the log is a usage/store error, not corruption.
    assert_one_line_error(
        odsd("store", "inspect", populated.root, "--watermark", "99", check=None), (2, 3), "99"
    )


def test_wrong_format_version(populated: EpisodeStore) -> None:
    manifest = populated.root / MANIFEST
    body = json.loads(manifest.read_text())
    body["format_version"] = 7
    manifest.write_text(json.dumps(body))
    for cmd in (("inspect",), ("fsck",), ("vacuum",)):
        line = assert_one_line_error(odsd("store", *cmd, populated.root, check=None), 3, str(manifest))
        assert "format version 7" in line


# -- damage: reported with its path, exit 4, never a traceback -----------------------------------


def test_truncated_record_in_history(populated: EpisodeStore) -> None:
    path = _record(populated, 2)
    path.write_bytes(path.read_bytes()[:-25])
    assert_one_line_error(
        odsd("store", "inspect", populated.root, check=None), 4, str(path), "damaged record"
    )
    report = odsd_json("store", "fsck", populated.root, check=4)
    assert report["ok"] is False
    assert [f["path"] for f in report["findings"] if f["severity"] == "error"] == [str(path)]
    human = odsd("store", "fsck", populated.root, check=4)
    assert str(path) in human.stdout + human.stderr and "Traceback" not in human.stderr


def test_flipped_byte_in_chunk(populated: EpisodeStore) -> None:
    seg = populated.root / populated.snapshot().entry(3).segment
    (chunk,) = [p for p in (seg / "action.expert").rglob("*") if p.is_file() and p.name != "zarr.json"]
    data = bytearray(chunk.read_bytes())
    data[-6] ^= 0x01
    chunk.write_bytes(bytes(data))
    report = odsd_json("store", "fsck", populated.root, check=4)
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    assert (
        len(errors) == 1
        and errors[0]["path"] == str(seg)
        and str(seg / "action.expert") in errors[0]["message"]
    )
    assert odsd_json("store", "fsck", populated.root, "--quick")["ok"] is True
    # Commands that read the data fail with one line naming the damaged array.
    assert_one_line_error(
        odsd("store", "compact", populated.root, "--small-frames", "1000", check=None),
        4,
        str(seg / "action.expert"),
    )
    assert chunk.read_bytes() == bytes(data), "nothing was rewritten"


def test_missing_segment_directory(populated: EpisodeStore) -> None:
    seg = populated.root / populated.snapshot().entry(1).segment
    shutil.rmtree(seg)
    report = odsd_json("store", "fsck", populated.root, check=4)
    assert [(f["path"], f["severity"]) for f in report["findings"]] == [(str(seg), "error")]
    assert odsd("store", "fsck", populated.root, "--quick", check=4)
    assert_one_line_error(
        odsd("store", "compact", populated.root, "--small-frames", "1000", check=None), 4, str(seg), "missing"
    )


def test_torn_trailing_record_repair(populated: EpisodeStore, features: dict[str, Any]) -> None:
    torn = _record(populated, 4)
    torn.write_bytes(torn.read_bytes()[:50])
    info = odsd_json("store", "inspect", populated.root)
    assert info["watermark"] == 3 and info["episodes"] == 5, "readers ignore a torn tail"
    report = odsd_json("store", "fsck", populated.root, check=4)
    assert [(f["path"], f["repairable"]) for f in report["findings"] if f["severity"] == "error"] == [
        (str(torn), True)
    ]
    repaired = odsd_json("store", "fsck", populated.root, "--repair", check=None)
    assert any(str(torn.name) in line for line in repaired["repaired"])
    assert not torn.exists() and (populated.root / LOG_DIR / QUARANTINE_DIR / torn.name).exists()
    after = odsd_json("store", "fsck", populated.root)
    assert after["ok"] is True and after["watermark"] == 3
    res = EpisodeStore.open(populated.root).writer().commit([make_episode(features, 2, seed=7)])
    assert res.seq == 4


def test_leftovers_need_grace_zero(populated: EpisodeStore, features: dict[str, Any]) -> None:
    root = populated.root
    orphan = "segments/w-crashed/000000000000-abcdef"
    write_segment(root, orphan, make_frames(features, 3, 1), populated.features, durable=False)
    partial = root / LOG_DIR / f".{record_name(5)}.0badf00d.partial"
    partial.write_bytes(b'{"se')
    report = odsd_json("store", "fsck", populated.root)
    assert report["ok"] is True
    assert {f["path"] for f in report["findings"]} == {str(root / orphan), str(partial)}
    assert all(f["severity"] == "warning" for f in report["findings"])
    odsd("store", "fsck", root, "--repair")
    assert (root / orphan).exists() and partial.exists(), "default grace protects in-flight writes"
    repaired = odsd_json("store", "fsck", root, "--repair", "--grace", "0")
    assert len(repaired["repaired"]) == 2
    assert not (root / orphan).exists() and not partial.exists()
    clean = odsd_json("store", "fsck", root)
    assert clean["ok"] is True and clean["findings"] == [] and clean["episodes"] == 6
    assert "ok" in odsd("store", "fsck", root).stdout


# -- maintenance ---------------------------------------------------------------------------------


def test_compact_retain_vacuum(populated: EpisodeStore) -> None:
    root = populated.root
    before = populated.snapshot().load()
    result = odsd_json("store", "compact", root, "--small-frames", "1000", "--shard-frames", "1000")
    assert len(result["shards"]) == 1 and result["merged_segments"] == 5 and result["episodes"] == 6
    info = odsd_json("store", "inspect", root)
    assert (info["segments"], info["shards"], info["episodes"], info["watermark"]) == (0, 1, 6, 5)
    after = EpisodeStore.open(root).snapshot()
    for name in before.features:
        assert (after.read(name) == before.read(name)).all()

    removed = odsd_json("store", "retain", root, "--max-episodes", "4")
    assert removed["removed"] == [0, 1]
    assert odsd_json("store", "inspect", root)["episodes"] == 4
    assert_one_line_error(odsd("store", "retain", root, check=None), 2, "--max-episodes")
    assert odsd("store", "retain", root, "--max-episodes", "-1", check=None).returncode == 2

    # Vacuum: the 5 old segments died at the compaction; default grace keeps them.
    kept = odsd_json("store", "vacuum", root)
    assert kept["deleted"] == [] and len(kept["kept_for_grace"]) == 5
    dry = odsd_json("store", "vacuum", root, "--grace", "0", "--dry-run")
    assert len(dry["deleted"]) == 5 and all((root / p).exists() for p in dry["deleted"])
    pinned = EpisodeStore.open(root).snapshot(3, lease=True)  # a reader in this process pins watermark 3
    leased = odsd_json("store", "vacuum", root, "--grace", "0")
    assert leased["deleted"] == [] and len(leased["kept_for_lease"]) == 5
    check_snapshot(pinned)
    pinned.close()
    done = odsd_json("store", "vacuum", root, "--grace", "0")
    assert sorted(done["deleted"]) == sorted(dry["deleted"]) and done["freed_bytes"] > 0
    assert not any((root / p).exists() for p in done["deleted"])
    check_snapshot(EpisodeStore.open(root).snapshot())
    assert odsd_json("store", "fsck", root)["findings"] == []


def test_retain_by_bytes(populated: EpisodeStore) -> None:
    assert odsd_json("store", "retain", populated.root, "--max-frames", "100000")["removed"] == []
    result = odsd_json("store", "retain", populated.root, "--max-bytes", "1")
    assert result["removed"] == list(range(6))
    assert odsd_json("store", "inspect", populated.root)["episodes"] == 0


def test_usage_errors(tmp_path: Path) -> None:
    proc = odsd("store", "frobnicate", tmp_path, check=None)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    proc = odsd("store", "inspect", check=None)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
