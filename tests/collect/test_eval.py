"""Student-only evaluation: per-row quotas, nothing committed, summaries with a Wilson interval."""

from __future__ import annotations

from collections import Counter

import pytest
from collect_helpers import ToyExpert, ToyVecEnv, publish_toy_student, stored_episodes

from odsd.collect import SOURCE_STUDENT, CollectConfig, Collector
from odsd.collect.evaluation import summarize_eval, wilson_interval
from odsd.errors import OdsdError
from odsd.schema import EpisodeMeta
from odsd.schema.store import SegmentRef


def eval_config(tmp_path, **kw) -> CollectConfig:
    return CollectConfig(
        mode="eval",
        task="toy",
        store=tmp_path / "s",
        student=str(tmp_path / "pol"),
        durability="process",
        **kw,
    )


def test_eval_quota_per_row_and_no_commit(tmp_path) -> None:
    env = ToyVecEnv(3)
    publish_toy_student(tmp_path / "pol", env.spec, version=0)
    c = Collector(eval_config(tmp_path, max_episodes=7), env=env, expert=ToyExpert(), commit_store=False)
    summary = c.run()
    assert summary.stop_reason == "max_episodes"
    assert len(c.eval_episodes) == 7
    assert Counter(m.env_row for m in c.eval_episodes) == {0: 3, 1: 2, 2: 2}, (
        "balanced, not biased to short episodes"
    )
    assert summary.episodes_committed == 0 and not (tmp_path / "s").exists()
    assert c.policy_version == 0


def test_eval_student_acts_alone(tmp_path) -> None:
    env = ToyVecEnv(2)
    publish_toy_student(tmp_path / "pol", env.spec, version=0)
    publish_toy_student(tmp_path / "pol", env.spec, version=3, offset=0.1)
    c = Collector(eval_config(tmp_path, max_episodes=4), env=env, expert=ToyExpert())
    c.run()
    assert c.policy_version == 3, "eval loads the newest complete snapshot"
    frames = [f for _, f in stored_episodes(tmp_path / "s")]
    assert len(frames) == 4, "with a store, eval episodes are committed"
    for f in frames:
        assert (f["action.source"] == SOURCE_STUDENT).all() and (f["beta"] == 0).all()
        assert (f["policy_version"] == 3).all()


def test_eval_without_snapshot_is_an_odsd_error(tmp_path) -> None:
    env = ToyVecEnv(2)
    (tmp_path / "pol").mkdir()
    with pytest.raises(OdsdError, match="no complete policy snapshot"):
        Collector(
            eval_config(tmp_path, max_episodes=2), env=env, expert=ToyExpert(), commit_store=False
        ).run()
    assert not any((tmp_path / "pol").iterdir()), "eval never creates a student"


def test_wilson_interval() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-3) and hi == pytest.approx(0.9433, abs=1e-3)
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and 0.1 < hi < 0.2
    lo, hi = wilson_interval(20, 20)
    assert hi == 1.0 and 0.8 < lo < 0.9


def test_summarize_eval_failure_points() -> None:
    def meta(ok: bool, last: str, n: int) -> EpisodeMeta:
        return EpisodeMeta(
            length=n,
            success=ok,
            segments=[
                SegmentRef(name="reach", start=0, end=1, success=True),
                SegmentRef(name=last, start=1, end=n, success=ok),
            ],
        )

    result = summarize_eval(
        [meta(True, "place", 10), meta(False, "grasp", 20), meta(False, "grasp", 30), meta(False, "lift", 40)]
    )
    assert (result.episodes, result.successes, result.success_rate) == (4, 1, 0.25)
    assert result.mean_length == 25.0
    assert result.failure_points == {"grasp": 2, "lift": 1}
    assert summarize_eval([]).episodes == 0
