"""The server's Prometheus metrics (`GET /metrics`, text format, through prometheus_client).

Names follow Prometheus' conventions (a `dynaspec_` prefix, `_total` counters, base units)
and mirror what vLLM exports for the same quantities (its `spec_decode_num_draft_tokens`,
`time_to_first_token_seconds`, `num_requests_running`/`waiting`). Each server has its own
registry, so two servers in one process (tests) do not share counts.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_RATE_BUCKETS = (0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    """Every series the server exports."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        reg = self.registry
        self.requests = Counter(
            "dynaspec_requests",
            "Requests answered, by endpoint and HTTP status",
            ["endpoint", "status"],
            registry=reg,
        )
        self.prompt_tokens = Counter(
            "dynaspec_prompt_tokens", "Prompt tokens of finished requests", registry=reg
        )
        self.generation_tokens = Counter(
            "dynaspec_generation_tokens", "Tokens generated (every round's emitted)", registry=reg
        )
        self.drafted = Counter(
            "dynaspec_drafted_tokens", "Tokens drafted (copied + draft model)", registry=reg
        )
        self.accepted = Counter(
            "dynaspec_accepted_tokens", "Drafted tokens the target kept", registry=reg
        )
        self.copied = Counter(
            "dynaspec_copied_tokens", "Drafted tokens copied by prompt lookup", registry=reg
        )
        self.rounds = Counter("dynaspec_rounds", "Batch rounds (target forwards)", registry=reg)
        self.acceptance = Gauge(
            "dynaspec_acceptance_rate", "Accepted / drafted tokens since start", registry=reg
        )
        self.ttft = Histogram(
            "dynaspec_time_to_first_token_seconds",
            "From a request's arrival to its first new token",
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.tokens_per_second = Histogram(
            "dynaspec_request_tokens_per_second",
            "A finished request's new tokens per second, from its arrival",
            buckets=_RATE_BUCKETS,
            registry=reg,
        )
        self.batch_size = Gauge("dynaspec_batch_size", "Rows in the running batch", registry=reg)
        self.queue_length = Gauge(
            "dynaspec_queue_length", "Requests waiting for a place in the batch", registry=reg
        )
        self.source_rounds = Counter(
            "dynaspec_source_rounds",
            "Rows' rounds that drafted from a source (lookup, suffix, model)",
            ["source"],
            registry=reg,
        )
        self.source_drafted = Counter(
            "dynaspec_source_drafted_tokens",
            "Tokens drafted, by source (lookup, suffix: copied; model)",
            ["source"],
            registry=reg,
        )
        self.source_accepted = Counter(
            "dynaspec_source_accepted_tokens",
            "Drafted tokens the target kept, by source",
            ["source"],
            registry=reg,
        )
        self.suffix_cache_bytes = Gauge(
            "dynaspec_suffix_cache_bytes",
            "The suffix cache's memory, estimated from what it stores",
            registry=reg,
        )
        self._sums = [0, 0]  # drafted, accepted: for the acceptance rate

    def round(self, drafted: int, accepted: int, copied: int, emitted: int) -> None:
        """One batch round's totals over its rows."""
        self.rounds.inc()
        self.drafted.inc(drafted)
        self.accepted.inc(accepted)
        self.copied.inc(copied)
        self.generation_tokens.inc(emitted)
        self._sums[0] += drafted
        self._sums[1] += accepted
        if self._sums[0]:
            self.acceptance.set(self._sums[1] / self._sums[0])

    def sources(self, counts: dict[str, dict[str, Any]]) -> None:
        """One batch round's rows, per draft source (serve/sources.source_counts)."""
        for name, entry in counts.items():
            self.source_rounds.labels(name).inc(entry["rounds"])
            self.source_drafted.labels(name).inc(entry["drafted"])
            self.source_accepted.labels(name).inc(entry["accepted"])

    def text(self) -> bytes:
        return generate_latest(self.registry)
