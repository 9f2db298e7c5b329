# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_benchmark's newer options on their own: percentiles, goodput, sweep levels and the knee, duration, metrics_url;
and a time-bounded run of the client against a scripted server on a real socket."""

from __future__ import annotations

import json
import random

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.client import Client, OpenArrivals
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.goodput import goodput
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.metrics import headline, run_metrics
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import request_bodies
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import IN_FLIGHT, Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.run import _OpenBodies, find_knee
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.save import vllm_result
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.server import Server, ServerError
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import build_spec
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import percentile_label, percentile_text
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.bench_sse_server import ScriptedServer


def test_percentile_names():
    assert [percentile_label(p) for p in (50, 90.0, 99, 99.9, 99.99, 12.5)] == ["p50", "p90", "p99", "p99_9", "p99_99", "p12_5"]
    assert [percentile_text(p) for p in (50.0, 99.9)] == ["50", "99.9"]  # vllm bench serve's own key: p99.9_ttft_ms


def test_percentiles_are_checked_sorted_and_deduplicated():
    assert build_spec({}).percentiles == (50.0, 90.0, 99.0)
    assert build_spec({"percentiles": [99.9, 50, 50.0, 100]}).percentiles == (50.0, 99.9, 100.0)
    for bad in ([0], [101], [-5], [50, "x"], [], [float("nan")], [True]):
        with pytest.raises(SpecError, match=r"^percentiles: "):
            build_spec({"percentiles": bad})


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


def finished(index, ttft, latency, tokens):
    o = Outcome(index)
    o.success, o.ttft, o.latency, o.output_tokens = True, ttft, latency, tokens
    return o


def test_goodput_by_hand():
    outcomes = [
        finished(0, 0.1, 1.1, 11),   # TTFT 100 ms, TPOT 100 ms, E2EL 1100 ms
        finished(1, 0.6, 1.1, 11),   # TTFT 600 ms: over the TTFT target
        finished(2, 0.1, 2.1, 11),   # TPOT 200 ms and E2EL 2100 ms: over both
        finished(3, 0.2, 0.2, 1),    # one token: TPOT 0 (vllm bench serve), good
        Outcome(4),                  # failed: never good
    ]
    outcomes[4].reason = "http_error"
    figures = goodput(outcomes, {"ttft_ms": 500.0, "tpot_ms": 150.0, "e2el_ms": 2000.0}, 4.0)
    assert figures == {"good_requests": 2, "goodput_pct": 40.0, "request_goodput": 0.5,
                       "slo_missed": {"ttft_ms": 1, "tpot_ms": 1, "e2el_ms": 1}}
    assert goodput(outcomes, {"ttft_ms": 500.0}, 4.0)["good_requests"] == 3
    assert goodput([], {"ttft_ms": 1.0}, 1.0)["goodput_pct"] is None


@pytest.mark.parametrize("value, message", [
    ({"ttft_ms": -1}, "goodput.ttft_ms: -1 must be a positive"),
    ({"tpot_ms": 0}, "goodput.tpot_ms: 0 must be a positive"),
    ({"e2el_ms": "soon"}, "goodput.e2el_ms: 'soon' is not a number"),
    ({"ttft": 500}, "goodput: unknown key 'ttft' in {'ttft': 500}; the targets are ttft_ms, tpot_ms, e2el_ms"),
    ({}, "goodput: {} sets no target"),
    ({"ttft_ms": None, "tpot_ms": None, "e2el_ms": None}, "sets no target"),
    ("fast", "goodput: 'fast' is not a dict"),
])
def test_goodput_values_are_checked(value, message):
    with pytest.raises(SpecError) as caught:
        build_spec({"goodput": value})
    assert message in str(caught.value)


def test_goodput_keeps_only_the_targets_given():
    assert build_spec({"goodput": {"ttft_ms": 500, "tpot_ms": None, "e2el_ms": None}}).goodput == {"ttft_ms": 500.0}
    assert build_spec({}).goodput is None


def test_sweep_levels():
    one = build_spec({"concurrency": 4})
    assert one.sweep_option is None and one.concurrency == 4 and [s.concurrency for s in one.levels()] == [4]
    assert build_spec({"concurrency": [4]}).sweep_option is None
    sweep = build_spec({"concurrency": [8, 1, 64]})
    assert sweep.sweep_option == "concurrency" and sweep.concurrency == 8
    assert [(s.concurrency, s.request_rate) for s in sweep.levels()] == [(8, float("inf")), (1, float("inf")), (64, float("inf"))]
    rates = build_spec({"request_rate": [2, "inf", 0.5], "concurrency": 32})
    assert rates.sweep_option == "request_rate" and [s.request_rate for s in rates.levels()] == [2.0, float("inf"), 0.5]
    assert {s.concurrency for s in rates.levels()} == {32}


@pytest.mark.parametrize("params, message", [
    ({"concurrency": []}, "concurrency: [] is an empty sweep"),
    ({"request_rate": []}, "request_rate: [] is an empty sweep"),
    ({"concurrency": [1, 0]}, "concurrency: 0 is out of range"),
    ({"concurrency": [1, 8, 1]}, "concurrency: 1 is given twice in [1, 8, 1]"),
    ({"concurrency": list(range(1, 70))}, "concurrency: 69 levels are more than the 64"),
    ({"request_rate": [1, -1]}, "request_rate: -1 must be a positive number"),
    ({"concurrency": [1, 2], "request_rate": [1, 2]}, "concurrency: [1, 2] and request_rate: [1.0, 2.0] are both lists"),
    ({"knee_tolerance": 0}, "knee_tolerance: 0 must be a positive"),
    ({"knee_tolerance": 100}, "knee_tolerance: 100 must be less than 100 percent"),
    ({"duration": 0}, "duration: 0 must be a positive, finite number of seconds"),
    ({"duration": -3}, "duration: -3 must be a positive"),
    ({"duration": "inf"}, "duration: 'inf' must be a positive, finite number"),
    ({"metrics_url": "ftp://host/metrics"}, "metrics_url: 'ftp://host/metrics' must be an http:// or https:// URL"),
    ({"metrics_url": "http://host:99999/metrics"}, "metrics_url: 'http://host:99999/metrics' is not a valid URL"),
])
def test_bad_values_name_option_and_value(params, message):
    with pytest.raises(SpecError) as caught:
        build_spec(params)
    assert message in str(caught.value)


def test_duration_and_num_requests():
    assert build_spec({}).num_requests == 64 and build_spec({}).duration is None
    timed = build_spec({"duration": 30})
    assert timed.duration == 30.0 and timed.num_requests is None  # no count: as many as the time allows
    assert build_spec({"duration": 30, "num_requests": 10}).num_requests == 10  # a cap


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


def test_a_time_bounded_run_counts_requests_in_flight_apart():
    with ScriptedServer(gap_s=0.02) as server:
        server.behaviours = ["ok", "stall"]  # the second request never ends: in flight at the end, not a timeout
        spec = build_spec({"input_len": 3, "output_len": 5, "duration": 0.6, "timeout": 10})
        target = Server(server.url).target("completions")
        bodies = _OpenBodies(spec, "tiny-model", "repeat1", 1000)
        outcomes, duration = Client(target, "completions", 10.0).run(bodies, 2, OpenArrivals(float("inf"), random.Random(0), 1000), 0.6)
    in_flight = [o for o in outcomes if o.reason == IN_FLIGHT]
    done = [o for o in outcomes if o.success]
    assert 0.6 <= duration < 2.0  # ends at the deadline, not at the stalled request's 10 s timeout (slack for a loaded machine)
    # the stalled one (the server stalls the second request it reads: request 0 or 1, whichever came second), and
    # perhaps one running at the end
    assert 1 <= len(in_flight) <= 2 and {0, 1} & {o.index for o in in_flight}
    # every request the server received is accounted for, once; one sent at the deadline may be cut before the server read it
    assert len(server.requests) <= len(outcomes) <= len(server.requests) + len(in_flight) - 1
    assert len(done) + len(in_flight) == len(outcomes) and len(done) >= 1
    assert all(o.reason != "timeout" for o in outcomes)


def test_metrics_url_forms():
    server = Server("http://127.0.0.1:8000/v1")
    assert server.metrics_url == "http://127.0.0.1:8000/metrics"
    assert Server("http://h:1/p", metrics_url="/vllm/metrics").metrics_url == "http://h:1/p/vllm/metrics"
    assert Server("http://h:1", metrics_url="http://other:9/m").metrics_url == "http://other:9/m"
    assert Server("http://h:1", metrics_url="").metrics_text() is None  # read nothing, not even a connection


def test_models_endpoint_missing():
    with ScriptedServer(models_endpoint=False) as server:
        probe = Server(server.url)
        assert probe.resolve_model("tiny-model") == "tiny-model"
        assert len(probe.warnings) == 1 and "GET /v1/models answered HTTP 404" in probe.warnings[0]
        assert "benchmarking model='tiny-model' as given, unchecked" in probe.warnings[0]
        with pytest.raises(ServerError, match="GET /v1/models answered HTTP 404"):
            Server(server.url).resolve_model(None)  # no model given: /v1/models is needed
    with ScriptedServer() as server:
        with pytest.raises(ServerError, match="model='other' is not served"):
            Server(server.url).resolve_model("other")  # a server that lists models still gets checked
