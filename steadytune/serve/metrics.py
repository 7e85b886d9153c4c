"""`GET /metrics`: the server's counters in Prometheus' text format (prometheus_client writes the format).

HTTP side (recorded here): requests by endpoint and status, request latency (a histogram, plus p50/p95/p99 of
the last 1,000 requests as gauges, readable without a Prometheus server). Engine side (read from the engine at
scrape time): tokens in and out, tokens/s over the last 10 s, queue depth, running sequences, forwards and rows
per forward (their ratio is the mean batch), sequences cancelled by a disconnect, refused (503) or failed.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/classify", "/v1/models", "/health", "/metrics")
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
QUANTILES = (0.5, 0.95, 0.99)


class ServeMetrics:
    def __init__(self, engine):
        self.registry = CollectorRegistry()
        self.requests = Counter("steadytune_requests", "HTTP requests answered, by endpoint and status code",
                                ["endpoint", "status"], registry=self.registry)
        self.latency = Histogram("steadytune_request_seconds", "Time from a request's arrival to the end of its "
                                 "response (streams included)", ["endpoint"], buckets=LATENCY_BUCKETS,
                                 registry=self.registry)
        self.first_token = Histogram("steadytune_time_to_first_token_seconds", "Time from a generation request's "
                                     "arrival to its first text", buckets=LATENCY_BUCKETS, registry=self.registry)
        self._recent: deque = deque(maxlen=1000)
        self._lock = threading.Lock()
        self.registry.register(_EngineCollector(engine, self))

    def observe(self, path: str, status: int, seconds: float) -> None:
        endpoint = path if path in ENDPOINTS else "other"  # arbitrary paths must not create label values
        self.requests.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)
        if endpoint.startswith("/v1/") and endpoint != "/v1/models" and status == 200:
            with self._lock:
                self._recent.append(seconds)

    def recent_quantiles(self) -> dict[float, float]:
        with self._lock:
            values = list(self._recent)
        if len(values) < 2:
            return {q: (values[0] if values else 0.0) for q in QUANTILES}
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        return {q: cuts[round(q * 100) - 1] for q in QUANTILES}

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector:
    def __init__(self, engine, metrics: ServeMetrics):
        self.engine = engine
        self.metrics = metrics

    def collect(self):
        s = self.engine.stats
        for name, help_text, value in (
                ("steadytune_prompt_tokens", "Prompt tokens of accepted sequences", s.prompt_tokens),
                ("steadytune_generated_tokens", "Tokens generated", s.generated_tokens),
                ("steadytune_forward_steps", "Forward passes of the batcher (prefills and decode steps)", s.steps),
                ("steadytune_forward_rows", "Sequences summed over forward passes (/ steps = mean batch)", s.step_rows),
                ("steadytune_sequences_cancelled", "Sequences dropped because their client disconnected", s.cancelled),
                ("steadytune_sequences_rejected", "Sequences refused with 503 because the queue was full", s.rejected),
                ("steadytune_sequences_failed", "Sequences that failed in a forward pass (e.g. out of memory)", s.failed),
                ("steadytune_texts_classified", "Texts scored by /v1/classify", s.classified)):
            yield CounterMetricFamily(name, help_text, value=value)
        for name, help_text, value in (
                ("steadytune_generated_tokens_per_second", "Tokens generated per second over the last 10 s",
                 s.tokens_per_second()),
                ("steadytune_queue_depth", "Sequences and classification jobs waiting for the batch",
                 self.engine.queue_depth),
                ("steadytune_sequences_running", "Sequences in the running batch", self.engine.running),
                ("steadytune_max_batch", "Most sequences one forward pass takes (--max-batch)", self.engine.max_batch)):
            yield GaugeMetricFamily(name, help_text, value=value)
        recent = GaugeMetricFamily("steadytune_request_latency_recent_seconds",
                                   "Latency percentiles of the last 1,000 successful /v1 generation and classify "
                                   "requests", labels=["quantile"])
        for q, value in self.metrics.recent_quantiles().items():
            recent.add_metric([str(q)], value)
        yield recent
