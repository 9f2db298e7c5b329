# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The server's own view of a phase: vLLM's /metrics read before and after it, and its KV-cache gauge during it.

- The Prometheus text is parsed by _http/prometheus.py.
- Snapshot: one model's TTFT and E2E histograms, its preemption counter and its KV-cache gauge (summed over engines).
- delta(): what a phase added; a counter that went down means the server restarted (counted from zero, as
  Prometheus' increase() does) and the phase says so (`counter_reset`).
- quantile(): a percentile estimated from cumulative buckets, as Prometheus' histogram_quantile() does.
- Phase: a thread samples the KV-cache gauge while the client runs, so the peak of the phase is seen.

The server measures TTFT from the moment its frontend received the request to its first token; the client from
sending the request to the first chunk it read. Their difference (client minus server, means) is time the server
never saw: the network, queueing in the client or a proxy, and tokens held back to be sent several in one chunk.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import math
import threading
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import percentile_label
from ansible_collections.gpuops.fleet.plugins.module_utils._http.prometheus import Families, family_total, for_model, parse

TTFT = "vllm:time_to_first_token_seconds"
E2EL = "vllm:e2e_request_latency_seconds"
PREEMPTIONS = "vllm:num_preemptions_total"
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # the name since vLLM 0.10, the older one
# prefix-cache counters (in tokens): the V1 engine's names, then the older ones
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
HISTOGRAMS = {"ttft": TTFT, "e2el": E2EL}
DEFAULT_PERCENTILES = (50.0, 90.0, 99.0)
SAMPLE_INTERVAL_S = 0.25
SETTLE_READS = 5
SETTLE_S = 0.2

Fetch = t.Callable[[], t.Optional[str]]


class Histogram(t.NamedTuple):
    """Cumulative buckets (upper bound, count), the last +Inf; sum and count of the observations."""
    buckets: t.Tuple[t.Tuple[float, float], ...]
    total: float
    count: float


def histogram(families: Families, name: str, model: t.Optional[str] = None) -> t.Optional[Histogram]:
    """The model's histogram, summed over its other labels (engines); None when the server offers none."""
    if name + "_count" not in families:
        return None
    by_bound: t.Dict[float, float] = {}
    for labels, value in for_model(families.get(name + "_bucket", ()), model):
        try:
            bound = float(labels.get("le", ""))
        except ValueError:
            continue
        by_bound[bound] = by_bound.get(bound, 0.0) + value
    total = sum(value for _labels, value in for_model(families.get(name + "_sum", ()), model))
    count = sum(value for _labels, value in for_model(families[name + "_count"], model))
    if math.inf not in by_bound:
        by_bound[math.inf] = count
    return Histogram(tuple(sorted(by_bound.items())), total, count)


class Snapshot(t.NamedTuple):
    histograms: t.Dict[str, t.Optional[Histogram]]
    preemptions: t.Optional[float]
    kv_cache: t.Optional[float]
    prefix_queries: t.Optional[float] = None
    prefix_hits: t.Optional[float] = None


WANTED = tuple(HISTOGRAMS.values()) + (PREEMPTIONS,) + KV_CACHE + PREFIX_QUERIES + PREFIX_HITS


def snapshot(text: str, model: t.Optional[str] = None) -> Snapshot:
    families = parse(text, WANTED)
    return Snapshot({key: histogram(families, name, model) for key, name in HISTOGRAMS.items()},
                    family_total(families, PREEMPTIONS, model), family_total(families, KV_CACHE, model),
                    family_total(families, PREFIX_QUERIES, model), family_total(families, PREFIX_HITS, model))


def prefix_cache(before: Snapshot, after: Snapshot) -> t.Optional[t.Dict[str, t.Any]]:
    """The prefix-cache lookups of a phase, in tokens: queries, hits and hits / queries (None without queries);
    None when the server does not count them."""
    queries, _reset = counter_delta(before.prefix_queries, after.prefix_queries)
    hits, _reset = counter_delta(before.prefix_hits, after.prefix_hits)
    if queries is None or hits is None:
        return None
    return prefix_figures(_count(queries), _count(hits))


def prefix_figures(queries: t.Union[int, float], hits: t.Union[int, float]) -> t.Dict[str, t.Any]:
    """queries, hits and hit_rate (hits / queries; None without queries)."""
    return {"queries": queries, "hits": hits, "hit_rate": hits / queries if queries > 0 else None}


def _count(value: float) -> t.Union[int, float]:
    return int(value) if value == int(value) else value


def kv_cache_usage(text: str, model: t.Optional[str] = None) -> t.Optional[float]:
    return family_total(parse(text, KV_CACHE), KV_CACHE, model)


def counter_delta(before: t.Optional[float], after: t.Optional[float]) -> t.Tuple[t.Optional[float], bool]:
    """(increase, reset): a counter lower than before restarted from zero, so all of it is the increase."""
    if after is None:
        return None, False
    if before is None:
        return after, False
    if after < before:
        return after, True
    return after - before, False


def histogram_delta(before: t.Optional[Histogram], after: t.Optional[Histogram]) -> t.Tuple[t.Optional[Histogram], bool]:
    """What was observed between two readings (bucket by bucket); a reset when the count or any bucket went down."""
    if after is None:
        return None, False
    if before is None:
        return after, False
    old = dict(before.buckets)
    reset = after.count < before.count or after.total < before.total or any(
        count < old.get(bound, 0.0) for bound, count in after.buckets)
    if reset:
        return after, True
    return Histogram(tuple((bound, count - old.get(bound, 0.0)) for bound, count in after.buckets),
                     after.total - before.total, after.count - before.count), False


def quantile(hist: Histogram, p: float) -> t.Optional[float]:
    """The p-th percentile (0..100) from cumulative buckets, linear within the bucket that holds it, as Prometheus'
    histogram_quantile(); in the +Inf bucket, the highest finite bound. None without observations."""
    if hist.count <= 0 or not hist.buckets:
        return None
    rank = p / 100.0 * hist.count
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in hist.buckets:
        if count >= rank and count > lower_count:
            if math.isinf(bound):
                return lower_bound
            if bound <= 0:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = (bound if not math.isinf(bound) else lower_bound), count
    return lower_bound


def histogram_figures(hist: t.Optional[Histogram], percentiles: t.Sequence[float]) -> t.Optional[t.Dict[str, t.Any]]:
    """count, sum_s, mean_ms and pNN_ms (bucket estimates; p99_9_ms for 99.9, as the client's
    figures name it) of a phase's histogram."""
    if hist is None:
        return None
    count = int(hist.count) if hist.count == int(hist.count) else hist.count
    figures: t.Dict[str, t.Any] = {"count": count, "sum_s": hist.total,
                                   "mean_ms": hist.total / hist.count * 1000.0 if hist.count > 0 else None}
    for p in percentiles:
        value = quantile(hist, p)
        figures["%s_ms" % percentile_label(p)] = value * 1000.0 if value is not None else None
    return figures


class Phase:
    """One phase seen from the server: a reading before, the KV-cache gauge sampled during, a reading after."""

    def __init__(self, fetch: Fetch, model: t.Optional[str], percentiles: t.Sequence[float],
                 interval: float = SAMPLE_INTERVAL_S) -> None:
        self.fetch = fetch
        self.model = model
        self.percentiles = tuple(percentiles)
        self.interval = interval
        text = fetch()
        self.before = snapshot(text, model) if text is not None else None
        self.kv_peak: t.Optional[float] = None
        self.kv_samples = 0
        self.prefix_cache: t.Optional[t.Dict[str, t.Any]] = None  # set by finish()
        self._stop = threading.Event()
        self._thread: t.Optional[threading.Thread] = None
        if self.before is not None and self.before.kv_cache is not None:
            self._note_kv(self.before.kv_cache)
            self._thread = threading.Thread(target=self._sample, name="vllm_benchmark-kv-sampler", daemon=True)
            self._thread.start()

    def _note_kv(self, value: t.Optional[float]) -> None:
        if value is not None and not math.isnan(value):
            self.kv_samples += 1
            self.kv_peak = value if self.kv_peak is None else max(self.kv_peak, value)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            text = self.fetch()
            if text is not None:
                self._note_kv(kv_cache_usage(text, self.model))

    def finish(self, completed: int = 0, client_mean_ttft_ms: t.Optional[float] = None) -> t.Optional[t.Dict[str, t.Any]]:
        """The phase's server figures; None when the server offers none of these metrics. `completed` (the
        requests the client saw finish) lets the last reading wait a moment for a histogram that lags."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.before is None:
            return None
        after = self._settled(completed)
        if after is None:
            return None
        self._note_kv(after.kv_cache)
        self.prefix_cache = prefix_cache(self.before, after)
        reset = False
        figures: t.Dict[str, t.Any] = {}
        for key in HISTOGRAMS:
            change, was_reset = histogram_delta(self.before.histograms[key], after.histograms[key])
            reset = reset or was_reset
            figures[key] = histogram_figures(change, self.percentiles)
        preemptions, was_reset = counter_delta(self.before.preemptions, after.preemptions)
        figures["preemptions"] = int(preemptions) if preemptions is not None else None
        figures["kv_cache_usage_peak"] = self.kv_peak
        figures["kv_cache_samples"] = self.kv_samples
        figures["counter_reset"] = reset or was_reset
        server_ttft = figures["ttft"]["mean_ms"] if figures["ttft"] else None
        figures["ttft_gap_ms"] = (client_mean_ttft_ms - server_ttft
                                  if client_mean_ttft_ms is not None and server_ttft is not None else None)
        if all(figures[key] is None for key in HISTOGRAMS) and preemptions is None and self.kv_peak is None:
            return None
        return figures

    def _settled(self, completed: int) -> t.Optional[Snapshot]:
        """The reading after the phase, read again (briefly) while the E2E count lags the completed requests."""
        text = self.fetch()
        after = snapshot(text, self.model) if text is not None else None
        for _read in range(SETTLE_READS):
            if after is None or not completed or self._seen(after) >= completed:
                break
            time.sleep(SETTLE_S)
            text = self.fetch()
            if text is None:
                break
            after = snapshot(text, self.model)
        return after

    def _seen(self, after: Snapshot) -> float:
        change, _reset = histogram_delta(self.before.histograms["e2el"] if self.before else None, after.histograms["e2el"])
        return change.count if change is not None else math.inf
