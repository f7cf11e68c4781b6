"""Record/replay of episodes and segment-aware selection (DESIGN.md §2 state, §6 schema).

::

    from odsd.replay import Replayer, replay_episodes, verify_store, segment_windows
    report = replay_episodes(snap, [0, 1, 2], mode="dynamic")
    report.max_obs_dev, [e.explanation for e in report.failed]
"""

from odsd.replay.errors import ReplayError, SpecMismatchError
from odsd.replay.replay import DEFAULT_ATOL, EpisodeReplay, Replayer, ReplayReport, replay_episodes
from odsd.replay.spec_check import RecordedEnv, check_compatible, make_replay_env, recorded_env
from odsd.replay.storage import StateStorage, state_bytes_per_frame, state_storage
from odsd.replay.verify import VerifyResult, sample_episodes, verify_store
from odsd.replay.windows import segment_boundaries, segment_frame_mask, segment_names, segment_windows

__all__ = [
    "DEFAULT_ATOL",
    "EpisodeReplay",
    "RecordedEnv",
    "ReplayError",
    "ReplayReport",
    "Replayer",
    "SpecMismatchError",
    "StateStorage",
    "VerifyResult",
    "check_compatible",
    "make_replay_env",
    "recorded_env",
    "replay_episodes",
    "sample_episodes",
    "segment_boundaries",
    "segment_frame_mask",
    "segment_names",
    "segment_windows",
    "state_bytes_per_frame",
    "state_storage",
    "verify_store",
]
