"""make_env resolution (built-ins, module:factory, registered names) and check_env reports."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch

from odsd.envs import (
    EnvContractError,
    EnvNotFoundError,
    EnvSpecError,
    check_env,
    list_envs,
    make_env,
    register_env,
)
from odsd.envs.tasks import ReachEnv


def test_builtins_are_listed() -> None:
    assert {"reach", "pick_place"} <= set(list_envs())


def test_module_factory_and_register(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("odsd_test_third_party")

    def factory(*, num_envs: int, device: torch.device, seed: int | None, speed: float = 0.5) -> ReachEnv:
        return ReachEnv(num_envs=num_envs, device=device, seed=seed, max_speed=speed)

    def liar(*, num_envs: int, device: torch.device, seed: int | None) -> ReachEnv:
        return ReachEnv(num_envs=num_envs + 1, device=device, seed=seed)

    module.factory, module.liar, module.not_env = factory, liar, lambda **kw: object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    env = make_env("odsd_test_third_party:factory", num_envs=3, seed=0, speed=0.25)
    assert env.spec.num_envs == 3 and env.spec.params["max_speed"] == 0.25
    with pytest.raises(EnvContractError, match="asked for 2 rows"):
        make_env("odsd_test_third_party:liar", num_envs=2)
    with pytest.raises(EnvContractError, match="not a VecEnv"):
        make_env("odsd_test_third_party:not_env", num_envs=2)
    register_env("third_party_reach", factory, overwrite=True)
    assert make_env("third_party_reach", num_envs=2).spec.task == "reach"


def test_unknown_names_are_clear() -> None:
    with pytest.raises(EnvNotFoundError, match="unknown task 'nope'"):
        make_env("nope", num_envs=1)
    with pytest.raises(EnvNotFoundError, match="cannot import module"):
        make_env("no_such_module_xyz:make", num_envs=1)
    with pytest.raises(EnvSpecError, match="reserved"):
        register_env("a:b", ReachEnv)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"push_prb": 0.1}, r"pick_place: bad task arguments \['push_prb'\]: .*unexpected keyword"),
        ({"push_prob": "a"}, "pick_place: push_prob must be a finite number, got 'a'"),
        ({"knock_push": float("inf")}, "pick_place: knock_push must be a finite number, got inf"),
        ({"max_episode_steps": "a"}, "max_episode_steps and num_envs must be integers"),
        ({"step_dt": "a"}, "step_dt must be a positive number, got 'a'"),
    ],
)
def test_bad_task_arguments_are_one_line_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(EnvSpecError, match=message):
        make_env("pick_place", num_envs=1, **kwargs)


def test_reach_parameters_are_checked_too() -> None:
    with pytest.raises(EnvSpecError, match="reach: max_speed must be a finite number"):
        make_env("reach", num_envs=1, max_speed=None)


@pytest.mark.parametrize("task", ["reach", "pick_place"])
def test_check_env_report(task: str) -> None:
    report = check_env(task, num_envs=3)
    assert report.ok, report.checks
    data = report.to_dict()
    json.dumps(data)
    assert data["spec"]["layout_hash"] == report.spec.layout_hash()
    assert report.steps_per_s and report.steps_per_s > 0
    from rich.console import Console

    console = Console(record=True, width=120)
    console.print(report.rich_table())
    assert task in console.export_text()


def test_check_env_reports_construction_failure() -> None:
    report = check_env("nope", num_envs=1)
    assert not report.ok and report.checks[0].name == "construct"
    assert "unknown task" in report.checks[0].detail
