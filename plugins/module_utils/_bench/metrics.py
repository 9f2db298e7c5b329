# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A run's figures from its requests' outcomes, with the names and definitions of `vllm bench serve`.

- TTFT: from sending the request to the first chunk that carries generated content.
- E2EL: from sending the request to its last content chunk.
- TPOT of one request: (E2EL - TTFT) / (output tokens - 1), for requests of more than one output token.
- ITL: every gap between two consecutive content chunks of a request (a chunk may carry several tokens).
- decode_tok_s: 1000 / median TPOT, the decode rate of one stream.
- decode_tok_s_chunk_aware: the decode rate once the first chunk is out: per request (output tokens - tokens of the
  first chunk) / (E2EL - TTFT), 1000 / the median of its reciprocal. TPOT counts the first chunk's tokens but not the
  time they took, so when chunks carry several tokens (vLLM's stream interval, speculative decoding, the first chunk
  included) it reads the rate too high by (tokens - 1) / (tokens - first chunk's). The stream does not say how many
  tokens a chunk holds, so the first chunk is taken to hold the request's average (output tokens / content chunks):
  exact for evenly filled chunks; with one token a chunk the two figures agree; a first chunk that holds fewer than
  the average (one token alone, then larger chunks) makes this figure read low, and TPOT right.
- tokens_per_chunk: output tokens / content chunks over the run.
Throughputs divide by the run's duration (first arrival to last answer). Failed requests count in `failed`
with their reason, and in no time or token figure.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import REASONS, Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import mean, percentile, percentile_label, spread, std

PERCENTILES = (90, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2el")
MAX_ERRORS_LISTED = 20

# The figures aggregated across repeats (metrics.<name>.median ...), in the order they are shown.
HEADLINE = (
    "decode_tok_s", "decode_tok_s_chunk_aware", "tokens_per_chunk", "completed", "failed", "duration", "request_throughput", "output_throughput",
    "total_token_throughput", "total_input_tokens", "total_output_tokens",
) + tuple("%s_%s_ms" % (stat, name) for name in LATENCIES
          for stat in ("mean", "median", "std") + tuple("p%d" % p for p in PERCENTILES))


def latency_stats(name: str, values_s: t.Sequence[float], percentiles: t.Sequence[float] = PERCENTILES) -> t.Dict[str, float]:
    """mean/median/std/pNN of a list of seconds, in milliseconds, named like vllm bench serve's result keys
    (p99.9 is p99_9: see stats.percentile_label)."""
    ordered = sorted(values_s)
    stats = {
        "mean_%s_ms" % name: mean(ordered) * 1000,
        "median_%s_ms" % name: percentile(ordered, 50, presorted=True) * 1000,
        "std_%s_ms" % name: std(ordered) * 1000,
    }
    for p in percentiles:
        stats["%s_%s_ms" % (percentile_label(p), name)] = percentile(ordered, p, presorted=True) * 1000
    return stats


def run_metrics(outcomes: t.Sequence[Outcome], duration: float, percentiles: t.Sequence[float] = PERCENTILES) -> t.Dict[str, t.Any]:
    """The figures of one run."""
    ttfts: t.List[float] = []
    tpots: t.List[float] = []
    itls: t.List[float] = []
    e2els: t.List[float] = []
    after_first: t.List[float] = []  # seconds per token after the first chunk
    chunks = 0
    total_input = 0
    total_output = 0
    approximate = 0
    by_reason = {reason: 0 for reason in REASONS}
    errors = []
    for outcome in outcomes:
        if not outcome.success:
            by_reason[outcome.reason] = by_reason.get(outcome.reason, 0) + 1
            if len(errors) < MAX_ERRORS_LISTED:
                errors.append({"request": outcome.index, "reason": outcome.reason, "error": outcome.error})
            continue
        output_len = outcome.output_tokens
        total_output += output_len
        total_input += outcome.prompt_tokens or 0
        approximate += outcome.approximate
        ttfts.append(outcome.ttft)
        e2els.append(outcome.latency)
        itls.extend(outcome.itl)
        if output_len > 1:
            tpots.append((outcome.latency - outcome.ttft) / (output_len - 1))
        chunks += outcome.content_chunks
        rest = output_len - first_chunk_tokens(outcome)
        if outcome.content_chunks > 1 and rest > 0:
            after_first.append((outcome.latency - outcome.ttft) / rest)
    completed = len(ttfts)
    duration = duration if duration > 0 else float("nan")
    metrics: t.Dict[str, t.Any] = {
        "completed": completed,
        "failed": len(outcomes) - completed,
        "duration": duration,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": completed / duration,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
    }
    metrics.update(latency_stats("ttft", ttfts, percentiles))
    metrics.update(latency_stats("tpot", tpots, percentiles))
    metrics.update(latency_stats("itl", itls, percentiles))
    metrics.update(latency_stats("e2el", e2els, percentiles))
    median_tpot = metrics["median_tpot_ms"]
    metrics["decode_tok_s"] = 1000.0 / median_tpot if median_tpot > 0 else None
    median_after = percentile(sorted(after_first), 50, presorted=True)
    metrics["decode_tok_s_chunk_aware"] = 1.0 / median_after if median_after > 0 else None
    metrics["tokens_per_chunk"] = total_output / chunks if chunks else None
    metrics["failed_by_reason"] = {reason: count for reason, count in by_reason.items() if count}
    metrics["errors"] = errors
    metrics["approximate_token_count"] = approximate > 0
    metrics["approximate_requests"] = approximate
    metrics["client_tokens_seen"] = sum(outcome.tokens_seen for outcome in outcomes)
    return metrics


def first_chunk_tokens(outcome: Outcome) -> float:
    """How many tokens the request's first content chunk is taken to carry: the request's average per chunk (the
    stream does not say how many each chunk holds)."""
    return outcome.output_tokens / outcome.content_chunks if outcome.content_chunks else 1.0


def headline(percentiles: t.Sequence[float] = PERCENTILES) -> t.Tuple[str, ...]:
    """HEADLINE with the latency percentiles asked for instead of p90 and p99."""
    return HEADLINE[:HEADLINE.index("mean_ttft_ms")] + tuple(
        "%s_%s_ms" % (stat, name) for name in LATENCIES
        for stat in ("mean", "median", "std") + tuple(percentile_label(p) for p in percentiles))


def aggregate(runs: t.Sequence[t.Dict[str, t.Any]], names: t.Sequence[str] = HEADLINE) -> t.Dict[str, t.Optional[t.Dict[str, t.Any]]]:
    """Each headline figure across the repeats: median, min, max, mean, stdev, n and (n >= 3) ci95; None for a figure
    no repeat has (decode_tok_s when no request generated two tokens), never a zero."""
    result: t.Dict[str, t.Optional[t.Dict[str, t.Any]]] = {}
    for name in names:
        values = [run[name] for run in runs if isinstance(run.get(name), (int, float))]
        result[name] = spread(values) if values else None
    return result
