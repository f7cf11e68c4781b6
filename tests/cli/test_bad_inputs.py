"""Mistakes a user can make, through the real ``odsd`` CLI: each is one ``odsd: error:`` line on
stderr with its documented exit code (docs/cli.md), never a traceback, an exit 0 or silence."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from cli_helpers import odsd

BAD_EXPERTS = textwrap.dedent(
    """
    from odsd.experts.planners import make_planner


    def raising(env_spec):
        raise ValueError("boom while building")


    def strict(env_spec, gain=1.0):
        return make_planner(env_spec)


    class _ActRaises:
        def __init__(self, env_spec):
            self._planner = make_planner(env_spec)
            self.spec = self._planner.spec

        def reset(self, env_ids, obs, info):
            self._planner.reset(env_ids, obs, info)

        def act(self, obs, env_ids):
            raise RuntimeError("boom while acting")


    def act_raises(env_spec):
        return _ActRaises(env_spec)
    """
)


@dataclass(frozen=True)
class Places:
    root: Path  # scratch directory (also on PYTHONPATH: the bad experts module)
    store: Path  # a store with one committed run, "base"
    ro_store: Path  # the same on a read-only filesystem
    ro_dir: Path  # an empty directory on a read-only filesystem
    regular_file: Path


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory, module_tmpfs) -> Places:
    root = tmp_path_factory.mktemp("bad-inputs")
    (root / "bad_experts.py").write_text(BAD_EXPERTS)
    (root / "a-file").write_text("not a directory")
    mount = module_tmpfs.mount("ro", size="16m")
    for store in (root / "store", mount / "store"):
        made = odsd(*collect(store), "--run-id", "base")
        assert made.returncode == 0, made.stderr[-2000:]
    (mount / "empty").mkdir()
    module_tmpfs.read_only(mount)
    return Places(root, root / "store", mount / "store", mount / "empty", root / "a-file")


def collect(store: Path | str) -> list[str]:
    return [
        "collect", "--task", "reach", "--num-envs", "2", "--max-episodes", "2",
        "--episodes-per-iteration", "2", "--durability", "process", "--store", str(store),
    ]  # fmt: skip


NEW = "{root}/new-store"
CASES: list[tuple[str, list[str], int, str]] = [
    # (id, argv, exit code, text the error line contains); {root}, {store}, ... are filled from Places
    ("device-garbage", [*collect(NEW), "--device", "cuda:abc"], 2, "cuda:abc"),
    ("device-index-beyond-count", [*collect(NEW), "--device", "cuda:999"], 2, "cuda:999"),
    ("device-unknown-type", [*collect(NEW), "--device", "tpu"], 2, "tpu"),
    ("seed-negative", [*collect(NEW), "--seed", "-1"], 2, "seed"),
    ("seed-above-2**63", [*collect(NEW), "--seed", str(2**63 + 1)], 2, "seed"),
    ("seed-2**64", [*collect(NEW), "--seed", str(2**64)], 2, "seed"),
    ("planner-kwargs-unknown", [*collect(NEW), "--set", "expert_kwargs.foo=1"], 2, "foo"),
    (
        "factory-kwargs-unknown",
        [*collect(NEW), "--expert", "bad_experts:strict", "--set", "expert_kwargs.foo=1"],
        2,
        "foo",
    ),
    ("expert-factory-raises", [*collect(NEW), "--expert", "bad_experts:raising"], 1, "bad_experts:raising"),
    ("expert-act-raises", [*collect(NEW), "--expert", "bad_experts:act_raises"], 1, "bad_experts:act_raises"),
    ("run-id-empty", [*collect(NEW), "--run-id", ""], 2, "run id"),
    ("metrics-textfile-no-dir", [*collect(NEW), "--metrics-textfile", "{root}/no-dir/m.prom"], 2, "no-dir"),
    ("store-under-a-file", collect("{regular_file}/store"), 3, "not a directory"),
    ("fsck-grace-negative", ["store", "fsck", "{store}", "--grace", "-1"], 2, "--grace"),
    ("inspect-watermark-negative", ["store", "inspect", "{store}", "--watermark", "-1"], 2, "--watermark"),
    ("check-env-unknown-task", ["check-env", "no_such_task"], 2, "no_such_task"),
    ("check-env-bad-device", ["check-env", "reach", "--device", "cuda:abc"], 2, "cuda:abc"),
    ("learn-bad-device", ["learn", "{store}", "--device", "cuda:abc"], 2, "cuda:abc"),
    ("ro-collect", [*collect("{ro_store}"), "--run-id", "new"], 6, "read-only file system"),
    ("ro-resume", ["resume", "{ro_store}", "--run", "base"], 6, "read-only file system"),
    ("ro-compact", ["store", "compact", "{ro_store}"], 6, "read-only file system"),
    ("ro-retain", ["store", "retain", "{ro_store}", "--max-episodes", "1"], 6, "read-only file system"),
    ("ro-vacuum", ["store", "vacuum", "{ro_store}"], 6, "read-only file system"),
    ("ro-fsck-repair", ["store", "fsck", "{ro_store}", "--repair"], 6, "read-only file system"),
    ("ro-export-into", ["export-lerobot", "{store}", "{ro_dir}/out"], 6, "read-only file system"),
]
if not torch.cuda.is_available():
    CASES.append(("device-cuda-without-gpu", [*collect(NEW), "--device", "cuda"], 2, "no cuda device"))
if sys.platform.startswith("linux"):
    CASES.append(("device-mps-on-linux", [*collect(NEW), "--device", "mps"], 2, "no mps device"))


@pytest.mark.parametrize(("argv", "code", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_mistake_is_one_error_line_with_its_exit_code(
    places: Places, argv: list[str], code: int, says: str
) -> None:
    fill = {k: str(v) for k, v in places.__dict__.items()}
    args = [a.format(**fill) for a in argv]
    path = os.pathsep.join(p for p in (str(places.root), os.environ.get("PYTHONPATH")) if p)
    proc = odsd(*args, env={"PYTHONPATH": path})
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("odsd: error:")]
    assert len(errors) == 1, f"expected one `odsd: error:` line, got {proc.stderr[-2000:]!r}"
    assert proc.returncode == code, (proc.returncode, errors[0])
    assert says in errors[0], errors[0]
    shutil.rmtree(Path(fill["root"], "new-store"), ignore_errors=True)


def test_a_read_only_store_can_still_be_read_and_exported(places: Places, tmp_path: Path) -> None:
    for argv in (
        ["store", "inspect", places.ro_store],
        ["store", "fsck", places.ro_store],
        ["store", "vacuum", places.ro_store, "--dry-run"],
        ["export-lerobot", places.ro_store, tmp_path / "out"],
    ):
        proc = odsd(*argv)
        assert proc.returncode == 0, (argv, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr
