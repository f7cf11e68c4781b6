"""The collection loop: exact DAgger transitions, per-row episodes, batched commits.

Per step and env row (docs/architecture.md, Transition order): freeze the pre-action observation, query student and
expert on it, select the behavior action, step the env, record the transition in the row's
episode buffer. Finished rows are copied out once, committed by the writer thread and reset.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import torch

from odsd.collect.beta import BetaSchedule
from odsd.collect.buffers import EpisodeBuffers, frame_nbytes, spare_slots_within
from odsd.collect.commit_process import CommitProcess
from odsd.collect.commit_worker import CommitStats, CommitWorker
from odsd.collect.config import CollectConfig
from odsd.collect.derived import DERIVED_FIELDS
from odsd.collect.finished import FinishedBatch, FinishedEpisode, RunInfo
from odsd.collect.frames import CHUNK_POSITION, SOURCE_EXPERT, SOURCE_HOLD, SOURCE_STUDENT, frame_features
from odsd.collect.metrics import MetricsLog, MetricsWindow, StepStats, rss_bytes
from odsd.collect.mixing import BetaMixer
from odsd.collect.student import StudentPolicy, student_source
from odsd.envs import VecEnv, make_env, safe_hold_action
from odsd.errors import ConfigError
from odsd.experts import Expert, make_expert, validate_query
from odsd.experts.errors import ExpertNotFoundError, expert_failures
from odsd.experts.failures import failure_name
from odsd.schema import CommitContext, EpisodeMeta
from odsd.store import CommitResult, EpisodeStore

log = logging.getLogger("odsd.collect")

NO_SUCCESS_WARNING_EPISODES = 100
"""A run that commits only successes warns after this many finished episodes in a row without one."""

PER_ITERATION_KEPT = 100
"""Iteration summaries a collector keeps for :class:`RunSummary` (all go to ``metrics.jsonl``)."""


@dataclass
class Progress:
    """Counters that define where a run is; persisted in run-state manifests."""

    iteration: int = 0
    episodes_in_iteration: int = 0
    episodes_accepted: int = 0
    episodes_finished: int = 0
    episodes_committed: int = 0
    frames_committed: int = 0
    env_steps: int = 0
    successes: int = 0


@dataclass
class RunSummary:
    run_id: str
    mode: str
    iterations: int
    episodes_finished: int
    episodes_committed: int
    frames_committed: int
    success_rate: float | None
    watermark: int | None
    elapsed_s: float
    stop_reason: str
    per_iteration: list[dict[str, Any]] = field(default_factory=list)
    """The newest :data:`PER_ITERATION_KEPT` iterations (``iterations`` counts them all)."""


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


class Collector:
    """Runs one collection run described by a :class:`CollectConfig`.

    >>> cfg = CollectConfig(mode="dagger_sync", task="pick_place", num_envs=16, store="data.odsd",
    ...                     episodes_per_iteration=32, max_iterations=2)
    >>> summary = Collector(cfg).run()

    ``stop`` (a :class:`threading.Event`) ends the run gracefully: no new episodes are counted,
    partial episodes are discarded, finished ones are committed.
    """

    def __init__(
        self,
        config: CollectConfig,
        *,
        env: VecEnv | None = None,
        expert: Expert | None = None,
        commit_store: bool = True,
        on_report: Callable[[str, dict[str, Any]], None] | None = None,
        on_tick: Callable[[Collector], None] | None = None,
        on_iteration_end: Callable[[Collector], None] | None = None,
        on_start: Callable[[Collector], None] | None = None,
        incarnation: int = 0,
    ) -> None:
        self.config = config
        if config.torch_threads is not None:
            torch.set_num_threads(config.torch_threads)
        self.device = torch.device(config.device)
        self.env = env or make_env(
            config.task, num_envs=config.num_envs, device=self.device, seed=config.seed, **config.task_kwargs
        )
        self.spec = self.env.spec
        self.n = self.spec.num_envs
        self.expert = expert if expert is not None else self._make_expert()
        self._check_mode()
        if config.record_state and (self.spec.state is None or not hasattr(self.env, "get_state")):
            raise ConfigError(f"record_state: task {self.spec.task!r} declares no simulator state layout")
        self.run_id = config.run_id or new_run_id()
        self.incarnation = incarnation
        self.env_seed = config.seed + 1_000_003 * incarnation
        self.on_tick = on_tick
        self.on_iteration_end = on_iteration_end
        self.on_start = on_start
        self.reload_requested = threading.Event()
        self._stop = threading.Event()
        self.schedule: BetaSchedule = config.beta
        self.progress = Progress()
        # Loaded before the store opens: a LeRobot student that does not fit the env is refused
        # before anything is created, and a chunking one adds action.chunk_position to the schema.
        self.students = student_source(
            config.lerobot_student if self.needs_student else None,
            config.policies_dir,
            self.spec,
            device=self.device,
            seed=config.seed,
        )
        self.features = frame_features(
            self.spec, record_state=config.record_state, image_encoding=config.image_encoding
        )
        self._chunked = self.needs_student and self.students.chunk_steps > 1
        if self._chunked:
            self.features[CHUNK_POSITION] = {"dtype": "int16", "shape": [], "names": None}
        self.store: EpisodeStore | None = None
        self.worker: CommitWorker | CommitProcess | None = None
        if commit_store:
            self.store = EpisodeStore.open_or_create(
                config.store,
                features=self.features,
                fps=self.spec.control_hz,
                robot_type=self.spec.task,
                durability=config.durability,
                index=False,  # the collector only appends: no per-episode index in memory
            )
        self.run_dir = self.store.root / "runs" / self.run_id if self.store else None
        self.metrics_log = MetricsLog(self.run_dir / "metrics.jsonl" if self.run_dir else None)
        self.on_report = on_report
        self.student: StudentPolicy | None = None
        self.mixer = BetaMixer(self.n, seed=config.seed + 7919, unit=config.mixing)
        max_steps = self.spec.max_episode_steps
        recorded = {k: v for k, v in self.features.items() if k not in DERIVED_FIELDS}
        spare = spare_slots_within(self.n, max_steps * frame_nbytes(recorded), config.episode_buffer_bytes)
        self.buffers = EpisodeBuffers(recorded, self.n, max_steps, self.device, spare_slots=spare)
        # Stated where it matters: with cameras the buffers take GBs (docs/collect.md, "Cameras").
        log.log(
            logging.INFO if self.spec.cameras else logging.DEBUG,
            "episode buffers: %d slots x %d steps, %.1f MiB on %s; up to %d batches queued for the writer",
            self.buffers.num_slots,
            max_steps,
            self.buffers.nbytes / 2**20,
            self.device,
            self._queue_size(),
        )
        self.step_index = torch.zeros(self.n, dtype=torch.long, device=self.device)
        self.episode_started: list[str] = [""] * self.n
        self._low = self.spec.action.low_tensor(self.device) - 1e-5
        self._high = self.spec.action.high_tensor(self.device) + 1e-5
        self._zeros_i32 = torch.zeros(self.n, dtype=torch.int32, device=self.device)
        self._zeros_i16 = torch.zeros(self.n, dtype=torch.int16, device=self.device)
        self._constants: dict[str, tuple[float, torch.Tensor]] = {}
        self._lock = threading.Lock()
        self.window = MetricsWindow()
        self.iteration_window = MetricsWindow()
        # The newest iterations' summaries (for the end-of-run table); a daemon runs thousands.
        self.per_iteration: deque[dict[str, Any]] = deque(maxlen=PER_ITERATION_KEPT)
        self.iterations_recorded = 0
        self.last_error: str | None = None
        self.eval_episodes: list[EpisodeMeta] = []
        self._eval_count = 0
        self._pending: list[tuple[int, FinishedEpisode]] = []  # (buffer slot, episode)
        self._pending_since = 0.0
        self._run_info_cache: RunInfo | None = None
        self._last_commit_seq: int | None = None
        self._without_success = 0
        # When each submitted, not yet committed episode finished (commits report them in order).
        self._finish_times: deque[float] = deque()
        # Finished episodes are copied out in batches of about this many (amortizes the copy).
        self._flush_episodes = max(1, min(config.commit_batch_episodes, self.n // 2))
        self._flush_age_s = config.commit_max_age_s / 2
        quota = config.max_episodes or 0
        self._eval_quota = [quota // self.n + (1 if r < quota % self.n else 0) for r in range(self.n)]

    # -- setup --------------------------------------------------------------------------------

    def _make_expert(self) -> Expert | None:
        if self.config.mode == "eval" and self.config.expert in ("", "none"):
            return None
        if self.config.mode == "eval" and self.config.expert == "auto":
            # Evaluation only uses an expert to name the segment a failure ended in.
            try:
                return make_expert("planner", self.spec, **self.config.expert_kwargs)
            except ExpertNotFoundError:
                log.info("no planner for task %r: failures are not attributed to segments", self.spec.task)
                return None
        return make_expert(self.config.expert, self.spec, **self.config.expert_kwargs)

    def _check_mode(self) -> None:
        if self.config.mode == "dagger_sync":
            if self.expert is None:
                raise ConfigError("dagger_sync needs an expert")
            if self.expert.spec.kind == "demo" or not self.expert.spec.state_conditioned:
                raise ConfigError(
                    f"dagger_sync needs a state-conditioned expert; {self.expert.spec.name!r} is "
                    f"{self.expert.spec.kind} (open-loop demos are for BC only; use --mode expert_demo)"
                )
        if self.config.mode == "expert_demo" and self.expert is None:
            raise ConfigError("expert_demo needs an expert")

    @property
    def beta(self) -> float:
        if self.config.mode == "expert_demo":
            return 1.0
        if self.config.mode == "eval":
            return 0.0
        return self.schedule.value(self.progress.iteration)

    @property
    def needs_student(self) -> bool:
        return self.config.mode != "expert_demo"

    @property
    def watermark(self) -> int | None:
        """A watermark that shows every episode this run committed (its newest commit's seq).

        Cheaper than ``store.watermark`` with a writer process: that one reads back every record
        the child wrote. Falls back to the store's watermark before this run's first commit.
        """
        if self._last_commit_seq is not None:
            return self._last_commit_seq
        return self.store.watermark if self.store is not None else None

    @property
    def policy_version(self) -> int:
        return self.student.version if self.student is not None else -1

    def _load_student(self) -> None:
        if not self.needs_student:
            return
        if self.reload_requested.is_set():
            self.reload_requested.clear()
            log.info("reloading the policy directory %s", self.students.dir)
        previous = self.student
        self.student = self.students.load_newest(create=self.config.mode == "dagger_sync")
        wait = self.config.policy_wait_s
        if previous is None or wait <= 0 or self.student.version > previous.version:
            return
        if self._bound_reached():
            return  # the run ends here: no iteration would use a newer student
        self._wait_for_new_student(previous.version, wait)

    def _wait_for_new_student(self, version: int, timeout_s: float) -> None:
        """Synchronous DAgger with a separate learner: wait for a snapshot newer than ``version``.

        ``on_tick`` keeps running while waiting (watchdog pings, status heartbeat, signals).
        """
        log.info("waiting up to %.0fs for a student newer than v%d", timeout_s, version)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self._stop.is_set():
            self._stop.wait(0.2)
            if self.on_tick is not None:
                self.on_tick(self)
            newest = self.students.load_newest(create=False)
            if newest.version > version:
                self.student = newest
                return
        log.warning("no student newer than v%d after %.0fs; continuing with it", version, timeout_s)

    def pin_student(self, path: str) -> None:
        """Use this exact snapshot until the next iteration boundary (resume restores it)."""
        self.student = self.students.load_path(path)

    # -- the loop -----------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, *, abort: threading.Event | None = None) -> RunSummary:
        """Collect until a bound in the config is reached or ``stop`` is set.

        ``abort`` (set after ``stop``, e.g. by a second signal) drops finished episodes that are
        still queued instead of committing them; a partial episode is never committed.
        """
        stop = stop or threading.Event()
        abort = abort or threading.Event()
        self._stop = stop
        started = time.monotonic()
        if self.student is None:
            self._load_student()
        if self.store is not None:
            self._write_run_file()
            self.worker = self._start_worker(self.store)
        if self.on_start is not None:
            self.on_start(self)
        obs, info = self.env.reset(seed=self.env_seed)
        all_rows = torch.arange(self.n, device=self.device)
        self._start_episodes(all_rows, obs, info)
        if self.worker is not None:
            # The writer process started above and imported while the envs reset; collecting
            # only once it is up keeps the first iteration boundary (a drain) short.
            self.worker.wait_ready()
        last_report = time.monotonic()
        stop_reason = "stopped"
        try:
            while True:
                reason = self._should_stop(stop, started)
                if reason:
                    stop_reason = reason
                    break
                obs = self._step(obs, all_rows)
                self._flush_if_old()
                if self.worker is not None:
                    self.worker.check()
                if self.on_tick is not None:
                    self.on_tick(self)
                if self.progress.episodes_in_iteration >= self.config.episodes_per_iteration:
                    self._end_iteration()
                if time.monotonic() - last_report >= self.config.metrics_interval_s:
                    with self._lock:
                        window, self.window = self.window, MetricsWindow()
                    self._report("rolling", window.summary())
                    last_report = time.monotonic()
        finally:
            unsubmitted = 0
            if abort.is_set():
                unsubmitted = sum(ep.commit for _, ep in self._pending)
                self.buffers.release([slot for slot, _ in self._pending])
                self._pending = []
            else:
                self._flush()
            if self.worker is not None:
                dropped = unsubmitted + self.worker.close(discard_pending=abort.is_set())
                # Dropped episodes were accepted in the current iteration (every boundary drains).
                self.progress.episodes_accepted -= dropped
                self.progress.episodes_in_iteration = max(0, self.progress.episodes_in_iteration - dropped)
            self.env.close()
        if self.iteration_window.episodes_finished:
            self._record_iteration()
        final = {**self.progress.__dict__, "stop_reason": stop_reason}
        self._emit("final", final)
        watermark = self.watermark
        finished = self.progress.episodes_finished
        return RunSummary(
            run_id=self.run_id,
            mode=self.config.mode,
            iterations=self.iterations_recorded,
            episodes_finished=finished,
            episodes_committed=self.progress.episodes_committed,
            frames_committed=self.progress.frames_committed,
            success_rate=self.progress.successes / finished if finished else None,
            watermark=watermark,
            elapsed_s=time.monotonic() - started,
            stop_reason=stop_reason,
            per_iteration=list(self.per_iteration),
        )

    def _queue_size(self) -> int:
        """Batches that may wait for the writer: ``queue_size``, fewer if they would pass ``commit_queue_bytes``."""
        spare = self.buffers.num_slots - self.n
        batch_bytes = (
            spare * self.buffers.nbytes // self.buffers.num_slots
        )  # a flush takes at most the spares
        return max(1, min(self.config.queue_size, self.config.commit_queue_bytes // max(batch_bytes, 1)))

    def _start_worker(self, store: EpisodeStore) -> CommitWorker | CommitProcess:
        writer_id = f"{self.run_id}-{uuid.uuid4().hex[:6]}"
        options: dict[str, Any] = {
            "max_batch_episodes": self.config.commit_batch_episodes,
            # Episodes wait up to half the age here and half in the worker: a finished episode
            # is committed within commit_max_age_s (plus the commit itself).
            "max_batch_age_s": self.config.commit_max_age_s / 2,
            "queue_size": self._queue_size(),
            "context": self._commit_context,
            "on_commit": self._on_commit,
            "compaction": self.config.compaction,
        }
        if self.config.writer == "process":
            if not multiprocessing.current_process().daemon:
                return CommitProcess(
                    store.root,
                    run_id=self.run_id,
                    writer_id=writer_id,
                    frame_arena_bytes=self.config.commit_queue_bytes,
                    **options,
                )
            log.warning(
                "writer='process' cannot start a child inside a daemonic process "
                "(e.g. a multiprocessing.Pool worker); committing from a thread instead"
            )
        return CommitWorker(store.writer(run_id=self.run_id, writer_id=writer_id), **options)

    def _write_run_file(self) -> None:
        assert self.run_dir is not None and self.store is not None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path = self.run_dir / "run.json"
        if path.exists():
            return
        info = {
            "run_id": self.run_id,
            "created": datetime.now(UTC).isoformat(),
            "config": self.config.model_dump(mode="json"),
            "env_layout_hash": self.spec.layout_hash(),
            "schema_hash": self.store.manifest.schema_hash(),
            "expert": None if self.expert is None else self.expert.spec.__dict__,
        }
        path.write_text(json.dumps(info, indent=1, default=str))

    def _should_stop(self, stop: threading.Event, started: float) -> str | None:
        cfg = self.config
        if stop.is_set():
            return "signal"
        if cfg.mode == "eval":
            if cfg.max_episodes is not None and self._eval_count >= cfg.max_episodes:
                return "max_episodes"
        elif cfg.max_episodes is not None and self.progress.episodes_accepted >= cfg.max_episodes:
            return "max_episodes"
        if cfg.max_iterations is not None and self.progress.iteration >= cfg.max_iterations:
            return "max_iterations"
        if cfg.duration_s is not None and time.monotonic() - started >= cfg.duration_s:
            return "duration"
        return None

    def _step(self, obs: dict[str, torch.Tensor], all_rows: torch.Tensor) -> dict[str, torch.Tensor]:
        spec = self.spec
        frozen = {k: v.clone() for k, v in obs.items()}
        flat = spec.flatten_observation(frozen)
        beta = self.beta

        if self.student is not None:
            raw_student, chunk_position = self.student.act(flat)
            student_action = _as(raw_student, torch.float32, self.device)
            # NaN fails both comparisons, so this also rejects non-finite actions.
            student_valid = ((student_action >= self._low) & (student_action <= self._high)).all(dim=1)
        else:
            student_action = torch.zeros((self.n, spec.action.dim), device=self.device)
            student_valid = torch.zeros(self.n, dtype=torch.bool, device=self.device)
            chunk_position = None

        latency = None
        if self.expert is not None:
            t0 = time.perf_counter()
            with expert_failures(self.config.expert, "in act()"):
                raw_query = self.expert.act(frozen, env_ids=all_rows)
            query = validate_query(raw_query, spec, self.n)
            latency = time.perf_counter() - t0
            expert_action = _as(query.action, torch.float32, self.device)
            expert_valid = query.valid
            failure = (
                _as(query.failure, torch.int32, self.device) if query.failure is not None else self._zeros_i32
            )
            confidence = (
                _as(query.confidence, torch.float32, self.device)
                if query.confidence is not None
                else expert_valid.to(torch.float32)
            )
            phase = query.metadata.get("phase")
        else:
            expert_action = torch.zeros_like(student_action)
            expert_valid = torch.zeros(self.n, dtype=torch.bool, device=self.device)
            failure = torch.zeros(self.n, dtype=torch.int32, device=self.device)
            confidence = torch.zeros(self.n, dtype=torch.float32, device=self.device)
            phase = None

        use_expert = self.mixer.use_expert(beta, self.device)
        take_expert = (use_expert & expert_valid) | (~use_expert & ~student_valid & expert_valid)
        take_student = ~take_expert & student_valid
        hold = ~take_expert & ~take_student
        behavior = torch.where(take_expert[:, None], expert_action, student_action)
        if bool(hold.any()):
            behavior = torch.where(hold[:, None], safe_hold_action(self.env).to(self.device), behavior)
        source = torch.full((self.n,), SOURCE_STUDENT, dtype=torch.int8, device=self.device)
        source[take_expert] = SOURCE_EXPERT
        source[hold] = SOURCE_HOLD

        seg_id = self._zeros_i16 if phase is None else phase.to(self.device, torch.int16)
        pre_state = self.env.get_state() if self.config.record_state else None  # type: ignore[attr-defined]
        next_obs, reward, terminated, truncated, info = self.env.step(behavior)
        success = _as(info["success"], torch.bool, self.device)

        frame: dict[str, torch.Tensor] = dict(flat)
        frame.update(
            {
                "action.expert": expert_action,
                "action.expert_valid": expert_valid,
                "action.expert_confidence": confidence,
                "action.expert_failure": failure,
                "action.student": student_action,
                "action.student_valid": student_valid,
                "action.behavior": behavior,
                "action.source": source,
                "reward": reward,
                "success": success,
                "segment_id": seg_id,
                "policy_version": self._constant("policy_version", self.policy_version, torch.int32),
                "beta": self._constant("beta", beta, torch.float32),
            }
        )
        if self._chunked:
            no_chunk = self._constant(CHUNK_POSITION, -1, torch.int16)
            frame[CHUNK_POSITION] = chunk_position if chunk_position is not None else no_chunk
        if pre_state is not None:
            frame.update({f"state.{name}": value for name, value in pre_state.items()})
        self.buffers.record(frame, self.step_index)
        self.step_index += 1

        invalid: dict[str, int] = {}
        if self.expert is not None and not bool(expert_valid.all()):
            codes, counts = torch.unique(failure[~expert_valid], return_counts=True)
            invalid = {
                failure_name(int(c)): int(k) for c, k in zip(codes.tolist(), counts.tolist(), strict=True)
            }
        dis_sum, dis_dims, dis_rows = 0.0, None, 0
        if self.student is not None and self.expert is not None:
            dis_sum, dis_dims, dis_rows = StepStats.disagreement(
                expert_action, student_action, expert_valid & student_valid
            )
        stats = StepStats(
            rows=self.n,
            expert_latency_s=latency,
            invalid_reasons=invalid,
            expert_executed=int(take_expert.sum()),
            disagreement_sum=dis_sum,
            disagreement_dim_sum=dis_dims,
            disagreement_rows=dis_rows,
        )
        with self._lock:
            self.window.add_step(stats)
            self.iteration_window.add_step(stats)
        self.progress.env_steps += self.n

        done = terminated | truncated
        if bool(done.any()):
            rows = done.nonzero().squeeze(1)
            self._finish_episodes(rows, terminated, truncated, success)
            next_obs, reset_info = self.env.reset(env_ids=rows)
            self._start_episodes(rows, next_obs, reset_info)
        return next_obs

    def _constant(self, name: str, value: float, dtype: torch.dtype) -> torch.Tensor:
        """A per-row tensor filled with ``value``, rebuilt only when the value changes."""
        cached = self._constants.get(name)
        if cached is None or cached[0] != value:
            cached = (value, torch.full((self.n,), value, dtype=dtype, device=self.device))
            self._constants[name] = cached
        return cached[1]

    def _start_episodes(self, rows: torch.Tensor, obs: dict[str, torch.Tensor], info: dict[str, Any]) -> None:
        self.step_index[rows] = 0
        self.mixer.start_episodes(rows)
        now = datetime.now(UTC).isoformat()
        for r in rows.tolist():
            self.episode_started[r] = now
        if self.student is not None:
            self.student.reset_rows(rows)  # a chunking student starts a new chunk on these rows
        if self.expert is not None:
            with expert_failures(self.config.expert, "in reset()"):
                self.expert.reset(rows, obs, info)

    def _finish_episodes(
        self, rows: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor, success: torch.Tensor
    ) -> None:
        """Count finished rows now; their frames wait in retired slots until :meth:`_flush`."""
        spare = self.buffers.num_slots - self.n
        if rows.numel() > spare:  # a tight memory budget: fewer spare slots than rows finishing
            for part in rows.split(spare):
                self._finish_episodes(part, terminated, truncated, success)
            return
        if self.buffers.free_slots < rows.numel():
            self._flush()
        lengths = self.step_index[rows].tolist()
        slots = self.buffers.retire(rows).tolist()
        now = datetime.now(UTC).isoformat()
        finished_at = time.monotonic()
        ok_rows, term_rows = success[rows].tolist(), terminated[rows].tolist()
        trunc_rows = truncated[rows].tolist()
        dropped: list[int] = []
        for j, row in enumerate(rows.tolist()):
            if self.config.mode != "eval" and self._bound_reached():
                dropped.append(slots[j])  # rows finishing in the step that reached a bound
                continue
            ok = bool(ok_rows[j])
            evaluate = False
            if self.config.mode == "eval":
                if self._eval_quota[row] <= 0:
                    dropped.append(slots[j])
                    continue
                self._eval_quota[row] -= 1
                self._eval_count += 1
                evaluate = True
            self.progress.episodes_finished += 1
            self.progress.successes += int(ok)
            self._note_success(ok)
            with self._lock:
                for window in (self.window, self.iteration_window):
                    window.episodes_finished += 1
                    window.successes += int(ok)
                    window.lengths.append(lengths[j])
            commit = self._accept(ok)
            if not (commit or evaluate):
                dropped.append(slots[j])
                continue
            if not self._pending:
                self._pending_since = time.monotonic()
            self._pending.append(
                (
                    slots[j],
                    FinishedEpisode(
                        length=lengths[j],
                        row=row,
                        success=ok,
                        terminated=bool(term_rows[j]),
                        truncated=bool(trunc_rows[j]),
                        iteration=self.progress.iteration,
                        beta=self.beta,
                        started=self.episode_started[row],
                        finished=now,
                        commit=commit,
                        evaluate=evaluate,
                    ),
                )
            )
            if commit:
                self._finish_times.append(finished_at)
                self.progress.episodes_accepted += 1
                self.progress.episodes_in_iteration += 1
                if self.progress.episodes_in_iteration >= self.config.episodes_per_iteration:
                    self._end_iteration()  # later rows of this step belong to the next iteration
        self.buffers.release(dropped)
        if len(self._pending) >= self._flush_episodes:
            self._flush()

    def _flush_if_old(self) -> None:
        if self._pending and time.monotonic() - self._pending_since >= self._flush_age_s:
            self._flush()

    def _flush(self) -> None:
        """Copy the pending finished episodes to the host (one copy per dtype) and hand the
        accepted ones to the commit worker, which builds their metadata, as one batch."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        slots = torch.tensor([slot for slot, _ in pending], dtype=torch.long, device=self.device)
        episodes = [ep for _, ep in pending]
        lengths = torch.tensor([ep.length for ep in episodes], dtype=torch.long, device=self.device)
        frames, offsets = self.buffers.take_concat(slots, lengths)
        self.buffers.release(slots)
        batch = FinishedBatch(frames=frames, offsets=offsets, episodes=episodes, run=self._run_info())
        if any(ep.evaluate for ep in episodes):
            evaluated = batch.select([j for j, ep in enumerate(episodes) if ep.evaluate])
            self.eval_episodes.extend(evaluated.metas())
        accepted = [j for j, ep in enumerate(episodes) if ep.commit]
        if accepted and self.worker is not None:
            self.worker.submit(batch.select(accepted))

    def _run_info(self) -> RunInfo:
        if self._run_info_cache is None:
            self._run_info_cache = RunInfo(
                run_id=self.run_id,
                writer_id=self.worker.writer_id if self.worker is not None else None,
                seed=self.env_seed,
                task=self.spec.task_description,
                expert_name=self.expert.spec.name if self.expert is not None else None,
                expert_version=self.expert.spec.version if self.expert is not None else None,
                phase_names=tuple(getattr(self.expert, "phase_names", []) or ()),
                has_student=self.needs_student,
                fields=tuple(self.features),
            )
        return self._run_info_cache

    def _bound_reached(self) -> bool:
        cfg, p = self.config, self.progress
        return (cfg.max_iterations is not None and p.iteration >= cfg.max_iterations) or (
            cfg.max_episodes is not None and p.episodes_accepted >= cfg.max_episodes
        )

    def _note_success(self, ok: bool) -> None:
        """Warn when a run that commits only successes has not seen one in a long while."""
        self._without_success = 0 if ok else self._without_success + 1
        cfg = self.config
        only_successes = (cfg.mode == "expert_demo" and not cfg.keep_failed) or (
            cfg.mode == "dagger_sync" and cfg.success_only
        )
        if only_successes and self._without_success == NO_SUCCESS_WARNING_EPISODES:
            signal = getattr(self.env, "success_signal", True)
            why = (
                f"task {self.spec.task!r} reports no success signal (info has no 'is_success'); define one "
                "in a wrapper (docs/envs.md) or pass --keep-failed"
                if signal is False
                else "does the expert solve the task? `odsd check-env` shows whether the env reports success; "
                "--keep-failed commits failed episodes too"
            )
            log.warning(
                "%d episodes in a row finished without success and only successful episodes are "
                "committed, so nothing is being committed: %s",
                NO_SUCCESS_WARNING_EPISODES,
                why,
            )

    def _accept(self, success: bool) -> bool:
        mode = self.config.mode
        if mode == "expert_demo":
            return success or self.config.keep_failed
        if mode == "dagger_sync":
            return success or not self.config.success_only
        return self.worker is not None

    def _end_iteration(self) -> None:
        """Synchronized point: drain commits, record metrics, load the newest student, advance beta."""
        self._flush()
        if self.worker is not None:
            self.worker.drain()
        self._record_iteration()
        self.progress.iteration += 1
        self.progress.episodes_in_iteration = 0
        self._load_student()
        if self.on_iteration_end is not None:
            self.on_iteration_end(self)

    def _record_iteration(self) -> None:
        with self._lock:
            window, self.iteration_window = self.iteration_window, MetricsWindow()
        summary = window.summary()
        summary.update(iteration=self.progress.iteration, beta=self.beta, policy_version=self.policy_version)
        self.per_iteration.append(summary)
        self.iterations_recorded += 1
        self._report("iteration", summary)

    def _report(self, kind: str, data: dict[str, Any]) -> None:
        data.setdefault("iteration", self.progress.iteration)
        data.setdefault("beta", self.beta)
        data.setdefault("policy_version", self.policy_version)
        data["writer_queue_depth"] = self.worker.depth if self.worker else 0
        data["rss_bytes"] = rss_bytes()
        data["episodes_committed_total"] = self.progress.episodes_committed
        self._emit(kind, data)

    def _emit(self, kind: str, data: dict[str, Any]) -> None:
        record = {"kind": kind, "time": datetime.now(UTC).isoformat(), "run_id": self.run_id, **data}
        self.metrics_log.write(record)
        if self.on_report is not None:
            self.on_report(kind, record)

    def _commit_context(self) -> CommitContext:
        return CommitContext(
            iteration=self.progress.iteration, beta=self.beta, policy_version=self.policy_version
        )

    def _on_commit(self, result: CommitResult, stats: CommitStats) -> None:
        now = time.monotonic()
        with self._lock:
            count = min(stats.episodes, len(self._finish_times))
            lags = [now - self._finish_times.popleft() for _ in range(count)]
            if stats.seq is not None:
                self._last_commit_seq = max(stats.seq, self._last_commit_seq or -1)
            self.progress.episodes_committed += stats.episodes
            self.progress.frames_committed += stats.frames
            for window in (self.window, self.iteration_window):
                window.episodes_committed += stats.episodes
                window.frames_committed += stats.frames
                window.commit_latency_s.append(stats.latency_s)
                window.visibility_lag_s.extend(lags)


def _as(tensor: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``tensor`` in ``dtype`` on ``device``, without a call when it already is."""
    if tensor.dtype == dtype and tensor.device == device:
        return tensor
    return tensor.to(device, dtype)
