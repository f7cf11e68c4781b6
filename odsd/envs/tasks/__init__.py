"""Built-in batched torch tasks: ``reach`` and ``pick_place``."""

from odsd.envs.tasks.base import TorchTaskEnv
from odsd.envs.tasks.pick_place import PickPlaceEnv
from odsd.envs.tasks.reach import ReachEnv

__all__ = ["PickPlaceEnv", "ReachEnv", "TorchTaskEnv"]
