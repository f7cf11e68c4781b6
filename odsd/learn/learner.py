"""The reference learner as a process beside ``odsd collect``.

It waits until enough *newly committed* episodes are visible (readiness never depends on a full
buffer, so it cannot deadlock with the collector), trains the reference MLP on what the
LeRobot-compatible reader serves, publishes the next policy snapshot atomically and repeats. The
collector picks the snapshot up at its next iteration boundary.

>>> learner = Learner(LearnerConfig(store=Path("data.odsd"), min_new_episodes=64))
>>> learner.run(stop_event)          # or learner.round() for one round in-process
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from odsd.envs import EnvSpec, make_env
from odsd.errors import ConfigError
from odsd.learn.bc import BCConfig, publish_bc, train_bc
from odsd.lerobot import OdsdLeRobotDataset, Selection
from odsd.lerobot.selection import check_segment_names
from odsd.policies.mlp import ReferenceMLP
from odsd.policies.snapshot import latest_snapshot, load_snapshot, read_meta
from odsd.store import MANIFEST, EpisodeStore

log = logging.getLogger("odsd.learn")


@dataclass(frozen=True)
class LearnerConfig:
    store: Path
    policies_dir: Path | None = None
    """Where snapshots are published (default ``<store>/policies``, where the collector looks)."""
    task: str | None = None
    """Env whose layout the policy is for (default: the task of the store's newest run)."""
    min_new_episodes: int = 32
    bc: BCConfig = field(default_factory=BCConfig)
    recent: int | None = None
    """With ``recent_fraction``: that share of every batch comes from the ``recent`` newest episodes."""
    recent_fraction: float = 0.0
    segments: tuple[str, ...] | None = None
    """Train only on frames inside segments with these names (e.g. ``("grasp",)``)."""
    warm_start: bool = True
    """Continue from the newest published snapshot instead of a fresh network."""
    max_rounds: int | None = None
    poll_interval_s: float = 1.0

    def __post_init__(self) -> None:
        if self.min_new_episodes < 1:
            raise ConfigError(f"min_new_episodes must be >= 1, got {self.min_new_episodes}")
        if not 0.0 <= self.recent_fraction <= 1.0:
            raise ConfigError(f"recent_fraction must be in [0, 1], got {self.recent_fraction}")
        if self.recent_fraction > 0 and not self.recent:
            raise ConfigError("recent_fraction needs recent (the number of newest episodes to favour)")

    @property
    def policies(self) -> Path:
        return self.policies_dir or self.store / "policies"


def task_of_store(store: EpisodeStore) -> str:
    """The task recorded by the newest run of ``store``."""
    runs = sorted((store.root / "runs").glob("*/run.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise ConfigError(f"{store.root}: no run recorded its task; pass --task")
    return json.loads(runs[-1].read_text())["config"]["task"]


def wait_for_store(config: LearnerConfig, stop: threading.Event) -> bool:
    """Wait until the store exists and a run recorded its task (a learner may start first)."""
    announced = False
    while not stop.is_set():
        if (config.store / MANIFEST).exists() and (config.task or any(config.store.glob("runs/*/run.json"))):
            return True
        if not announced:
            log.info("waiting for %s to be created by odsd collect", config.store)
            announced = True
        stop.wait(config.poll_interval_s)
    return False


class Learner:
    """Trains and publishes student snapshots from a growing store."""

    def __init__(self, config: LearnerConfig, *, spec: EnvSpec | None = None) -> None:
        self.config = config
        self.store = EpisodeStore.open(config.store)
        if spec is None:
            env = make_env(config.task or task_of_store(self.store), num_envs=1)
            spec = env.spec
            env.close()
        self.spec = spec
        self.trained_episodes = self._episodes_of_newest()
        self.rounds = 0

    def _episodes_of_newest(self) -> int:
        newest = latest_snapshot(self.config.policies) if self.config.policies.is_dir() else None
        return int(read_meta(newest).extra.get("episodes", 0)) if newest is not None else 0

    def ready(self) -> bool:
        """Whether enough episodes were committed since the data the newest snapshot saw."""
        return self.store.snapshot().num_episodes - self.trained_episodes >= self.config.min_new_episodes

    def round(self) -> Path:
        """Train on the newest committed data and publish one snapshot; returns its directory."""
        cfg = self.config
        label = cfg.bc.label.removeprefix("action.")
        dataset = OdsdLeRobotDataset(self.store, selection=Selection(segments=cfg.segments), label=label)
        if cfg.segments:
            check_segment_names(dataset.view.entries, cfg.segments)
        recent = None
        if cfg.recent and cfg.recent_fraction > 0:
            recent = OdsdLeRobotDataset(
                self.store,
                watermark=dataset.watermark,
                selection=Selection(recent=cfg.recent, segments=cfg.segments),
                label=label,
            )
        init = self._newest_model() if cfg.warm_start else None
        started = time.monotonic()
        model = train_bc(
            dataset, self.spec, cfg.bc, init=init, recent=recent, recent_fraction=cfg.recent_fraction
        )
        path = publish_bc(cfg.policies, model, self.spec, dataset)
        self.trained_episodes = dataset.meta.total_episodes
        self.rounds += 1
        log.info(
            "published %s: %d episodes / %d labels up to watermark %d, %d steps in %.1fs",
            path.name,
            dataset.meta.total_episodes,
            len(dataset),
            dataset.watermark,
            cfg.bc.steps,
            time.monotonic() - started,
        )
        return path

    def _newest_model(self) -> ReferenceMLP | None:
        newest = latest_snapshot(self.config.policies) if self.config.policies.is_dir() else None
        if newest is None:
            return None
        model = load_snapshot(newest, env_spec=self.spec, device=self.config.bc.device).model
        return model if isinstance(model, ReferenceMLP) else None

    def run(self, stop: threading.Event | None = None) -> int:
        """Rounds until ``stop`` is set or ``max_rounds`` is reached; returns the number of rounds."""
        stop = stop or threading.Event()
        while not stop.is_set():
            if self.config.max_rounds is not None and self.rounds >= self.config.max_rounds:
                break
            if not self.ready():
                stop.wait(self.config.poll_interval_s)
                continue
            self.round()
        return self.rounds
