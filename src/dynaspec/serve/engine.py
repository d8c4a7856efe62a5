"""The engine thread: one `ContinuousBatch` driven round by round, fed by a bounded queue.

Requests arrive from the HTTP handlers (any thread) as `Job`s. Before each round the engine
admits waiting jobs while the batch has room (`max_batch`): a joining prompt is prefilled at
most `prefill_chunk` tokens between two rounds while other rows are generating (chunked
prefill: a long prompt does not stall them), at once when none is, and its first token goes
out as soon as it is cached (ContinuousBatch.admit). Each row streams its new tokens to its job
as the round commits them (`JobStream`: transformers' streamer protocol, as
generate(streamer=) streams; text deltas, stop sequences); after the round, rows that ended,
hit a stop sequence or whose client went away leave the batch at once. Beyond `max_queue`
waiting jobs, `submit` refuses (`QueueFull`: the server's 429). The model runs on this thread only.

The engine thread should be the only thread of the process that has run torch's parallel CPU
operations: libgomp (torch's OpenMP on Linux) keeps a pool of worker threads for each thread
that has, and while the process holds more of them than it has CPUs it all but stops spinning
before a wait, so that each of the thousands of parallel regions of a round wakes its workers
by a system call (measured on 2 cores: a decode 25-30% slower than `dynaspec generate`'s, the
models the same). `on_passing_thread` loads the models on a thread whose pool ends with it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dynaspec.continuous import ContinuousBatch, Joining
from dynaspec.core.round import Round
from dynaspec.core.row import Row
from dynaspec.serve.metrics import Metrics
from dynaspec.serve.sources import source_counts
from dynaspec.serve.text import TextStream

log = logging.getLogger("dynaspec.serve")
T = TypeVar("T")


def on_passing_thread(function: Callable[[], T]) -> T:
    """`function()` run on a thread of its own that ends with it (its error raised here):
    torch's OpenMP worker threads that it starts end with that thread (module docstring), so
    that the engine thread's are the process's only ones. For loading the models a server
    decodes with."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dynaspec-load") as loader:
        return loader.submit(function).result()  # leaving the block joins the thread


@dataclass(frozen=True)
class Delta:
    """New text of a request."""

    text: str


@dataclass(frozen=True)
class Finished:
    """The end of a request: why (OpenAI's finish_reason), its counts and stats."""

    reason: str  # "stop" (EOS or a stop sequence) or "length"
    prompt_tokens: int
    completion_tokens: int
    stats: dict[str, Any]
    token_ids: tuple[int, ...] = ()  # the completion's (every token generated)


@dataclass(frozen=True)
class Failed:
    """The request could not be completed; `message` says why."""

    message: str


Event = Delta | Finished | Failed


class QueueFull(Exception):
    """No room in the queue; retry after `retry_after` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


@dataclass
class Job:
    """One request inside the engine: its prompt, its row, where its events go."""

    prompt: list[int]
    row: Row  # made (and checked) by the handler, joined by the engine
    text: TextStream
    emit: Callable[[Event], None]  # thread-safe; called on the engine thread
    arrived: float = field(default_factory=time.perf_counter)
    first_token_s: float | None = None  # from arrival
    cancelled: bool = False  # set by the handler when its client went away
    sent_tokens: int = 0  # new tokens handed to `text`
    scope: str | None = None  # the suffix cache's scope it reads and adds to (serve/sources.py)
    sources: frozenset[str] | None = None  # the draft sources it may use (None: all)

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class JobStream:
    """A job's row's streamer, in transformers' streamer protocol (`put`, `end`), as
    generate(streamer=) gets one: the batch loop puts the prompt, then each round's new
    tokens, which go to the job as text (a stop sequence ends the row)."""

    job: Job
    ttft: Any  # the metrics' time-to-first-token histogram
    prompted: bool = False  # the prompt has been put

    def put(self, value: Any) -> None:
        if not self.prompted:  # the prompt: nothing to send
            self.prompted = True
            return
        job, new = self.job, value.reshape(-1).tolist()
        if not new:
            return
        job.sent_tokens += len(new)
        if job.first_token_s is None:
            job.first_token_s = time.perf_counter() - job.arrived
            self.ttft.observe(job.first_token_s)
        delta = job.text.feed(new)
        if delta:
            job.emit(Delta(delta))

    def end(self) -> None:
        """The row ended; the engine finishes the job when it leaves the batch."""


class Engine:
    """Runs the batch on a thread of its own; `submit` from any thread."""

    def __init__(
        self,
        batch: ContinuousBatch,
        metrics: Metrics,
        max_batch: int,
        max_queue: int,
        prefill_chunk: int | None = None,
    ) -> None:
        self.batch = batch
        self.metrics = metrics
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.prefill_chunk = prefill_chunk  # prompt tokens prefilled between rounds (None: all)
        self.queue: deque[Job] = deque()
        self.jobs: dict[int, Job] = {}  # id(row) -> job, for the rows in the batch
        self.joining: tuple[Job, Joining] | None = None  # the job being prefilled
        self.wake = threading.Condition()
        self.stopping = False
        self.seconds_per_request = 1.0  # running mean, for Retry-After
        self.thread = threading.Thread(target=self._run, name="dynaspec-engine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Finishes the rows and queue already taken, then stops the thread."""
        with self.wake:
            self.stopping = True
            self.wake.notify()
        self.thread.join(timeout)

    def submit(self, job: Job) -> None:
        with self.wake:
            if self.stopping:
                raise QueueFull(5)
            free_rows = max(self.max_batch - len(self.jobs), 0)  # taken at the next round
            if len(self.queue) >= self.max_queue + free_rows:
                waves = (len(self.queue) + len(self.jobs)) / max(self.max_batch, 1)
                raise QueueFull(max(1, round(waves * self.seconds_per_request)))
            self.queue.append(job)
            self.metrics.queue_length.set(len(self.queue))
            self.wake.notify()

    def _run(self) -> None:
        while True:
            with self.wake:
                while not (self.queue or self.jobs or self.joining or self.stopping):
                    self.wake.wait()
                if self.stopping and not (self.queue or self.jobs or self.joining):
                    return
            self._admit()
            if self.jobs:
                self._round()

    def _admit(self) -> None:
        """Waiting jobs join while the batch has room (a cancelled one is dropped); a long
        prompt is prefilled a chunk per round while other rows are generating."""
        while len(self.jobs) < self.max_batch:
            if self.joining is None:
                with self.wake:
                    if not self.queue:
                        break
                    job = self.queue.popleft()
                    self.metrics.queue_length.set(len(self.queue))
                if job.cancelled:
                    continue
                job.row.streamer = JobStream(job, self.metrics.ttft)
                joining = self.batch.joining(job.row, job.prompt, job.scope, job.sources)
                self.joining = (job, joining)
            if not self._prefill(*self.joining):
                break  # the rows generate a round before the next chunk
        self.metrics.batch_size.set(len(self.jobs))

    def _prefill(self, job: Job, joining: Joining) -> bool:
        """One more chunk of the joining job's prompt (all of it while no row is
        generating); whether the engine may take the next job."""
        if job.cancelled:
            self.joining = None
            return True
        chunk = self.prefill_chunk if self.jobs else None
        try:
            if not self.batch.prefill(joining, chunk):
                return False
            first = self.batch.admit(joining)
        except Exception as error:  # a model error must not end the server
            log.exception("a request could not join the batch")
            job.emit(Failed(f"could not start this request: {error}"))
        else:
            self.jobs[id(job.row)] = job
            self._count([first])  # its first token went out, before any batch round
            self._leave()
        self.joining = None
        return True

    def _round(self) -> None:
        try:
            records = self.batch.step()
        except Exception as error:  # every row of the round fails; the server goes on
            log.exception("a batch round failed")
            for job in self.jobs.values():
                job.emit(Failed(f"generation failed: {error}"))
            self.batch.leave(lambda row: True)
            self.jobs.clear()
            return
        self._count(records)  # the rows' new tokens went out as the round committed them
        self._leave()

    def _leave(self) -> None:
        """Rows that ended, hit a stop sequence or lost their client leave the batch."""
        for row in self.batch.leave(self._gone):
            self._finish(self.jobs.pop(id(row)))
        self.metrics.batch_size.set(len(self.jobs))
        if self.batch.suffix_cache is not None:
            self.metrics.suffix_cache_bytes.set(self.batch.suffix_cache.nbytes())

    def _count(self, records: list[Round | None]) -> None:
        done = [record for record in records if record is not None]
        self.metrics.round(
            sum(r.num_drafted for r in done),
            sum(r.num_accepted for r in done),
            sum(r.num_copied for r in done),
            sum(r.num_emitted for r in done),
        )
        self.metrics.sources(source_counts(done))

    def _gone(self, row: Row) -> bool:
        job = self.jobs[id(row)]
        return row.done or job.text.stopped or job.cancelled

    def _finish(self, job: Job) -> None:
        if job.cancelled:
            return
        rest = job.text.finish()
        if rest:
            job.emit(Delta(rest))
        row = job.row
        produced = row.length - row.start
        hit_eos = produced and int(row.tokens[row.length - 1]) in row.limits.eos_token_ids
        reason = "stop" if job.text.stopped or hit_eos else "length"
        seconds = time.perf_counter() - job.arrived
        self.seconds_per_request += 0.2 * (seconds - self.seconds_per_request)
        self.metrics.prompt_tokens.inc(row.start)
        if seconds > 0:
            self.metrics.tokens_per_second.observe(produced / seconds)
        ids = tuple(row.tokens[row.start : row.length].tolist())
        job.emit(Finished(reason, row.start, produced, _stats(job, seconds), ids))


def _stats(job: Job, seconds: float) -> dict[str, Any]:
    """The request's speculation stats (the responses' extra `dynaspec` field)."""
    summary = job.row.stats.summary()
    produced = job.row.length - job.row.start
    return {
        "rounds": summary.rounds,
        "drafted_tokens": summary.num_drafted,
        "accepted_tokens": summary.num_accepted,
        "copied_tokens": summary.num_copied,
        "acceptance_rate": summary.acceptance_rate if summary.num_drafted else None,
        "draft_forwards": summary.draft_forwards,
        "draft_time_s": summary.draft_time_s,
        "target_time_s": summary.target_time_s,
        "sources": source_counts(job.row.stats.rounds),
        "time_to_first_token_s": job.first_token_s,
        "seconds": seconds,
        "tokens_per_second": produced / seconds if seconds > 0 else None,
    }
