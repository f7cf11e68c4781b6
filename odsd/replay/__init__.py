"""Record/replay of episodes and segment-aware selection (docs/replay.md).

::

    from odsd.replay import Replayer, replay_episodes, verify_store, segment_windows
    report = replay_episodes(snap, [0, 1, 2], mode="dynamic")
    report.max_obs_dev, [e.explanation for e in report.failed]
"""

from odsd.lazy import lazy_exports
from odsd.replay.defaults import DEFAULT_ATOL
from odsd.replay.errors import ReplayError, SpecMismatchError

_LAZY = {
    "EpisodeReplay": "replay",
    "Replayer": "replay",
    "ReplayReport": "replay",
    "replay_episodes": "replay",
    "RecordedEnv": "spec_check",
    "check_compatible": "spec_check",
    "make_replay_env": "spec_check",
    "recorded_env": "spec_check",
    "StateStorage": "storage",
    "state_bytes_per_frame": "storage",
    "state_storage": "storage",
    "VerifyResult": "verify",
    "sample_episodes": "verify",
    "verify_store": "verify",
    "segment_boundaries": "windows",
    "segment_frame_mask": "windows",
    "segment_names": "windows",
    "segment_windows": "windows",
}


# Replay pulls in torch and the simulators; load it only when used (keeps `odsd --help` fast).
__getattr__ = lazy_exports(__name__, _LAZY)

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
