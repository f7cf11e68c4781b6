"""Capture a collector's run state at a synchronized point, and restore it on resume."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
from typing import Any

import numpy as np
import torch

from odsd.collect import CollectConfig, Collector
from odsd.daemon.errors import RunStateError
from odsd.schema.run import RngStates, RunCounters, RunState

log = logging.getLogger("odsd.daemon")

UNSAFE_CHANGES = (
    "task",
    "task_kwargs",
    "expert",
    "expert_kwargs",
    "mode",
    "record_state",
    "num_envs",
    "mixing",
    "beta",
    "episodes_per_iteration",
    "seed",
)
"""Config fields whose change would make resumed data mean something else (or break RNG restore)."""


def identity_hash(config: CollectConfig) -> str:
    payload = config.model_dump(mode="json", include=set(UNSAFE_CHANGES))
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def _numpy_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "name": name,
        "keys": keys.tolist(),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached": float(cached),
    }


def _set_numpy_state(state: dict[str, Any]) -> None:
    np.random.set_state(
        (
            state["name"],
            np.array(state["keys"], dtype=np.uint32),
            state["pos"],
            state["has_gauss"],
            state["cached"],
        )
    )


def capture(collector: Collector, *, reason: str, sequence: int) -> RunState:
    """The collector's state; call only when every accepted episode is committed (after a drain)."""
    assert collector.store is not None
    student = collector.student
    return RunState(
        run_id=collector.run_id,
        incarnation=collector.incarnation,
        sequence=sequence,
        reason=reason,  # type: ignore[arg-type]
        watermark=collector.store.watermark,
        counters=RunCounters(**collector.progress.__dict__),
        beta=collector.beta,
        policy_version=collector.policy_version,
        policy_path=str(student.path) if student is not None else None,
        policy_weights_sha256=student.meta.weights_sha256 if student is not None else None,
        expert=None if collector.expert is None else dict(collector.expert.spec.__dict__),
        rng=RngStates(
            torch=base64.b64encode(torch.random.get_rng_state().numpy().tobytes()).decode(),
            numpy=_numpy_state(),
            mixer=collector.mixer.state(),
            env_seed=collector.env_seed,
        ),
        config=collector.config.model_dump(mode="json"),
        config_identity_hash=identity_hash(collector.config),
        schema_hash=collector.store.manifest.schema_hash(),
        env_layout_hash=collector.spec.layout_hash(),
    )


def resume_config(state: RunState, overrides: dict[str, Any]) -> CollectConfig:
    """The manifest's config with safe overrides applied; unsafe changes are refused."""
    base = CollectConfig.model_validate(state.config)
    # Validate the merged dict (model_copy(update=) would keep nested dicts such as beta unvalidated).
    merged = CollectConfig.model_validate(
        {**base.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
    )
    for name in UNSAFE_CHANGES:
        old, new = getattr(base, name), getattr(merged, name)
        if old != new:
            raise RunStateError(f"resume cannot change {name} ({old!r} -> {new!r}); start a new run instead")
    return merged


def restore(collector: Collector, state: RunState) -> None:
    """Put a freshly built collector where ``state`` left the run (and recount from the store)."""
    store = collector.store
    assert store is not None
    if state.schema_hash != store.manifest.schema_hash():
        raise RunStateError(f"{store.root}: store schema differs from the one run {state.run_id} wrote")
    if state.env_layout_hash != collector.spec.layout_hash():
        raise RunStateError(
            f"run {state.run_id}: env observation/action layout changed since the run started"
        )
    if state.watermark > store.watermark:
        raise RunStateError(
            f"{store.root}: run-state watermark {state.watermark} is beyond the store's {store.watermark} "
            "(store data missing)"
        )
    collector.progress.__dict__.update(state.counters.model_dump())
    if state.policy_path is not None and collector.needs_student:
        try:
            collector.pin_student(state.policy_path)
        except Exception as exc:
            raise RunStateError(
                f"run {state.run_id}: cannot load its student {state.policy_path} ({exc})"
            ) from exc
    # After loading the student: building its module draws from the global torch RNG.
    torch.random.set_rng_state(
        torch.frombuffer(bytearray(base64.b64decode(state.rng.torch)), dtype=torch.uint8)
    )
    _set_numpy_state(state.rng.numpy)
    collector.mixer.restore(state.rng.mixer)
    _recount(collector, state)


def _recount(collector: Collector, state: RunState) -> None:
    """Count this run's episodes committed after the manifest (a SIGKILL loses no progress)."""
    assert collector.store is not None
    snap = collector.store.snapshot()
    later = [e.meta for e in snap.entries if e.commit_seq > state.watermark and e.meta.run_id == state.run_id]
    if not later:
        return
    p = collector.progress
    per_iteration = collector.config.episodes_per_iteration
    for meta in later:
        p.episodes_accepted += 1
        p.episodes_committed += 1
        p.frames_committed += meta.length
        if meta.iteration == p.iteration:
            p.episodes_in_iteration += 1
    log.info("resume: %d episodes of run %s were committed after its last manifest", len(later), state.run_id)
    while p.episodes_in_iteration >= per_iteration:
        p.iteration += 1
        p.episodes_in_iteration = sum(1 for m in later if m.iteration == p.iteration)
        collector.student = None
