"""End to end through the real console script: ``odsd collect``, ``odsd store inspect``, ``odsd eval``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ODSD = [sys.executable, "-c", "from odsd.cli import main; main()"]


def odsd(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*ODSD, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*ODSD, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def assert_one_line_error(proc) -> str:
    out, err = (proc.stdout, proc.stderr) if isinstance(proc, subprocess.CompletedProcess) else proc
    assert "Traceback" not in err and "Traceback" not in out, err
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("odsd: error:")]
    assert len(errors) == 1, f"expected one `odsd: error:` line, got stderr={err!r}"
    return errors[0]


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> Path:
    store = tmp_path_factory.mktemp("cli") / "store"
    proc = odsd(
        "collect",
        "--mode",
        "dagger_sync",
        "--task",
        "pick_place",
        "--num-envs",
        "4",
        "--episodes-per-iteration",
        "4",
        "--max-iterations",
        "2",
        "--store",
        store,
        "--durability",
        "process",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return store


def test_collect_then_inspect_counts_per_iteration(collected: Path) -> None:
    proc = odsd("store", "inspect", collected, "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["episodes"] == 8
    its = info["iterations"]
    assert sorted(its) == ["0", "1"]
    for it in ("0", "1"):
        assert its[it]["episodes"] == 4 and its[it]["policy_versions"] == [0]
        assert its[it]["frames"] > 0
    assert info["frames"] == its["0"]["frames"] + its["1"]["frames"]
    assert (collected / "policies" / "v000000" / "COMPLETE").exists()


def test_eval_json(collected: Path) -> None:
    proc = odsd(
        "eval",
        "--policy",
        collected / "policies",
        "--task",
        "pick_place",
        "--episodes",
        "8",
        "--num-envs",
        "4",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["episodes"] == 8 and result["policy_version"] == 0
    assert 0.0 <= result["success_rate"] <= 1.0 and len(result["ci95"]) == 2
    assert result["ci95"][0] <= result["success_rate"] <= result["ci95"][1]
    assert sum(result["failure_points"].values()) == 8 - result["successes"]


def test_collect_with_config_file_and_set(tmp_path: Path) -> None:
    cfg = tmp_path / "run.toml"
    store = tmp_path / "s"
    cfg.write_text(
        f'mode = "expert_demo"\ntask = "reach"\nnum_envs = 3\nstore = "{store}"\ndurability = "process"\n'
        "episodes_per_iteration = 100\nmax_iterations = 1\n"
    )
    proc = odsd(
        "collect",
        "--config",
        cfg,
        "--episodes-per-iteration",
        "5",
        "--set",
        "keep_failed=true",
        "--json-logs",
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert [r["kind"] for r in records if r["kind"] != "rolling"] == ["iteration", "final"]
    assert records[-1]["episodes_committed"] == 5, "the flag overrides episodes_per_iteration from the file"
    info = json.loads(odsd("store", "inspect", store, "--json").stdout)
    assert info["iterations"]["0"]["episodes"] == 5


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    bad_cfg = tmp_path / "bad.toml"
    bad_cfg.write_text('task = "reach"\nnum_env = 4\n')
    empty = tmp_path / "empty_policies"
    empty.mkdir()
    cases = {
        "unknown config key": (["collect", "--config", bad_cfg, "--store", tmp_path / "a"], "num_env"),
        "bad --set": (["collect", "--set", "nonsense", "--store", tmp_path / "b"], "nonsense"),
        "unknown --set key": (["collect", "--set", "beta.nope=1", "--store", tmp_path / "c"], "beta.nope"),
        "bad mode": (["collect", "--mode", "bogus", "--store", tmp_path / "d"], "mode"),
        "eval mode via collect": (["collect", "--mode", "eval", "--store", tmp_path / "e"], "eval"),
        "unknown task": (["collect", "--task", "no_such_task", "--store", tmp_path / "f"], "no_such_task"),
        "nonexistent policy": (["eval", "--policy", tmp_path / "nope", "--episodes", "2"], "nope"),
        "policy dir without snapshots": (["eval", "--policy", empty, "--episodes", "2"], "empty_policies"),
    }
    procs = {name: spawn(*args) for name, (args, _) in cases.items()}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode not in (0, None), f"{name}: exit {proc.returncode}"
        line = assert_one_line_error((out, err))
        assert cases[name][1] in line, f"{name}: {line}"
    for d in "abcdef":
        assert not (tmp_path / d / "_log").exists() or d == "f", "bad input must not write data"
