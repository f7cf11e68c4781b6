"""Shared fixtures: a small feature schema and a fresh episode store in a temporary directory."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odsd.store import EpisodeStore
from odsd.testing.store import TINY_FEATURES

LAVAPIPE_ICD = Path(__file__).resolve().parents[1] / ".tools" / "mesa" / "lvp_icd.json"


def _use_project_vulkan() -> None:
    """SAPIEN (the ManiSkill tests) needs a Vulkan device: without an NVIDIA GPU use the Mesa
    lavapipe that ``make vulkan`` (tools/vulkan-cpu) unpacked, unless VK_ICD_FILENAMES is set."""
    if "VK_ICD_FILENAMES" not in os.environ and LAVAPIPE_ICD.is_file() and not shutil.which("nvidia-smi"):
        os.environ["VK_ICD_FILENAMES"] = str(LAVAPIPE_ICD)


_use_project_vulkan()


@pytest.fixture
def features() -> dict[str, dict[str, Any]]:
    """A small schema with float, bool and int fields (see ``odsd.testing.store.TINY_FEATURES``)."""
    return {name: dict(spec) for name, spec in TINY_FEATURES.items()}


@pytest.fixture
def tmp_store(tmp_path: Path, features: dict[str, dict[str, Any]]) -> EpisodeStore:
    """An empty store with ``features`` at fps 10 and process-crash durability (fast)."""
    return EpisodeStore.create(tmp_path / "store", features=features, fps=10, durability="process")


class Tmpfs:
    """Real small filesystems (tmpfs) under a test's ``tmp_path``, unmounted at teardown."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.mounted: list[Path] = []

    def mount(self, name: str, size: str = "8m") -> Path:
        point = self.base / name
        point.mkdir()
        cmd = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN): {proc.stderr.strip()}")
        self.mounted.append(point)
        return point

    def read_only(self, point: Path) -> None:
        """Remount ``point`` read-only (chmod does not stop root)."""
        subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)

    def unmount_all(self) -> None:
        for point in reversed(self.mounted):
            subprocess.run(["umount", "-l", str(point)], check=False)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Tmpfs]:
    """``tmpfs.mount(name, size)``: a real small filesystem at ``tmp_path/name`` (skipped where
    mounting is not permitted); ``tmpfs.read_only(point)`` remounts it read-only."""
    mounts = Tmpfs(tmp_path)
    yield mounts
    mounts.unmount_all()


@pytest.fixture(scope="module")
def module_tmpfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tmpfs]:
    """:func:`tmpfs` shared by a test module (a read-only store built once for many cases)."""
    mounts = Tmpfs(tmp_path_factory.mktemp("tmpfs"))
    yield mounts
    mounts.unmount_all()
