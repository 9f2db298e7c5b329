# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One run's figures and their aggregate across repeats (_bench/metrics), on hand-computed cases; the chunk-aware decode
rate next to vllm bench serve's TPOT, on hand-built streams of known pace."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.metrics import aggregate, HEADLINE, headline, run_metrics
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.save import vllm_result


def approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-9)


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


def test_run_figures_follow_the_percentiles_asked_for():
    outcomes = []
    for index, ttft in enumerate((0.1, 0.2, 0.3, 0.4)):
        o = Outcome(index)
        o.success, o.ttft, o.latency, o.output_tokens, o.itl = True, ttft, ttft + 1.0, 11, [0.1] * 10
        outcomes.append(o)
    figures = run_metrics(outcomes, 2.0, (50.0, 99.9))
    assert figures["p50_ttft_ms"] == pytest.approx(250.0) and figures["p99_9_ttft_ms"] == pytest.approx(399.7)
    assert "p90_ttft_ms" not in figures and figures["p50_tpot_ms"] == pytest.approx(100.0)
    names = headline((50.0, 99.9))
    assert "p99_9_e2el_ms" in names and "p99_ttft_ms" not in names and names[0] == "decode_tok_s"
    saved = vllm_result(dict(figures, repeat=1), endpoint="completions", model="m", num_requests=4, request_rate=float("inf"),
                        concurrency=4, percentiles=(50.0, 99.9), goodput={"ttft_ms": 250.0})
    assert saved["p99.9_ttft_ms"] == figures["p99_9_ttft_ms"] and saved["p50_ttft_ms"] == figures["p50_ttft_ms"]
    assert saved["gpuops_fleet"]["goodput"] == {"ttft_ms": 250.0}
    json.dumps(saved)


GAP = 0.02  # seconds per token: 50 tokens/s


def stream(index: int, tokens: int, per_chunk: int, ttft0: float = 0.1) -> Outcome:
    """A request whose token i is due at ttft0 + i * GAP, sent in chunks of per_chunk (the first one included),
    each chunk when its last token is due."""
    outcome = Outcome(index)
    ends = list(range(per_chunk - 1, tokens, per_chunk))
    if ends[-1] != tokens - 1:
        ends.append(tokens - 1)
    times = [ttft0 + end * GAP for end in ends]
    outcome.success = True
    outcome.ttft = times[0]
    outcome.latency = times[-1]
    outcome.itl = [b - a for a, b in zip(times, times[1:])]
    outcome.output_tokens = tokens
    outcome.content_chunks = len(times)
    outcome.tokens_seen = tokens
    return outcome


def test_one_token_a_chunk_both_figures_agree():
    metrics = run_metrics([stream(i, 128, 1) for i in range(3)], 5.0)
    assert metrics["decode_tok_s"] == pytest.approx(50.0)
    assert metrics["decode_tok_s_chunk_aware"] == pytest.approx(50.0)
    assert metrics["tokens_per_chunk"] == 1.0


@pytest.mark.parametrize("per_chunk", [4, 8])
def test_several_tokens_a_chunk_tpot_reads_high_the_chunk_aware_rate_does_not(per_chunk):
    metrics = run_metrics([stream(i, 128, per_chunk) for i in range(3)], 5.0)
    # TPOT: (128 - per_chunk) gaps over 127 tokens
    assert metrics["decode_tok_s"] == pytest.approx(50.0 * 127 / (128 - per_chunk))
    assert metrics["decode_tok_s"] > 50.0 * 1.02
    assert metrics["decode_tok_s_chunk_aware"] == pytest.approx(50.0)
    assert metrics["tokens_per_chunk"] == per_chunk


def test_a_last_chunk_that_is_not_full():
    # 37 tokens in chunks of 4: nine of 4 and one of 1; the first is taken to hold 3.7 (the average), 33 gaps after it
    metrics = run_metrics([stream(0, 37, 4)], 1.0)
    assert metrics["decode_tok_s_chunk_aware"] == pytest.approx(50.0 * 33.3 / 33)
    assert metrics["decode_tok_s"] == pytest.approx(50.0 * 36 / 33)


def test_single_chunk_requests_have_no_chunk_aware_rate():
    metrics = run_metrics([stream(0, 4, 4)], 1.0)
    assert metrics["decode_tok_s_chunk_aware"] is None and metrics["tokens_per_chunk"] == 4.0


def test_aggregated_across_repeats():
    assert "decode_tok_s_chunk_aware" in HEADLINE and "decode_tok_s_chunk_aware" in headline((50,))
