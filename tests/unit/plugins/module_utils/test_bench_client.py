# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The streaming client and the whole benchmark against a scripted server on a real socket."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.client import Client
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Target
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.metrics import run_metrics
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import request_bodies
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.run import Benchmark, BenchmarkFailed
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.server import Server, ServerError
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import build_spec
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.bench_sse_server import ScriptedServer, free_port


def run_batch(server, endpoint="completions", count=4, output_len=8, concurrency=2, timeout=10.0):
    target = Server(server.url).target(endpoint)
    bodies = request_bodies(endpoint, "tiny-model", count, 5, output_len, True, 0, "t")
    outcomes, duration = Client(target, endpoint, timeout).run(bodies, concurrency, [0.0] * count)
    return outcomes, run_metrics(outcomes, duration)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("per_chunk", [1, 4])
def test_exact_tokens_from_usage(endpoint, per_chunk):
    with ScriptedServer(tokens_per_chunk=per_chunk) as server:
        outcomes, m = run_batch(server, endpoint, count=6, output_len=10)
    assert m["completed"] == 6 and m["failed"] == 0
    assert [o.output_tokens for o in outcomes] == [10] * 6 and not m["approximate_token_count"]
    assert [o.content_chunks for o in outcomes] == [-(-10 // per_chunk)] * 6  # the role-only chat chunk is not content
    assert m["total_input_tokens"] == 30  # 5 words a prompt, as the server counted them
    assert all(len(o.itl) == o.content_chunks - 1 for o in outcomes)
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    request = server.requests[0]
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}
    assert request["ignore_eos"] is True and request["max_tokens"] == 10
    assert ("messages" in request) == (endpoint == "chat") and path


def test_without_usage_chunks_are_counted_and_flagged():
    with ScriptedServer(tokens_per_chunk=4) as server:
        server.behaviours = ["no_usage"] * 2
        outcomes, m = run_batch(server, count=2, output_len=10)
    assert m["completed"] == 2 and m["approximate_token_count"] is True
    assert [o.output_tokens for o in outcomes] == [3, 3]  # 3 chunks of up to 4 tokens: an undercount, flagged


def test_timing_lower_bounds():
    # a loaded machine can only make a stream look slower, never faster than the server's pace
    with ScriptedServer(gap_s=0.02, ttft_s=0.05) as server:
        outcomes, m = run_batch(server, count=2, output_len=6, concurrency=2)
    assert m["completed"] == 2
    for o in outcomes:
        # the server sends its first token 50 ms after reading the request, its last 5 gaps later
        assert o.ttft >= 0.05 and o.latency >= 0.05 + 5 * 0.02 and len(o.itl) == 5
        assert sum(o.itl) == pytest.approx(o.latency - o.ttft)
    tpots = sorted(1000 * (o.latency - o.ttft) / 5 for o in outcomes)
    assert m["median_tpot_ms"] == pytest.approx((tpots[0] + tpots[1]) / 2)


@pytest.mark.parametrize("fault, reason, text", [
    ("http500", "http_error", "HTTP 500"),
    ("error_event", "error_event", "scripted mid-stream failure"),
    ("event_error_field", "error_event", "overloaded"),
    ("drop", "connection_dropped", "after 2 content chunks"),
    ("stall", "timeout", "within 1 s"),
    ("garbage", "bad_response", "not an HTTP/1.x status line"),
    ("empty", "no_content", "without a content chunk"),
])
def test_each_fault_is_a_failed_request_with_its_reason(fault, reason, text):
    with ScriptedServer() as server:
        server.behaviours = [fault]
        outcomes, m = run_batch(server, count=3, output_len=5, concurrency=1, timeout=1.0)
    assert m["completed"] == 2 and m["failed"] == 1
    assert m["failed_by_reason"] == {reason: 1}
    assert outcomes[0].success is False and outcomes[0].reason == reason and text in outcomes[0].error
    assert m["errors"][0]["request"] == 0 and text in m["errors"][0]["error"]
    assert m["total_output_tokens"] == 10  # only the completed requests count


def test_close_delimited_stream_needs_done_marker():
    with ScriptedServer(close_delimited=True) as server:
        server.behaviours = ["ok", "drop"]
        outcomes, m = run_batch(server, count=2, output_len=5, concurrency=1)
    assert outcomes[0].success and outcomes[0].output_tokens == 5
    assert outcomes[1].reason == "connection_dropped"


def test_unreachable_port_is_a_connect_error():
    target = Target("http", "127.0.0.1", free_port(), "/v1/completions")
    outcomes, _duration = Client(target, "completions", 5.0).run([b"{}"], 1, [0.0])
    assert outcomes[0].reason == "connect_error" and "cannot connect" in outcomes[0].error


def test_api_key_header_and_host():
    with ScriptedServer() as server:
        target = Server(server.url + "/v1/", api_key="sekrit").target("completions")
        bodies = request_bodies("completions", "tiny-model", 1, 3, 2, True, 0, "x")
        outcomes = Client(target, "completions", 5.0).run(bodies, 1, [0.0])[0]
    assert outcomes[0].success
    assert server.headers[0]["authorization"] == "Bearer sekrit"
    assert server.headers[0]["host"] == "127.0.0.1:%d" % server.server_address[1]


def test_prompts_differ_per_phase_and_repeat_from_seed():
    a = request_bodies("completions", "m", 3, 50, 4, True, 7, "repeat1")
    assert a == request_bodies("completions", "m", 3, 50, 4, True, 7, "repeat1")
    assert len(set(a)) == 3
    b = request_bodies("completions", "m", 3, 50, 4, True, 7, "repeat2")
    c = request_bodies("completions", "m", 3, 50, 4, True, 8, "repeat1")
    assert not set(a) & set(b) and not set(a) & set(c)
    assert len(json.loads(a[0])["prompt"].split()) == 50


# ----------------------------------------------------------------------------- whole benchmark

def spec(url, **options):
    params = {"url": url, "input_len": 4, "output_len": 6, "num_requests": 4, "concurrency": 2, "warmup_requests": 2,
              "repeats": 3, "timeout": 5.0}
    params.update(options)
    return build_spec(params)


def test_benchmark_repeats_cross_check_and_model_discovery():
    with ScriptedServer(models=["first", "second"], gap_s=0.002) as server:
        bench = Benchmark(spec(server.url))
        result = bench.run()
        prompts = [r["prompt"] for r in server.requests]
    assert result["model"] == "first"
    assert result["warmup"]["completed"] == 2 and result["warmup"]["server_generation_tokens"] == 12
    assert [run["repeat"] for run in result["runs"]] == [1, 2, 3]
    for run in result["runs"]:
        assert run["completed"] == 4 and run["total_output_tokens"] == 24
        assert run["server_generation_tokens"] == 24 and run["client_generation_tokens"] == 24
    assert result["metrics"]["completed"]["median"] == 4 and result["metrics"]["decode_tok_s"]["n"] == 3
    assert len(set(prompts)) == 14  # warmup and every repeat: different prompts
    assert bench.warnings == []


def test_server_counting_other_traffic_is_a_warning():
    with ScriptedServer() as server:
        bench = Benchmark(spec(server.url, repeats=1, warmup_requests=0))
        server.extra_generated = 0

        original = bench.server.generation_tokens
        calls = []

        def noisy(model):
            calls.append(model)
            if len(calls) > 1:
                server.extra_generated = 5
            return original(model)

        bench.server.generation_tokens = noisy
        result = bench.run()
    assert result["runs"][0]["server_generation_tokens"] == 29
    assert any("server counted 29 generated tokens" in w and "client saw 24 (+5)" in w for w in bench.warnings)


def test_no_metrics_endpoint_skips_the_cross_check_with_a_warning():
    with ScriptedServer(metrics=False) as server:
        bench = Benchmark(spec(server.url, repeats=1))
        result = bench.run()
    assert result["runs"][0]["server_generation_tokens"] is None
    assert any("cross-check is skipped" in w for w in bench.warnings)


def test_failed_warmup_stops_the_benchmark_with_reasons():
    with ScriptedServer() as server:
        server.behaviours = ["http500", "http500"]
        with pytest.raises(BenchmarkFailed, match="every warmup request failed.*http_error: 2.*HTTP 500") as caught:
            Benchmark(spec(server.url)).run()
    assert caught.value.result["runs"] == []


def test_partial_failures_are_reported_not_raised():
    with ScriptedServer() as server:
        server.behaviours = ["ok", "ok", "http500", "drop"]
        bench = Benchmark(spec(server.url, repeats=1, concurrency=1))
        result = bench.run()
    run = result["runs"][0]
    assert run["completed"] == 2 and run["failed_by_reason"] == {"http_error": 1, "connection_dropped": 1}
    assert any("2 of 4 requests failed" in w for w in bench.warnings)


def test_unknown_model_and_unreachable_server():
    with ScriptedServer(models=["a", "b"]) as server:
        with pytest.raises(ServerError, match=r"model='zzz' is not served at url='http://127.0.0.1:\d+'; the server lists: a, b"):
            Benchmark(spec(server.url, model="zzz")).run()
    url = "http://127.0.0.1:%d" % free_port()
    with pytest.raises(ServerError, match="url='%s': cannot reach" % url):
        Benchmark(spec(url)).run()


def test_save_result_file(tmp_path):
    path = tmp_path / "result.json"
    with ScriptedServer() as server:
        result = Benchmark(spec(server.url, repeats=2, save_result=str(path))).run()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert result["save_result"] == str(path)
    assert [row["gpuops_fleet"]["repeat"] for row in rows] == [1, 2]
    assert rows[0]["completed"] == 4 and rows[0]["total_output_tokens"] == 24 and rows[0]["model_id"] == "tiny-model"
