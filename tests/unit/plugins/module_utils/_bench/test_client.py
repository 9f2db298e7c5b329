# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The streaming client (_bench/client) against a scripted server on a real socket: exact tokens, timing, faults,
time-bounded runs; and the arrival times of an open run."""

from __future__ import annotations

import random

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench import client
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.client import arrival_offsets, Client, OpenArrivals
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.metrics import run_metrics
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.prompts import request_bodies, request_body
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import IN_FLIGHT, Target
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.run import _OpenBodies
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.server import Server
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import build_spec
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import mean
from ansible_collections.gpuops.fleet.tests.unit.plugins.bench_sse_server import ScriptedServer
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import refused_port


def approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-9)


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
    with refused_port() as port:
        target = Target("http", "127.0.0.1", port, "/v1/completions")
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


# ----------------------------------------------------------------------------- whole benchmark


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


def test_arrivals():
    assert arrival_offsets(3, float("inf"), random.Random(1)) == [0.0, 0.0, 0.0]
    offsets = arrival_offsets(200, 10.0, random.Random(1))
    assert offsets == sorted(offsets) and offsets[-1] == approx(20.0)   # scaled to count / rate, as vllm bench serve
    assert offsets != arrival_offsets(200, 10.0, random.Random(2))
    gaps = [b - a for a, b in zip([0.0] + offsets, offsets)]
    assert 0.07 < mean(gaps) < 0.13 and max(gaps) > 2 * min(gaps)     # exponential, not even spacing


def test_sessions_prepare_each_turn_right_after_a_send_never_at_the_end_of_a_stream(monkeypatch):
    # the costly part of a turn's body (prepare) runs in the step that writes a request, before any answer to it can
    # be read; at the end of a turn only body(answer) is made, so another session's read never waits on a build
    log = []
    send, finish = client._StreamProtocol.send, client._StreamProtocol._finish
    monkeypatch.setattr(client._StreamProtocol, "send", lambda self: (send(self), log.append(("sent", self.outcome.index))))
    monkeypatch.setattr(client._StreamProtocol, "_finish",
                        lambda self, *args: (log.append(("ended", self.outcome.index)), finish(self, *args)))
    sessions, turns = 3, 3

    class Talk:
        def __init__(self, session):
            self.session, self.turn, self.prepared = session, 0, 0

        def prepare(self):
            log.append(("prepare", self.session * turns + self.turn))
            self.prepared += 1

        def body(self, answer=None):
            log.append(("body", self.session * turns + self.turn, answer, self.prepared))
            self.turn += 1
            return request_body("completions", "tiny-model", "hi", 3, True)

    with ScriptedServer() as server:
        target = Server(server.url).target("completions")
        outcomes, _duration = Client(target, "completions", 10.0, keep_text=True).run_sessions(sessions, turns, 2, 0.0, Talk)
    assert [outcome.index for outcome in outcomes if outcome.success] == list(range(sessions * turns))
    bodies = [entry for entry in log if entry[0] == "body"]
    # each body once, its turn prepared once before it, with the answer the turn before got
    assert [entry[1] for entry in sorted(bodies)] == list(range(sessions * turns))
    assert all(prepared == turn + 1 for (_body, index, _answer, prepared), turn
               in zip(sorted(bodies), [index % turns for index in range(sessions * turns)]))
    assert all(answer == (None if index % turns == 0 else " tok tok tok") for _body, index, answer, _prepared in bodies)
    prepares = [number for number, entry in enumerate(log) if entry[0] == "prepare"]
    assert sorted(log[number][1] for number in prepares) == list(range(sessions * turns))
    first_send = next(number for number, entry in enumerate(log) if entry[0] == "sent")
    for number in prepares:
        index = log[number][1]
        if number < first_send:
            assert index % turns == 0  # the first turns of the sessions the two workers start with
            continue
        before = log[number - 1]
        assert before[0] == "sent", (log[number - 1:number + 1], log)
        # a later turn right after the turn before it was sent; a session taken up after another's last turn was sent
        assert before[1] == index - 1 if index % turns else before[1] % turns == turns - 1, log
        assert log.index(("ended", before[1])) > number
