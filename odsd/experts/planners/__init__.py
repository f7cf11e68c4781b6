"""Per-task planner experts and their registry (task name → planner class)."""

from __future__ import annotations

from collections.abc import Callable

from odsd.envs.spec import EnvSpec
from odsd.experts.errors import ExpertNotFoundError
from odsd.experts.planners.base import PlannerExpert, PlanResult, move_toward
from odsd.experts.planners.maniskill_pick_cube import PickCubePlanner
from odsd.experts.planners.pick_place import PickPlacePlanner
from odsd.experts.planners.reach import ReachPlanner

PlannerFactory = Callable[[EnvSpec], PlannerExpert]

_PLANNERS: dict[str, PlannerFactory] = {
    "reach": ReachPlanner,
    "pick_place": PickPlacePlanner,
    "pick_place_cam": PickPlacePlanner,  # the same physics and keys, plus cameras the planner ignores
    "maniskill:PickCube-v1": PickCubePlanner,  # obs_mode=state, control_mode=pd_ee_delta_pos
}


def register_planner(task: str, factory: PlannerFactory) -> None:
    """Make ``make_expert("planner", spec)`` resolve ``spec.task == task`` to ``factory(spec)``."""
    _PLANNERS[task] = factory


def make_planner(env_spec: EnvSpec) -> PlannerExpert:
    """The registered planner for ``env_spec.task``."""
    factory = _PLANNERS.get(env_spec.task)
    if factory is None and env_spec.task.startswith("gymnasium:Fetch"):
        from odsd.experts.planners.fetch import FetchPickPlacePlanner

        factory = FetchPickPlacePlanner if "PickAndPlace" in env_spec.task else None
    if factory is None:
        raise ExpertNotFoundError(
            f"no planner registered for task {env_spec.task!r}; known: {sorted(_PLANNERS)}"
        )
    return factory(env_spec)


__all__ = [
    "PickCubePlanner",
    "PickPlacePlanner",
    "PlanResult",
    "PlannerExpert",
    "ReachPlanner",
    "make_planner",
    "move_toward",
    "register_planner",
]
