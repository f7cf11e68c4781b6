"""Segment annotations produced by the collector: per-frame columns and per-episode tables."""

from __future__ import annotations

import itertools

import numpy as np
from conftest import snapshot

from odsd.collect.evaluation import summarize_eval
from odsd.experts.planners import PickPlacePlanner


def test_segment_table_matches_frame_columns(pick_place_store):
    snap = snapshot(pick_place_store)
    phases = PickPlacePlanner.phase_names
    failed = 0
    for entry in snap.entries:
        meta = entry.meta
        ep = snap.episode(entry.episode_id, ["segment_id", "segment_step", "segment_start"])
        table = meta.segments
        assert table[0].start == 0 and table[-1].end == meta.length
        for a, b in itertools.pairwise(table):
            assert a.end == b.start and a.start < a.end
        starts = np.flatnonzero(ep["segment_start"]).tolist()
        assert starts == [ref.start for ref in table]
        for ref in table:
            ids = ep["segment_id"][ref.start : ref.end]
            assert len(set(ids.tolist())) == 1 and phases[int(ids[0])] == ref.name
            assert np.array_equal(ep["segment_step"][ref.start : ref.end], np.arange(ref.end - ref.start))
        assert all(ref.success and ref.failure_reason is None for ref in table[:-1])
        assert table[-1].success == meta.success
        if not meta.success:
            failed += 1
            assert table[-1].failure_reason == meta.terminal_reason == "truncated"
    assert failed, "the fixture should contain failed episodes"
    points = summarize_eval([e.meta for e in snap.entries]).failure_points
    assert sum(points.values()) == failed and set(points) <= set(phases)
