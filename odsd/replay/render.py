"""``odsd replay --gif OUT``: a top (x-y) and side (x-z) view of an episode, drawn with matplotlib.

Works for the built-in tasks and Fetch: points are found by observation element names
(``ee.x``/``grip_pos.x`` for the end effector, ``cube.x``/``object_pos.x`` for the object,
``goal.x``/``desired_goal.0`` for the goal)::

    render_gif(snap, episode_id, "ep3.gif")                          # what was recorded
    render_gif(snap, episode_id, "ep3.gif", replayed=obs_state)      # + the replayed end effector

The recorded end effector is a filled dot with its trail; a replayed trajectory (dynamic replay)
is drawn as a hollow marker, so a divergence is visible at a glance.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from odsd.envs import ENVIRONMENT_STATE_KEY, STATE_KEY
from odsd.replay.errors import ReplayError
from odsd.store import Snapshot

ENTITIES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "ee": (("ee.x", "ee.y", "ee.z"), ("grip_pos.x", "grip_pos.y", "grip_pos.z")),
    "cube": (("cube.x", "cube.y", "cube.z"), ("object_pos.x", "object_pos.y", "object_pos.z")),
    "goal": (("goal.x", "goal.y", "goal.z"), ("desired_goal.0", "desired_goal.1", "desired_goal.2")),
}
STYLE = {"ee": ("tab:blue", "o"), "cube": ("tab:orange", "s"), "goal": ("tab:green", "*")}
MAX_FRAMES = 200
DPI = 64


def entity_columns(names: Sequence[str]) -> dict[str, list[int]]:
    """``entity → [ix, iy, iz]`` column indices into a flat observation with element ``names``."""
    index = {n: i for i, n in enumerate(names)}
    out: dict[str, list[int]] = {}
    for entity, candidates in ENTITIES.items():
        for cand in candidates:
            if all(c in index for c in cand):
                out[entity] = [index[c] for c in cand]
                break
    return out


def _positions(snapshot: Snapshot, episode_id: int) -> tuple[dict[str, np.ndarray], dict[str, list[int]]]:
    keys = [k for k in (STATE_KEY, ENVIRONMENT_STATE_KEY) if k in snapshot.features]
    data = snapshot.episode(episode_id, keys)
    names: list[str] = []
    blocks = []
    for k in keys:
        feat_names = snapshot.features[k].names or [f"{k}.{i}" for i in range(snapshot.features[k].shape[0])]
        names += list(feat_names)
        blocks.append(np.asarray(data[k], dtype=np.float64))
    flat = np.concatenate(blocks, axis=1)
    cols = entity_columns(names)
    if "ee" not in cols:
        raise ReplayError(
            "--gif: cannot find end-effector coordinates in the observation names of this store "
            "(supported: built-in tasks and Fetch)"
        )
    state_cols = entity_columns(list(snapshot.features[STATE_KEY].names or []))
    return {e: flat[:, c] for e, c in cols.items()}, state_cols


def render_gif(
    snapshot: Snapshot,
    episode_id: int,
    out: str | Path,
    *,
    replayed: np.ndarray | None = None,
    fps: float | None = None,
) -> Path:
    """Write an animated GIF of ``episode_id`` to ``out``; returns the path.

    ``replayed`` is an optional ``[length, D]`` replayed ``observation.state`` (NaN rows skipped).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    pos, state_cols = _positions(snapshot, episode_id)
    meta = snapshot.meta(episode_id)
    length = meta.length
    rep_ee = None
    if replayed is not None and "ee" in state_cols:
        rep_ee = np.asarray(replayed, dtype=np.float64)[:, state_cols["ee"]]
    stride = max(1, int(np.ceil(length / MAX_FRAMES)))
    frames = list(range(0, length, stride))
    if frames[-1] != length - 1:
        frames.append(length - 1)
    fps = fps or snapshot.store.manifest.fps
    all_pts = np.concatenate(
        [p for p in pos.values()] + ([rep_ee[~np.isnan(rep_ee).any(1)]] if rep_ee is not None else [])
    )
    lo, hi = all_pts.min(axis=0), all_pts.max(axis=0)
    pad = np.maximum((hi - lo) * 0.1, 0.02)
    lo, hi = lo - pad, hi + pad

    fig, (top, side) = plt.subplots(1, 2, figsize=(8, 4), dpi=DPI)
    for ax, (a, b), title in ((top, (0, 1), "top (x-y)"), (side, (0, 2), "side (x-z)")):
        ax.set_xlim(lo[a], hi[a])
        ax.set_ylim(lo[b], hi[b])
        ax.set_aspect("equal", adjustable="box")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("xyz"[a])
        ax.set_ylabel("xyz"[b])
    seg_at = np.zeros(length, dtype=object)
    for ref in meta.segments:
        seg_at[ref.start : ref.end] = ref.name
    artists = []
    for ax, (a, b) in ((top, (0, 1)), (side, (0, 2))):
        for entity, xyz in pos.items():
            color, marker = STYLE[entity]
            z = {"goal": 1, "cube": 2, "ee": 3}[entity]
            (trail,) = ax.plot([], [], "-", color=color, alpha=0.4, lw=1, zorder=z)
            (dot,) = ax.plot(
                [], [], marker, color=color, ms=9 if entity != "ee" else 6, label=entity, zorder=z
            )
            artists.append((trail, dot, xyz, a, b))
        if rep_ee is not None:
            (rdot,) = ax.plot([], [], "o", mfc="none", mec="black", ms=11, label="replayed ee", zorder=4)
            artists.append((None, rdot, rep_ee, a, b))
    handles, labels = top.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.subplots_adjust(bottom=0.2)
    outcome = "success" if meta.success else (meta.terminal_reason or "failed")
    title = fig.suptitle("")

    def draw(t: int) -> list:
        changed = [title]
        for trail, dot, xyz, a, b in artists:
            if trail is not None:
                trail.set_data(xyz[: t + 1, a], xyz[: t + 1, b])
                changed.append(trail)
            point = xyz[t]
            dot.set_data(
                [point[a]] if not np.isnan(point[a]) else [], [point[b]] if not np.isnan(point[b]) else []
            )
            changed.append(dot)
        seg = seg_at[t] or "-"
        title.set_text(f"episode {episode_id}  frame {t}/{length - 1}  segment {seg}  ({outcome})")
        return changed

    from PIL import Image

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    images = []
    try:
        for t in frames:
            draw(t)
            fig.canvas.draw()
            rgba = np.asarray(fig.canvas.buffer_rgba())
            images.append(Image.fromarray(rgba[..., :3].copy()).convert("P", palette=Image.Palette.ADAPTIVE))
    finally:
        plt.close(fig)
    duration = round(1000.0 * stride / max(fps, 1e-6))
    images[0].save(out, save_all=True, append_images=images[1:], duration=max(duration, 20), loop=0)
    return out


def gif_paths(out: str | Path, episode_ids: Sequence[int]) -> list[Path]:
    """One path per episode: ``out`` itself for one episode, ``<stem>-<id><suffix>`` for several."""
    out = Path(out)
    if len(episode_ids) == 1:
        return [out]
    suffix = out.suffix or ".gif"
    return [out.with_name(f"{out.stem}-{eid}{suffix}") for eid in episode_ids]
