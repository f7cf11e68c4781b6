"""segment_windows: segment windows never cross a boundary, boundary windows always cross one."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from odsd.replay import segment_boundaries, segment_frame_mask, segment_names, segment_windows


@st.composite
def episodes(draw):
    lengths = draw(st.lists(st.integers(1, 12), min_size=1, max_size=6))
    seg = np.concatenate(
        [np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))) for n in lengths]
    )
    allowed = np.array(draw(st.lists(st.booleans(), min_size=seg.size, max_size=seg.size)))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return seg.astype(np.int16), starts, np.array(lengths), allowed


def naive(seg, starts, lengths, window, before, mode, allowed=None):
    out = []
    for s, n in zip(starts, lengths, strict=True):
        for p in range(s, s + n):
            lo, hi = p - before, p - before + window
            if lo < s or hi > s + n:
                continue
            cross = [t for t in range(lo + 1, hi) if seg[t] != seg[t - 1]]
            if mode == "segment":
                ok = not cross and (allowed is None or allowed[lo:hi].all())
            else:
                ok = any(allowed is None or allowed[t] or allowed[t - 1] for t in cross)
            if ok:
                out.append(p)
    return np.array(out, dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(episodes(), st.integers(1, 6), st.integers(0, 5), st.booleans())
def test_windows_match_definition_and_invariants(data, window, before, use_mask):
    seg, starts, lengths, allowed = data
    before = min(before, window - 1)
    mask = allowed if use_mask else None
    ep_of = np.repeat(np.arange(len(lengths)), lengths)
    for mode in ("segment", "boundary"):
        got = segment_windows(seg, starts, lengths, window, mode, before=before, allowed=mask)
        np.testing.assert_array_equal(got, naive(seg, starts, lengths, window, before, mode, mask))
        for p in got:
            frames = np.arange(p - before, p - before + window)
            assert len(set(ep_of[frames])) == 1  # never leaves the episode
            crosses = np.any(seg[frames][1:] != seg[frames][:-1])
            if mode == "segment":
                assert not crosses  # never crosses a boundary
            else:
                assert crosses  # always crosses one


def test_simple_example():
    seg = np.array([0, 0, 0, 1, 1, 2, 5, 5, 5])  # two episodes: [0..5], [6..8]
    starts, lengths = np.array([0, 6]), np.array([6, 3])
    assert segment_boundaries(seg, starts).nonzero()[0].tolist() == [3, 5]  # 6 is an episode start
    assert segment_windows(seg, starts, lengths, 2, "segment").tolist() == [0, 1, 3, 6, 7]
    assert segment_windows(seg, starts, lengths, 2, "boundary").tolist() == [2, 4]
    assert segment_windows(seg, starts, lengths, 3, "boundary", before=1).tolist() == [2, 3, 4]
    assert segment_windows(seg, starts, lengths, 1, "segment").tolist() == list(range(9))
    assert segment_windows(seg, starts, lengths, 1, "boundary").size == 0
    with pytest.raises(ValueError):
        segment_windows(seg, starts, lengths, 2, "middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        segment_windows(seg, starts, lengths, 2, "segment", before=2)


def test_windows_on_a_collected_store_by_segment_name(pick_place_store):
    snap = snapshot(pick_place_store)
    seg = snap.read("segment_id")
    metas = [e.meta for e in snap.entries]
    assert "grasp" in segment_names(metas)
    mask = segment_frame_mask(metas, snap.starts, "grasp")
    anchors = segment_windows(seg, snap.starts, snap.lengths, 4, "segment", allowed=mask)
    assert anchors.size
    for p in anchors:
        assert mask[p : p + 4].all() and len(set(seg[p : p + 4].tolist())) == 1
    cross = segment_windows(seg, snap.starts, snap.lengths, 4, "boundary")
    starts = snap.read("segment_start")
    ep_start = np.zeros(snap.num_frames, dtype=bool)
    ep_start[snap.starts] = True
    for p in cross:  # a segment_start flag (not an episode start) inside the window
        assert (starts[p + 1 : p + 4] & ~ep_start[p + 1 : p + 4]).any()
