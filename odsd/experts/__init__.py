"""Experts: the `Expert` protocol, `ExpertQuery` validation, planner / policy / demo experts.

::

    from odsd.experts import make_expert, validate_query
    expert = make_expert("planner", env.spec)
    query = validate_query(expert.act(obs, env_ids=ids), env.spec, n_rows=len(ids))
"""

from odsd.experts.demo import DemoExpert
from odsd.experts.errors import ExpertContractError, ExpertError, ExpertNotFoundError
from odsd.experts.evaluate import ExpertEvaluation, evaluate_expert
from odsd.experts.failures import Failure, failure_name, failure_reasons, register_failure_reason
from odsd.experts.planners import PickPlacePlanner, PlannerExpert, ReachPlanner, register_planner
from odsd.experts.policy_expert import PolicyExpert
from odsd.experts.protocol import Expert
from odsd.experts.query import ExpertQuery, ExpertSpec
from odsd.experts.registry import list_experts, make_expert, register_expert
from odsd.experts.validate import validate_query

FailureReason = Failure

__all__ = [
    "DemoExpert",
    "Expert",
    "ExpertContractError",
    "ExpertError",
    "ExpertEvaluation",
    "ExpertNotFoundError",
    "ExpertQuery",
    "ExpertSpec",
    "Failure",
    "FailureReason",
    "PickPlacePlanner",
    "PlannerExpert",
    "PolicyExpert",
    "ReachPlanner",
    "evaluate_expert",
    "failure_name",
    "failure_reasons",
    "list_experts",
    "make_expert",
    "register_expert",
    "register_failure_reason",
    "register_planner",
    "validate_query",
]
