"""CollectConfig: TOML loading, unknown keys, --set overrides, flag precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from odsd.collect import CollectConfig, load_config
from odsd.collect.config import parse_override
from odsd.errors import ConfigError

TOML = """
mode = "expert_demo"
task = "reach"
num_envs = 8
episodes_per_iteration = 5
keep_failed = true

[beta]
kind = "linear"
init_beta = 0.9
decay = 0.2
beta_min = 0.1

[task_kwargs]
max_episode_steps = 40
"""


@pytest.fixture
def toml_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(TOML)
    return path


def test_defaults() -> None:
    cfg = CollectConfig()
    assert cfg.mode == "dagger_sync" and cfg.durability == "fsync" and cfg.beta.value(0) == 1.0
    assert cfg.policies_dir == Path("odsd-store") / "policies"
    assert CollectConfig(student="/x/pol").policies_dir == Path("/x/pol")


def test_toml_loading(toml_file: Path) -> None:
    cfg = load_config(toml_file)
    assert (cfg.mode, cfg.task, cfg.num_envs, cfg.episodes_per_iteration, cfg.keep_failed) == (
        "expert_demo",
        "reach",
        8,
        5,
        True,
    )
    assert cfg.beta.kind == "linear" and cfg.beta.value(1) == pytest.approx(0.7)
    assert cfg.task_kwargs == {"max_episode_steps": 40}


def test_flags_override_file_and_none_flags_do_not(toml_file: Path) -> None:
    cfg = load_config(toml_file, {"num_envs": 32, "task": None, "mode": "dagger_sync"})
    assert cfg.num_envs == 32 and cfg.task == "reach" and cfg.mode == "dagger_sync"


def test_set_overrides_nested_and_wins_over_flags(toml_file: Path) -> None:
    cfg = load_config(
        toml_file,
        {"num_envs": 32},
        [
            "beta.decay=0.05",
            "num_envs=3",
            "task_kwargs.max_episode_steps=7",
            "store=/tmp/somewhere",
            "mixing=episode",
        ],
    )
    assert cfg.beta.decay == 0.05 and cfg.beta.kind == "linear", "a nested --set keeps the other table keys"
    assert cfg.num_envs == 3
    assert cfg.task_kwargs == {"max_episode_steps": 7}
    assert cfg.store == Path("/tmp/somewhere") and cfg.mixing == "episode"


def test_set_creates_tables() -> None:
    cfg = load_config(None, None, ["beta.kind=constant", "beta.init_beta=0.25"])
    assert cfg.beta.value(5) == 0.25


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ("a=1", (["a"], 1)),
        ("a.b=true", (["a", "b"], True)),
        ("a=[1, 2]", (["a"], [1, 2])),
        ("a=hello", (["a"], "hello")),
        ("a=x=y", (["a"], "x=y")),
        (" a = 1.5", (["a"], 1.5)),
    ],
)
def test_parse_override(item: str, expected) -> None:
    assert parse_override(item) == expected


def one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert msg and "\n" not in msg, f"ConfigError must be one line, got {msg!r}"
    return msg


def test_unknown_top_level_key_in_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('task = "reach"\nnum_env = 4\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    msg = one_line(info)
    assert "num_env" in msg and str(path) in msg


def test_unknown_nested_key_in_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[beta]\ndecay = 0.5\nbeta_max = 1.0\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "beta.beta_max" in one_line(info)


@pytest.mark.parametrize(
    "sets",
    [
        ["nonsense"],
        ["bogus=1"],
        ["beta.kind=cosine"],
        ["num_envs=0"],
        ["mode=dagger_async"],
        ["mode=eval", "mode.x=1"],
    ],
)
def test_bad_set_items(sets: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, None, sets)
    one_line(info)


def test_bad_values_one_line() -> None:
    for overrides in ({"device": "tpu"}, {"durability": "maybe"}, {"episodes_per_iteration": -1}):
        with pytest.raises(ConfigError) as info:
            load_config(None, overrides)
        one_line(info)


def test_missing_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.toml")
    assert "cannot read" in one_line(info)
    bad = tmp_path / "broken.toml"
    bad.write_text("task = \n")
    with pytest.raises(ConfigError) as info:
        load_config(bad)
    assert "invalid TOML" in one_line(info)


def test_identity_covers_data_meaning() -> None:
    a = CollectConfig(task="reach", mode="dagger_sync").identity()
    assert a == CollectConfig(task="reach", mode="dagger_sync", num_envs=99, seed=5).identity()
    assert a != CollectConfig(task="pick_place", mode="dagger_sync").identity()


def test_set_numeric_looking_string_field() -> None:
    """``--set`` parses values as JSON: a numeric run id must still land in the str field."""
    assert load_config(None, None, ["run_id=20240101"]).run_id == "20240101"
    assert load_config(None, None, ["student=7"]).student == "7"
