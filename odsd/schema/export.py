"""Write the JSON Schema of every on-disk document to ``schemas/`` (``python -m odsd.schema.export DIR``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from odsd.schema.run import RunLockInfo, RunState, RunStatus
from odsd.schema.store import Checkpoint, CommitRecord, LogArchiveIndex, ReaderLease, StoreManifest

DOCUMENTS: dict[str, type[BaseModel]] = {
    "store-manifest": StoreManifest,
    "commit-record": CommitRecord,
    "checkpoint": Checkpoint,
    "log-archive-index": LogArchiveIndex,
    "reader-lease": ReaderLease,
    "run-state": RunState,
    "run-status": RunStatus,
    "run-lock": RunLockInfo,
}


def _run_config_model() -> type[BaseModel]:
    from odsd.collect.config import CollectConfig

    return CollectConfig


def render(model: type[BaseModel]) -> str:
    return json.dumps(model.model_json_schema(mode="serialization"), indent=2, sort_keys=True) + "\n"


def expected_files() -> dict[str, str]:
    """File name -> content of every schema file ``schemas/`` must hold."""
    documents = {**DOCUMENTS, "run-config": _run_config_model()}
    return {f"{name}.schema.json": render(model) for name, model in sorted(documents.items())}


def write(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in expected_files().items():
        path = out_dir / name
        path.write_text(text)
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1] if len(sys.argv) > 1 else "schemas")):
        print(path)
