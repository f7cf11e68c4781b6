"""The store-damage battery through the LeRobot-shaped reader and ``odsd export-lerobot``.

Every kind of damage in ``odsd.testing.damage`` is refused with one line (``CorruptStoreError``;
CLI: exit 4, one ``odsd: error:`` line), or, for damage outside the committed history (a torn
trailing record, a checkpoint), the committed data is served exactly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from odsd.lerobot import OdsdLeRobotDataset
from odsd.store import CorruptStoreError
from odsd.testing.damage import DAMAGES, Damage, assert_refused, build_store, run_odsd
from odsd.testing.store import TINY_FEATURES, make_frames

FIELD = "observation.state"


@pytest.fixture(params=sorted(DAMAGES))
def damaged(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Damage]:
    store = build_store(tmp_path / "store")
    return store.root, DAMAGES[request.param](store.root)


def _expected(entries) -> np.ndarray:
    return np.concatenate([make_frames(TINY_FEATURES, e.meta.length, e.meta.seed)[FIELD] for e in entries])


def test_dataset(damaged: tuple[Path, Damage]) -> None:
    root, damage = damaged
    if damage.readers_refuse:
        with pytest.raises(CorruptStoreError) as exc:
            OdsdLeRobotDataset(root)
        assert str(damage.path) in str(exc.value) and "\n" not in str(exc.value)
        return
    ds = OdsdLeRobotDataset(root)
    np.testing.assert_array_equal(ds.view.columns[FIELD], _expected(ds.view.entries))


@pytest.mark.lerobot
def test_export_lerobot(damaged: tuple[Path, Damage], tmp_path: Path) -> None:
    pytest.importorskip("lerobot.datasets.lerobot_dataset")
    import pyarrow.parquet as pq

    root, damage = damaged
    out = tmp_path / "export"
    proc = run_odsd("export-lerobot", root, out, "--no-fsync")
    if damage.readers_refuse:
        assert_refused(proc, 4, damage.path)
        assert not out.exists()
        return
    assert proc.returncode == 0, proc.stderr
    ds = OdsdLeRobotDataset(root)
    tables = [pq.read_table(p) for p in sorted((out / "data").rglob("*.parquet"))]
    exported = np.concatenate([np.stack(t.column(FIELD).to_numpy(zero_copy_only=False)) for t in tables])
    np.testing.assert_array_equal(exported, _expected(ds.view.entries))
