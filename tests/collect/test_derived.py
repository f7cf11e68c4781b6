"""Fields derived at copy-out equal what per-step recording would have stored."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from odsd.collect.derived import DERIVED_FIELDS, derived_fields


def per_step_reference(episodes: list[tuple[list[int], bool, bool]]) -> dict[str, list]:
    """What the old per-step recorder stored: a step counter and a phase tracker per row."""
    out: dict[str, list] = {name: [] for name in DERIVED_FIELDS}
    for seg_ids, term, trunc in episodes:
        phase, seg_step = None, 0
        for step, seg in enumerate(seg_ids):
            start = step == 0 or seg != phase
            seg_step = 0 if start else seg_step + 1
            phase = seg
            last = step == len(seg_ids) - 1
            out["episode_step"].append(step)
            out["terminated"].append(last and term)
            out["truncated"].append(last and trunc)
            out["segment_step"].append(seg_step)
            out["segment_start"].append(start)
    return out


episode = st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=30), st.booleans(), st.booleans())


@given(st.lists(episode, min_size=1, max_size=8))
def test_derived_fields_match_per_step_recording(episodes: list[tuple[list[int], bool, bool]]) -> None:
    lengths = [len(ids) for ids, _, _ in episodes]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    segment_id = np.concatenate([np.array(ids, dtype=np.int16) for ids, _, _ in episodes])
    got = derived_fields(
        segment_id,
        offsets,
        np.array([t for _, t, _ in episodes]),
        np.array([t for _, _, t in episodes]),
    )
    want = per_step_reference(episodes)
    assert set(got) == set(DERIVED_FIELDS)
    for name in DERIVED_FIELDS:
        np.testing.assert_array_equal(got[name], np.array(want[name], dtype=got[name].dtype), err_msg=name)
    assert got["episode_step"].dtype == np.int32 and got["segment_start"].dtype == bool


def test_a_new_episode_starts_a_segment_even_with_the_same_phase() -> None:
    got = derived_fields(np.array([2, 2, 2, 2], np.int16), np.array([0, 2, 4]), np.zeros(2), np.ones(2))
    assert got["segment_start"].tolist() == [True, False, True, False]
    assert got["segment_step"].tolist() == [0, 1, 0, 1]
    assert got["truncated"].tolist() == [False, True, False, True]
