"""Built-in batched torch tasks: ``reach``, ``pick_place`` and ``pick_place_cam`` (with cameras)."""

from odsd.envs.tasks.base import TorchTaskEnv
from odsd.envs.tasks.pick_place import PickPlaceEnv
from odsd.envs.tasks.pick_place_cam import PickPlaceCamEnv
from odsd.envs.tasks.reach import ReachEnv

__all__ = ["PickPlaceCamEnv", "PickPlaceEnv", "ReachEnv", "TorchTaskEnv"]
