# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`GET /metrics`: vLLM's request, token, latency and KV-cache metrics in Prometheus text format, counted exactly.

Names, types, labels and histogram buckets as vLLM's V1 engine writes them (vllm/v1/metrics/loggers.py):
- vllm:time_to_first_token_seconds: from the request's arrival to its first token, observed when that token
  leaves (a first chunk of k tokens holds it back: the server saw it at its due instant, the client later);
- vllm:e2e_request_latency_seconds: from arrival to the last token, for every request that finished;
- vllm:num_preemptions_total: 0 (the simulated scheduler never preempts);
- vllm:kv_cache_usage_perc: the share (0 to 1) of KV-cache blocks (--block-size tokens each) that running requests
  hold (prompt and generated tokens), out of the KV cache's blocks (ServerArgs.num_gpu_blocks);
- vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total: prompt tokens looked up in the prefix cache and
  tokens found there (counters declared as vllm:prefix_cache_queries and vllm:prefix_cache_hits, to which
  prometheus_client adds _total); both stay 0 with --no-enable-prefix-caching, as vLLM records no lookups then.
"""

from __future__ import annotations

import bisect
import math
import threading
from typing import Dict, List, Sequence, Tuple

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
FINISH_REASONS = ("stop", "length")
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class Histogram:
    """Observations in cumulative buckets, as prometheus_client keeps them (the caller holds the lock)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def lines(self, name: str, engine: str, model: str) -> List[str]:
        rows, cumulative = [], 0
        for bound, count in zip(self.bounds + (math.inf,), self.counts):
            cumulative += count
            rows.append(f'{name}_bucket{{{engine},le="{_number(bound)}",{model}}} {float(cumulative)!r}')
        rows.append(f"{name}_count{{{engine},{model}}} {float(cumulative)!r}")
        rows.append(f"{name}_sum{{{engine},{model}}} {self.total!r}")
        return rows


class Metrics:  # pylint: disable=too-many-instance-attributes  # one field per metric
    """Thread-safe counters. A request is running from its admission until just before its last byte."""

    def __init__(self, model_name: str, kv_blocks_total: int) -> None:
        self._lock = threading.Lock()
        self._engine = 'engine="0"'
        self._model = f'model_name="{_label(model_name)}"'
        self._labels = f"{self._engine},{self._model}"
        self.running = 0
        self.waiting = 0  # the simulated scheduler admits every request at once
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0  # nor does it ever preempt one
        self.success: Dict[str, int] = {reason: 0 for reason in FINISH_REASONS}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.kv_blocks_total = kv_blocks_total
        self.kv_blocks_used = 0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    def admit(self, prompt_tokens: int) -> None:
        with self._lock:
            self.running += 1
            self.prompt_tokens += prompt_tokens

    def prefix_cache_lookup(self, queried_tokens: int, hit_tokens: int) -> None:
        with self._lock:
            self.prefix_cache_queries += queried_tokens
            self.prefix_cache_hits += hit_tokens

    def generated(self, tokens: int) -> None:
        with self._lock:
            self.generation_tokens += tokens

    def hold(self, blocks: int) -> None:
        """A running request's KV cache grew (positive) or was freed (negative) by this many blocks."""
        with self._lock:
            self.kv_blocks_used += blocks

    def first_token(self, seconds: float) -> None:
        """A request's first token, `seconds` after its arrival."""
        with self._lock:
            self.ttft.observe(seconds)

    def finish(self, finish_reason: str = "", e2e_s: float = -1.0) -> None:
        """The request is done (finish_reason "" when it failed or was cut; e2e_s from arrival to its last token,
        observed for a request that finished)."""
        with self._lock:
            self.running -= 1
            if finish_reason in self.success:
                self.success[finish_reason] += 1
                if e2e_s >= 0:
                    self.e2e.observe(e2e_s)

    def running_now(self) -> int:
        return self.running

    def render(self) -> str:
        labels = self._labels
        with self._lock:
            rows: List[Tuple[str, str, str, List[Tuple[str, float]]]] = [
                ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                 [(labels, self.running)]),
                ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                 [(labels, self.waiting)]),
                ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
                 [(labels, min(1.0, self.kv_blocks_used / self.kv_blocks_total))]),
                ("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
                 [(labels, self.preemptions)]),
                ("vllm:prefix_cache_queries_total", "counter",
                 "Prefix cache queries, in terms of number of queried tokens.", [(labels, self.prefix_cache_queries)]),
                ("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.",
                 [(labels, self.prefix_cache_hits)]),
                ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
                 [(labels, self.prompt_tokens)]),
                ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
                 [(labels, self.generation_tokens)]),
                ("vllm:request_success_total", "counter", "Count of successfully processed requests.",
                 [(f'{self._engine},finished_reason="{reason}",{self._model}', count)
                  for reason, count in self.success.items()]),
            ]
            histograms = [
                ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", self.ttft),
                ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", self.e2e),
            ]
            lines: List[str] = []
            for name, kind, help_text, samples in rows:
                lines.append(f"# HELP {name} {help_text}")
                lines.append(f"# TYPE {name} {kind}")
                lines.extend(f"{name}{{{sample_labels}}} {float(value)!r}" for sample_labels, value in samples)
            for name, help_text, histogram in histograms:
                lines.append(f"# HELP {name} {help_text}")
                lines.append(f"# TYPE {name} histogram")
                lines.extend(histogram.lines(name, self._engine, self._model))
        return "\n".join(lines) + "\n"
