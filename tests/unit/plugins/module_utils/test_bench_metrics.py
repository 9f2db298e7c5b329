# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark's arithmetic on hand-computed cases: statistics, one run's figures, repeats, arrivals, result file."""

from __future__ import annotations

import json
import math
import random

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.client import arrival_offsets
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.metrics import HEADLINE, aggregate, run_metrics
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.save import vllm_result, write_results
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import (
    mean, median, percentile, sample_std, spread, std, t_quantile_975,
)


def approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-9)


def test_percentile_like_numpy_linear():
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 90) == approx(3.7)   # rank 2.7: 3 + 0.7 * (4 - 3)
    assert percentile(values, 99) == approx(3.97)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert median(values) == approx(2.5)
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 50) == 0.0  # vllm bench serve's `values or 0`


def test_mean_and_standard_deviations():
    values = [1.0, 2.0, 3.0, 4.0]
    assert mean(values) == 2.5
    assert std(values) == approx(math.sqrt(1.25))          # population, as numpy.std
    assert sample_std(values) == approx(math.sqrt(5 / 3))  # ddof=1
    assert std([]) == 0.0 and mean([]) == 0.0 and sample_std([7.0]) == 0.0


def test_t_quantiles():
    assert t_quantile_975(1) == 12.706 and t_quantile_975(2) == 4.303 and t_quantile_975(30) == 2.042
    assert t_quantile_975(35) == 2.042   # between entries: the wider, lower one
    assert t_quantile_975(1000) == 1.960
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_spread_with_confidence_interval():
    s = spread([14.0, 10.0, 12.0])
    half = 4.303 * 2.0 / math.sqrt(3)  # sample std 2, t(2) = 4.303
    assert s["median"] == 12.0 and s["min"] == 10.0 and s["max"] == 14.0 and s["n"] == 3
    assert s["stdev"] == approx(2.0)
    assert s["ci95"] == [approx(12 - half), approx(12 + half)]


def test_spread_without_enough_repeats_has_no_interval():
    assert spread([1.0, 3.0])["ci95"] is None
    assert spread([1.0, 3.0])["median"] == 2.0


def outcome(index, ttft, latency, tokens, itl, prompt, approximate=False):
    o = Outcome(index)
    o.success, o.ttft, o.latency, o.output_tokens, o.itl, o.prompt_tokens = True, ttft, latency, tokens, itl, prompt
    o.approximate = approximate
    o.tokens_seen = tokens
    return o


def failed(index, reason, error="boom", seen=0):
    o = Outcome(index)
    o.reason, o.error, o.tokens_seen = reason, error, seen
    return o


def test_run_metrics_by_hand():
    outcomes = [
        outcome(0, 0.1, 1.1, 11, [0.1] * 10, 3),   # TPOT (1.1 - 0.1) / 10 = 100 ms
        outcome(1, 0.3, 2.3, 5, [0.5] * 4, 7),     # TPOT (2.3 - 0.3) / 4 = 500 ms
        failed(2, "timeout", "too slow", seen=2),
    ]
    m = run_metrics(outcomes, 4.0)
    assert (m["completed"], m["failed"], m["total_input_tokens"], m["total_output_tokens"]) == (2, 1, 10, 16)
    assert m["request_throughput"] == approx(0.5)
    assert m["output_throughput"] == approx(4.0)
    assert m["total_token_throughput"] == approx(6.5)
    assert m["mean_ttft_ms"] == approx(200) and m["median_ttft_ms"] == approx(200) and m["std_ttft_ms"] == approx(100)
    assert m["p90_ttft_ms"] == approx(280) and m["p99_ttft_ms"] == approx(298)
    assert m["mean_tpot_ms"] == approx(300) and m["median_tpot_ms"] == approx(300) and m["p90_tpot_ms"] == approx(460)
    assert m["decode_tok_s"] == approx(1000 / 300)
    # 14 gaps: ten of 100 ms, four of 500 ms
    assert m["mean_itl_ms"] == approx(3000 / 14) and m["median_itl_ms"] == approx(100) and m["p90_itl_ms"] == approx(500)
    assert m["mean_e2el_ms"] == approx(1700) and m["median_e2el_ms"] == approx(1700)
    assert m["failed_by_reason"] == {"timeout": 1}
    assert m["errors"] == [{"request": 2, "reason": "timeout", "error": "too slow"}]
    assert m["approximate_token_count"] is False
    assert m["client_tokens_seen"] == 18  # failed requests' tokens count for the server cross-check


def test_single_token_requests_have_no_tpot_and_no_decode_rate():
    m = run_metrics([outcome(0, 0.2, 0.2, 1, [], 4)], 1.0)
    assert m["completed"] == 1 and m["median_tpot_ms"] == 0.0 and m["decode_tok_s"] is None
    assert m["median_ttft_ms"] == approx(200)


def test_all_failed_is_not_a_silent_zero():
    m = run_metrics([failed(0, "http_error"), failed(1, "connection_dropped"), failed(2, "http_error")], 2.0)
    assert m["completed"] == 0 and m["failed"] == 3 and m["decode_tok_s"] is None
    assert m["failed_by_reason"] == {"http_error": 2, "connection_dropped": 1}


def test_approximate_token_count_is_flagged():
    m = run_metrics([outcome(0, 0.1, 0.5, 5, [0.1] * 4, 2, approximate=True), outcome(1, 0.1, 0.5, 5, [0.1] * 4, 2)], 1.0)
    assert m["approximate_token_count"] is True and m["approximate_requests"] == 1


def test_errors_list_is_capped_but_counts_are_not():
    m = run_metrics([failed(i, "timeout") for i in range(50)], 1.0)
    assert m["failed_by_reason"] == {"timeout": 50} and len(m["errors"]) == 20


def test_aggregate_takes_median_across_repeats():
    runs = [run_metrics([outcome(0, 0.1, 0.1 + 0.01 * 99 * k, 100, [0.01 * k] * 99, 8)], 1.0) for k in (1, 2, 4)]
    agg = aggregate(runs)
    assert set(agg) == set(HEADLINE)
    assert agg["decode_tok_s"]["median"] == approx(50.0)  # TPOTs 10, 20, 40 ms -> 100, 50, 25 tok/s
    assert agg["decode_tok_s"]["min"] == approx(25.0) and agg["decode_tok_s"]["max"] == approx(100.0)
    assert agg["decode_tok_s"]["ci95"] is not None and agg["decode_tok_s"]["n"] == 3
    assert agg["median_tpot_ms"]["median"] == approx(20.0)


def test_aggregate_of_a_figure_no_repeat_has_is_null_not_zero():
    runs = [run_metrics([outcome(0, 0.2, 0.2, 1, [], 4)], 1.0) for _repeat in range(3)]
    agg = aggregate(runs)
    assert agg["decode_tok_s"] is None and agg["completed"]["median"] == 1


def test_arrivals():
    assert arrival_offsets(3, float("inf"), random.Random(1)) == [0.0, 0.0, 0.0]
    offsets = arrival_offsets(200, 10.0, random.Random(1))
    assert offsets == sorted(offsets) and offsets[-1] == approx(20.0)   # scaled to count / rate, as vllm bench serve
    assert offsets != arrival_offsets(200, 10.0, random.Random(2))
    gaps = [b - a for a, b in zip([0.0] + offsets, offsets)]
    assert 0.07 < mean(gaps) < 0.13 and max(gaps) > 2 * min(gaps)     # exponential, not even spacing


def test_vllm_result_shape_and_file(tmp_path):
    run = run_metrics([outcome(0, 0.1, 1.1, 11, [0.1] * 10, 3)], 2.0)
    run.update(repeat=1, server_generation_tokens=11, client_generation_tokens=11)
    saved = vllm_result(run, endpoint="chat", model="m1", num_requests=1, request_rate=float("inf"), concurrency=4)
    for key in ("date", "backend", "model_id", "num_prompts", "request_rate", "max_concurrency", "duration", "completed",
                "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
                "total_token_throughput", "mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "std_e2el_ms"):
        assert key in saved
    assert saved["backend"] == "openai-chat" and saved["request_rate"] == "inf" and saved["max_concurrency"] == 4
    assert saved["median_tpot_ms"] == approx(100.0) and saved["gpuops_fleet"]["decode_tok_s"] == approx(10.0)
    one = tmp_path / "one.json"
    write_results(str(one), [saved])
    assert json.loads(one.read_text()) == json.loads(json.dumps(saved))
    lines = tmp_path / "lines.json"
    write_results(str(lines), [saved, dict(saved, completed=0)])
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    assert [row["completed"] for row in rows] == [1, 0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lines.json", "one.json"]  # no temporary file left
