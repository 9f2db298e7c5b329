# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A benchmark (_bench/run): repeats, the cross-check against the server's counters, warm-up, failures, the result file,
against a scripted server on a real socket; the knee of a sweep, and open runs' request bodies."""

from __future__ import annotations

import json
import random

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.client import OpenArrivals
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import request_bodies
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.run import _OpenBodies, Benchmark, BenchmarkFailed, find_knee
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.server import ServerError
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import build_spec
from ansible_collections.gpuops.fleet.tests.unit.plugins.bench_sse_server import ScriptedServer
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import refused_port


def test_knee():
    # within 10% of the lowest level's rate up to 16; 32 falls further; 64 recovering does not move the knee
    levels = [(1, 50.0), (8, 48.0), (16, 45.5), (32, 40.0), (64, 46.0)]
    knee = find_knee("concurrency", levels, 10.0)
    assert (knee["level"], knee["value"], knee["next_level"], knee["next_value"]) == (16, 45.5, 32, 40.0)
    assert knee["reference_level"] == 1 and knee["reference_value"] == 50.0 and knee["figure"] == "decode_tok_s"
    # the order given does not matter: the reference is the lowest level
    assert find_knee("concurrency", list(reversed(levels)), 10.0)["level"] == 16
    # never saturated: the knee is the highest level, nothing beyond
    assert find_knee("concurrency", [(1, 50.0), (4, 49.0)], 10.0)["level"] == 4
    assert find_knee("concurrency", [(1, 50.0), (4, 49.0)], 10.0)["next_level"] is None
    # a level that measured nothing ends the knee; a lowest level without a rate gives none
    assert find_knee("concurrency", [(1, 50.0), (2, None), (4, 49.0)], 10.0)["level"] == 1
    assert find_knee("concurrency", [(1, None), (2, 40.0)], 10.0)["level"] is None
    # a tighter tolerance, and request rates with 'inf' (all at once) as the highest
    assert find_knee("concurrency", levels, 5.0)["level"] == 8 and find_knee("concurrency", levels, 3.0)["level"] == 1
    assert find_knee("request_rate", [("inf", 30.0), (0.5, 50.0), (2.0, 48.0)], 10.0)["next_level"] == "inf"


def test_open_bodies_are_request_bodies_made_on_demand():
    spec = build_spec({"input_len": 6, "output_len": 3, "seed": 7, "duration": 1})
    made = _OpenBodies(spec, "m", "repeat1", 100)
    assert len(made) == 100
    assert [made[i] for i in range(5)] == request_bodies("completions", "m", 5, 6, 3, True, 7, "repeat1")
    arrivals = OpenArrivals(4.0, random.Random(1), 50)
    assert arrivals[3] > arrivals[2] > arrivals[0] > 0 and len(arrivals) == 50
    assert OpenArrivals(float("inf"), random.Random(1), 5)[4] == 0.0


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
    with refused_port() as port:
        url = "http://127.0.0.1:%d" % port
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
