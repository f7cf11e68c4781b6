"""``make_expert``: arguments an expert does not take and errors of a plugged-in expert are one line."""

from __future__ import annotations

import pytest

from odsd.envs import make_env
from odsd.experts import make_expert
from odsd.experts.errors import ExpertArgumentsError, ExpertFailedError
from odsd.experts.planners import make_planner
from odsd.experts.registry import _REGISTRY, register_expert


@pytest.fixture
def spec():
    return make_env("reach", num_envs=2).spec


@pytest.fixture
def registered():
    names: list[str] = []

    def register(name, factory):
        register_expert(name, factory, overwrite=True)
        names.append(name)

    yield register
    for name in names:
        _REGISTRY.pop(name, None)


def test_the_planner_refuses_expert_kwargs(spec) -> None:
    with pytest.raises(ExpertArgumentsError, match="foo") as err:
        make_expert("planner", spec, foo=1)
    assert err.value.exit_code == 2


def test_a_factory_is_refused_arguments_it_does_not_take(spec, registered) -> None:
    registered("strict", lambda env_spec, gain=1.0: make_planner(env_spec))
    assert make_expert("strict", spec, gain=2.0).spec is not None
    with pytest.raises(ExpertArgumentsError, match=r"'strict'.*foo"):
        make_expert("strict", spec, foo=1)


def test_a_factory_that_raises_is_one_line_naming_the_expert(spec, registered) -> None:
    def broken(env_spec):
        raise ValueError("missing calibration\nsecond line")

    registered("broken", broken)
    with pytest.raises(ExpertFailedError) as err:
        make_expert("broken", spec)
    assert str(err.value) == "expert 'broken' failed to build: ValueError: missing calibration"
    assert err.value.exit_code == 1
