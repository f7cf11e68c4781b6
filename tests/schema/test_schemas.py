"""The published JSON Schemas match the pydantic models (regenerate with ``make schemas``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odsd.schema.export import expected_files

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


@pytest.mark.parametrize("name", sorted(expected_files()))
def test_schema_file_matches_model(name: str) -> None:
    path = SCHEMAS / name
    assert path.exists(), f"{path} missing; run `make schemas`"
    assert path.read_text() == expected_files()[name], f"{path} drifted from its model; run `make schemas`"


def test_no_stale_schema_files() -> None:
    stale = {p.name for p in SCHEMAS.glob("*.schema.json")} - set(expected_files())
    assert not stale, f"schema files without a model: {sorted(stale)}"
