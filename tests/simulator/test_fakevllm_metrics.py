# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake vLLM's latency histograms, preemption counter and KV-cache gauge, against what it was told to do."""

from __future__ import annotations

import math
import re
import threading
from typing import Dict, Iterator, List, Tuple

import pytest
from gpusim_helpers import FakeServer, StreamResult, host_with_servers, wait_for

MODEL = "org/latency"
PACE = 200.0      # tokens/s per stream
TTFT_MS = 30.0
CHUNK = 4         # tokens per chunk, the first one included
OUTPUT = 64
MAX_MODEL_LEN = 4096
LABELS = 'engine="0",model_name="%s"' % MODEL


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeServer]:
    with host_with_servers(tmp_path_factory.mktemp("fakevllm-metrics"), 1) as servers:
        started = servers.start(gpus="0", model=MODEL, args=("--max-model-len", str(MAX_MODEL_LEN)), env={
            "GPUOPS_SIM_TOKENS_PER_S": str(PACE), "GPUOPS_SIM_TTFT_MS": str(TTFT_MS),
            "GPUOPS_SIM_TOKENS_PER_CHUNK": str(CHUNK), "GPUOPS_SIM_JITTER": "0", "GPUOPS_SIM_CONCURRENCY_SLOWDOWN": "0"})
        started.wait_ready()
        yield started


def histogram(samples: Dict[str, float], name: str) -> Tuple[List[Tuple[float, float]], float, float]:
    buckets = []
    for sample, value in samples.items():
        match = re.fullmatch(r'%s_bucket\{engine="0",le="([^"]+)",model_name="%s"\}' % (re.escape(name), re.escape(MODEL)), sample)
        if match:
            buckets.append((float(match.group(1)), value))
    return sorted(buckets), samples["%s_sum{%s}" % (name, LABELS)], samples["%s_count{%s}" % (name, LABELS)]


def test_histograms_and_gauges_are_typed_as_vllm_types_them(server: FakeServer) -> None:
    text = server.request("GET", "/metrics")[1].decode()
    for name, kind in (("vllm:time_to_first_token_seconds", "histogram"), ("vllm:e2e_request_latency_seconds", "histogram"),
                       ("vllm:num_preemptions_total", "counter"), ("vllm:kv_cache_usage_perc", "gauge")):
        assert "# TYPE %s %s\n" % (name, kind) in text and "# HELP %s " % name in text
    buckets, _total, count = histogram(server.metrics(), "vllm:time_to_first_token_seconds")
    assert buckets[0][0] == 0.001 and buckets[-1][0] == math.inf and len(buckets) == 23
    assert buckets[-1][1] == count
    assert [value for _bound, value in buckets] == sorted(value for _bound, value in buckets)  # cumulative


def test_latencies_follow_the_configured_pace_and_the_cache_fills_and_empties(server: FakeServer) -> None:
    before = server.metrics()
    last_sent = max((record["id"] for record in server.sent()), default=0)
    gauge = "vllm:kv_cache_usage_perc{%s}" % LABELS
    assert before[gauge] == 0.0
    prompt_words = 100
    results: List[StreamResult] = []

    def one() -> None:
        results.append(server.stream("/v1/completions", {"model": MODEL, "prompt": " ".join(["w"] * prompt_words),
                                                         "max_tokens": OUTPUT, "ignore_eos": True}))

    threads = [threading.Thread(target=one) for _index in range(4)]
    for thread in threads:
        thread.start()
    readings: List[float] = []

    def finished() -> bool:
        readings.append(server.metrics()[gauge])
        return not any(thread.is_alive() for thread in threads)
    assert wait_for(finished, timeout=30)
    assert len(results) == 4 and all(result.done for result in results)
    peak = max(readings)
    after = server.metrics()
    assert after[gauge] == 0.0  # every request gave its blocks back
    # 4 requests of 100 prompt + at most 64 generated tokens: at most 11 blocks of 16 each, of 8 x 4096 / 16 = 2048
    assert 4 * 7 / 2048 - 1e-9 <= peak <= 4 * 11 / 2048 + 1e-9, peak
    assert after["vllm:num_preemptions_total{%s}" % LABELS] == 0

    ttft_buckets, ttft_sum, ttft_count = histogram(after, "vllm:time_to_first_token_seconds")
    old_buckets, old_sum, old_count = histogram(before, "vllm:time_to_first_token_seconds")
    assert ttft_count - old_count == 4
    # the server saw token 0 at its due instant: exactly the configured TTFT after arrival (the chunk of 4 left
    # 3 token gaps later, which only the client sees)
    assert (ttft_sum - old_sum) / 4 == pytest.approx(TTFT_MS / 1000.0, abs=1e-6)
    assert dict(ttft_buckets)[0.04] - dict(old_buckets)[0.04] == 4 and dict(ttft_buckets)[0.02] == dict(old_buckets)[0.02]
    client_ttft = [result.times[0] - result.started for result in results]
    assert all(ttft >= (TTFT_MS + (CHUNK - 1) * 1000.0 / PACE) / 1000.0 for ttft in client_ttft)

    _e2e_buckets, e2e_sum, e2e_count = histogram(after, "vllm:e2e_request_latency_seconds")
    _old, old_e2e_sum, old_e2e_count = histogram(before, "vllm:e2e_request_latency_seconds")
    assert e2e_count - old_e2e_count == 4
    expected = TTFT_MS / 1000.0 + (OUTPUT - 1) / PACE  # the last token is due 63 gaps after the first
    # never before its due instant, and what /sim/sent recorded as each request's end (a loaded machine makes the
    # server's own writes late, never the metric wrong); late by more than 0.1 s would be a pacing fault
    e2e_mean = (e2e_sum - old_e2e_sum) / 4
    assert wait_for(lambda: len([r for r in server.sent(after=last_sent) if r["finished_ms"] is not None]) == 4, timeout=10)
    recorded = [record["finished_ms"] / 1000.0 for record in server.sent(after=last_sent)]
    assert e2e_mean == pytest.approx(sum(recorded) / 4, abs=1e-5), (e2e_mean, recorded)
    assert expected <= e2e_mean <= expected + 0.1
