"""Replay defaults (kept free of heavy imports so the CLI can show them in ``--help`` cheaply)."""

MODES = ("kinematic", "dynamic")
DEFAULT_ATOL = 1e-5
DEFAULT_ENV_ROWS = 16
STATE_PREFIX = "state."
"""Store fields holding the recorded simulator state are named ``state.<name>``."""
