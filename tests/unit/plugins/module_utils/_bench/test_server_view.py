# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server's view of a phase: histogram deltas and quantiles, counter resets, the phase."""

from __future__ import annotations

import math

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench import server_view as sv


def approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-9)


def exposition(ttft_buckets, ttft_sum, e2e_count, preemptions, kv, model="org/m", kv_name="vllm:kv_cache_usage_perc"):
    """A vLLM-like exposition: one engine of the model, another model beside it that must not count."""
    lines = ["# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
             "# TYPE vllm:time_to_first_token_seconds histogram"]
    for model_name, factor in ((model, 1), ("other", 100)):
        for bound, count in ttft_buckets:
            lines.append('vllm:time_to_first_token_seconds_bucket{engine="0",le="%s",model_name="%s"} %r'
                         % (bound, model_name, float(count * factor)))
        lines.append('vllm:time_to_first_token_seconds_count{engine="0",model_name="%s"} %r'
                     % (model_name, float(ttft_buckets[-1][1] * factor)))
        lines.append('vllm:time_to_first_token_seconds_sum{engine="0",model_name="%s"} %r' % (model_name, ttft_sum * factor))
        lines.append('vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="%s"} %r'
                     % (model_name, float(e2e_count * factor)))
        lines.append('vllm:e2e_request_latency_seconds_count{engine="0",model_name="%s"} %r' % (model_name, float(e2e_count * factor)))
        lines.append('vllm:e2e_request_latency_seconds_sum{engine="0",model_name="%s"} %r' % (model_name, 2.0 * e2e_count * factor))
        lines.append('vllm:num_preemptions_total{engine="0",model_name="%s"} %r' % (model_name, float(preemptions * factor)))
        lines.append('%s{engine="0",model_name="%s"} %r' % (kv_name, model_name, kv * factor))
    return "\n".join(lines) + "\n"


def test_histogram_of_one_model_summed_over_engines():
    text = "\n".join([
        'h_bucket{engine="0",le="0.1",model_name="m"} 1', 'h_bucket{engine="0",le="+Inf",model_name="m"} 2',
        'h_bucket{engine="1",le="0.1",model_name="m"} 3', 'h_bucket{engine="1",le="+Inf",model_name="m"} 3',
        'h_bucket{engine="0",le="0.1",model_name="n"} 50', 'h_bucket{engine="0",le="+Inf",model_name="n"} 50',
        'h_count{engine="0",model_name="m"} 2', 'h_count{engine="1",model_name="m"} 3', 'h_count{engine="0",model_name="n"} 50',
        'h_sum{engine="0",model_name="m"} 0.5', 'h_sum{engine="1",model_name="m"} 0.25', 'h_sum{engine="0",model_name="n"} 9',
    ])
    hist = sv.histogram(sv.parse(text), "h", "m")
    assert hist == sv.Histogram(((0.1, 4.0), (math.inf, 5.0)), 0.75, 5.0)
    assert sv.histogram(sv.parse(text), "absent", "m") is None


def test_quantile_like_histogram_quantile():
    hist = sv.Histogram(((0.01, 0.0), (0.02, 10.0), (0.04, 30.0), (math.inf, 40.0)), 1.0, 40.0)
    assert sv.quantile(hist, 25) == approx(0.02)          # rank 10: the top of the second bucket
    assert sv.quantile(hist, 50) == approx(0.03)          # rank 20: half way through (0.02, 0.04]
    assert sv.quantile(hist, 99) == approx(0.04)          # in the +Inf bucket: the highest finite bound
    first = sv.Histogram(((0.1, 4.0), (math.inf, 4.0)), 0.2, 4.0)
    assert sv.quantile(first, 50) == approx(0.05)         # the first bucket starts at 0
    assert sv.quantile(sv.Histogram(((math.inf, 0.0),), 0.0, 0.0), 50) is None


def test_phase_deltas_against_hand_counts():
    before = sv.snapshot(exposition([("0.02", 1), ("0.04", 1), ("+Inf", 1)], 0.01, 1, 2, 0.1), "org/m")
    after = sv.snapshot(exposition([("0.02", 3), ("0.04", 9), ("+Inf", 11)], 0.31, 11, 5, 0.0), "org/m")
    change, reset = sv.histogram_delta(before.histograms["ttft"], after.histograms["ttft"])
    assert not reset
    assert change == sv.Histogram(((0.02, 2.0), (0.04, 8.0), (math.inf, 10.0)), pytest.approx(0.3), 10.0)
    figures = sv.histogram_figures(change, (50, 99.9))
    assert figures["count"] == 10 and figures["mean_ms"] == approx(30.0)
    assert figures["p50_ms"] == approx(20 + 20 * (5 - 2) / 6)  # rank 5 in (0.02, 0.04], which holds 6
    assert figures["p99_9_ms"] == approx(40.0)
    assert sv.counter_delta(before.preemptions, after.preemptions) == (3.0, False)
    assert before.kv_cache == approx(0.1) and after.kv_cache == 0.0


def test_counter_reset_counts_from_zero():
    assert sv.counter_delta(7.0, 2.0) == (2.0, True)
    assert sv.counter_delta(None, 2.0) == (2.0, False)
    assert sv.counter_delta(2.0, None) == (None, False)
    old = sv.Histogram(((0.1, 5.0), (math.inf, 9.0)), 3.0, 9.0)
    new = sv.Histogram(((0.1, 1.0), (math.inf, 2.0)), 0.5, 2.0)
    assert sv.histogram_delta(old, new) == (new, True)


def test_older_kv_cache_name_is_read():
    snap = sv.snapshot(exposition([("+Inf", 0)], 0.0, 0, 0, 0.25, kv_name="vllm:gpu_cache_usage_perc"), "org/m")
    assert snap.kv_cache == approx(0.25)
    assert sv.kv_cache_usage(exposition([("+Inf", 0)], 0.0, 0, 0, 0.5), "org/m") == approx(0.5)


def test_phase_samples_the_peak_and_reports_the_ttft_gap():
    readings = [
        exposition([("0.05", 0), ("+Inf", 0)], 0.0, 0, 0, 0.0),
        exposition([("0.05", 1), ("+Inf", 1)], 0.04, 0, 0, 0.6),   # during the phase
        exposition([("0.05", 2), ("+Inf", 2)], 0.08, 2, 0, 0.0),   # after it: no request holds the cache
    ]
    calls = []

    def fetch():
        calls.append(1)
        return readings[min(len(calls) - 1, len(readings) - 1)]

    phase = sv.Phase(fetch, "org/m", (50,), interval=3600)  # no background sample: the test drives the readings
    phase._note_kv(sv.kv_cache_usage(fetch(), "org/m"))     # pylint: disable=protected-access
    figures = phase.finish(completed=2, client_mean_ttft_ms=45.0)
    assert figures["ttft"]["count"] == 2 and figures["ttft"]["mean_ms"] == approx(40.0)
    assert figures["ttft_gap_ms"] == approx(5.0)
    assert figures["e2el"]["count"] == 2 and figures["e2el"]["mean_ms"] == approx(2000.0)
    assert figures["preemptions"] == 0 and figures["counter_reset"] is False
    assert figures["kv_cache_usage_peak"] == approx(0.6) and figures["kv_cache_samples"] == 3


def test_phase_without_metrics_is_none():
    assert sv.Phase(lambda: None, "m", (50,)).finish() is None
    assert sv.Phase(lambda: "python_info 1\n", "m", (50,)).finish() is None


def test_prefix_cache_counters_of_a_phase():
    texts = iter([
        'vllm:prefix_cache_queries_total{engine="0",model_name="org/m"} 100.0\n'
        'vllm:prefix_cache_hits_total{engine="0",model_name="org/m"} 10.0\n'
        'vllm:prefix_cache_queries_total{engine="0",model_name="other"} 999.0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="org/m"} 0.1\n',
        'vllm:prefix_cache_queries_total{engine="0",model_name="org/m"} 500.0\n'
        'vllm:prefix_cache_hits_total{engine="0",model_name="org/m"} 310.0\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="org/m"} 0.1\n',
    ])
    phase = sv.Phase(lambda: next(texts), "org/m", (50,), interval=3600)
    phase.finish()
    assert phase.prefix_cache == {"queries": 400, "hits": 300, "hit_rate": 0.75}
    older = sv.snapshot('vllm:gpu_prefix_cache_queries_total{model_name="m"} 8\nvllm:gpu_prefix_cache_hits_total{model_name="m"} 2\n', "m")
    assert sv.prefix_cache(older._replace(prefix_queries=0.0, prefix_hits=0.0), older) == {"queries": 8, "hits": 2, "hit_rate": 0.25}
    none = sv.snapshot("vllm:kv_cache_usage_perc 0.1\n")
    assert sv.prefix_cache(none, none) is None
    idle = sv.snapshot('vllm:prefix_cache_queries_total 5\nvllm:prefix_cache_hits_total 1\n')
    assert sv.prefix_cache(idle, idle) == {"queries": 0, "hits": 0, "hit_rate": None}
