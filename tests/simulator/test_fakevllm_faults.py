# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Faults queued through POST /sim/faults: each kind as a client sees it, and as /metrics counts it."""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path
from typing import Iterator

import pytest
from gpusim_helpers import FakeServer, FakeServers, SimHost, wait_for

RUNNING = 'vllm:num_requests_running{engine="0",model_name="org/model"}'
GENERATED = 'vllm:generation_tokens_total{engine="0",model_name="org/model"}'
STREAM = {"prompt": "x", "max_tokens": 12, "ignore_eos": True, "stream_options": {"include_usage": True}}


@pytest.fixture
def server(simhost: SimHost, tmp_path: Path) -> Iterator[FakeServer]:
    servers = FakeServers(simhost, tmp_path)
    try:
        started = servers.start(gpus="0", env={"GPUOPS_SIM_TOKENS_PER_S": "200", "GPUOPS_SIM_TTFT_MS": "5"})
        started.wait_ready()
        yield started
    finally:
        servers.close()


def queue(server: FakeServer, body: object) -> object:
    status, data = server.request("POST", "/sim/faults", body)
    assert status == 200, data
    return json.loads(data)["queued"]


def test_each_fault_kind_hits_the_next_request_in_order(server: FakeServer) -> None:
    assert queue(server, {"http_500": 1, "error_event": 1, "stall": 1, "drop": 1}) == [
        "http_500", "error_event", "stall", "drop"]
    assert server.get_json("/sim/faults") == {"queued": ["http_500", "error_event", "stall", "drop"]}
    before = server.metrics()[GENERATED]

    failed = server.stream("/v1/completions", STREAM)
    assert failed.status == 500 and json.loads(failed.body)["error"]["code"] == 500

    errored = server.stream("/v1/completions", STREAM)
    assert errored.status == 200 and errored.cut is None
    errors = [event for event in errored.events if isinstance(event, dict) and "error" in event]
    assert len(errors) == 1 and errors[0]["error"]["code"] == 500 and errors[0]["error"]["message"]
    assert len(errored.texts()) == 3 and errored.usage() is None  # a few tokens, then the error event

    stalled = server.stream("/v1/completions", STREAM, timeout=1.5)
    assert stalled.cut == "TimeoutError" and len(stalled.texts()) == 3 and not stalled.done
    assert wait_for(lambda: server.metrics()[RUNNING] == 0)  # our client left: the request ended

    dropped = server.stream("/v1/completions", STREAM)
    assert dropped.cut == "closed" and len(dropped.texts()) == 3 and not dropped.done

    assert server.get_json("/sim/faults") == {"queued": []}
    healthy = server.stream("/v1/completions", STREAM)
    assert healthy.done and healthy.usage()["completion_tokens"] == 12
    after = server.metrics()
    assert after[GENERATED] - before == 3 + 3 + 3 + 12  # exactly the tokens that went out
    assert after[RUNNING] == 0


def test_a_stalled_stream_runs_until_its_client_leaves(server: FakeServer) -> None:
    queue(server, {"queue": ["stall"]})
    conn = server.connection(timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 20, "stream": True}))
    response = conn.getresponse()
    lines = [response.readline() for _line in range(8)]  # role chunk and three tokens, each with its blank line
    assert sum(line.startswith(b"data: ") for line in lines) == 4
    sock = conn.sock
    sock.settimeout(0.5)
    with pytest.raises(socket.timeout):
        response.readline()  # nothing more comes
    assert server.metrics()[RUNNING] == 1
    conn.close()
    assert wait_for(lambda: server.metrics()[RUNNING] == 0, timeout=10)


def test_a_dropped_stream_is_an_unfinished_http_body(server: FakeServer) -> None:
    queue(server, {"drop": 1})
    conn = server.connection()
    try:
        conn.request("POST", "/v1/completions", json.dumps(dict(STREAM, stream=True)))
        response = conn.getresponse()
        assert response.status == 200 and response.getheader("Transfer-Encoding") == "chunked"
        with pytest.raises(http.client.IncompleteRead) as caught:
            response.read()
    finally:
        conn.close()
    assert caught.value.partial.count(b"data: {") == 3 and b"[DONE]" not in caught.value.partial


def test_faults_on_whole_responses(server: FakeServer) -> None:
    queue(server, {"error_event": 1, "drop": 1, "stall": 1})
    status, data = server.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 5})
    assert status == 500 and json.loads(data)["error"]["type"] == "InternalServerError"
    with pytest.raises(http.client.RemoteDisconnected):
        server.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 5})
    with pytest.raises(socket.timeout):
        server.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 5}, timeout=1.0)
    assert wait_for(lambda: server.metrics()[RUNNING] == 0)
    status, data = server.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 5})
    assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == 5


def test_invalid_fault_bodies_and_clearing(server: FakeServer) -> None:
    for body in ({"explode": 1}, {"drop": -1}, {"drop": "2"}, [], {"queue": ["drop", "nope"]}):
        status, data = server.request("POST", "/sim/faults", body)
        assert status == 400 and json.loads(data)["error"]["code"] == 400, body
    assert server.request("POST", "/sim/faults", raw=b"{")[0] == 400
    assert queue(server, {"drop": 2}) == ["drop", "drop"]
    status, data = server.request("DELETE", "/sim/faults")
    assert status == 200 and json.loads(data)["cleared"] == 2
    assert server.get_json("/sim/faults") == {"queued": []}
    assert server.stream("/v1/completions", STREAM).done
    bad = server.stream("/v1/completions", {"prompt": "x", "max_tokens": 0})
    assert bad.status == 400  # an invalid request takes no fault ...
    queue(server, {"http_500": 1})
    assert server.stream("/v1/completions", {"prompt": "x", "max_tokens": 0}).status == 400
    assert server.get_json("/sim/faults") == {"queued": ["http_500"]}  # ... it stays for the next valid one


def test_a_dead_engine_keeps_health_and_models_and_fails_every_generation(simhost: SimHost, tmp_path: Path) -> None:
    """GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS: the API server outlives its engine core, as vLLM's does. /health and
    /v1/models still answer 200; every completion after the first N answers HTTP 500 with vLLM's EngineDeadError body
    (streamed or not, completions or chat) and generates nothing; the workers still hold their GPU."""
    servers = FakeServers(simhost, tmp_path)
    try:
        server = servers.start(gpus="1", env={"GPUOPS_SIM_TOKENS_PER_S": "200", "GPUOPS_SIM_TTFT_MS": "5",
                                              "GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS": "1"})
        server.wait_ready()
        status, data = server.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 4, "ignore_eos": True})
        assert status == 200 and json.loads(data)["usage"]["completion_tokens"] == 4  # the engine served one request
        before = server.metrics()
        queue(server, {"drop": 1})  # a queued fault waits: the dead engine answers first
        dead = [server.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 4}),
                server.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4})]
        streamed = server.stream("/v1/completions", STREAM)
        dead.append((streamed.status, streamed.body))
        for status, data in dead:
            error = json.loads(data)["error"]
            assert status == 500 and error["type"] == "EngineDeadError" and error["code"] == 500, (status, data)
            assert error["message"].startswith("EngineCore encountered an issue")
        assert server.request("GET", "/health")[0] == 200
        assert server.get_json("/v1/models")["data"][0]["id"] == "org/model"
        after = server.metrics()
        assert after[GENERATED] == before[GENERATED] == 4 and after[RUNNING] == 0
        assert server.get_json("/sim/faults") == {"queued": ["drop"]}
        assert simhost.holders(1), "the dead engine's workers let go of their GPU"
        assert server.log_text().count("EngineDeadError: EngineCore encountered an issue") == 3

        dead_at_once = servers.start(gpus="2", env={"GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS": "0"})
        dead_at_once.wait_ready()
        status, data = dead_at_once.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert status == 500 and json.loads(data)["error"]["type"] == "EngineDeadError"

        bad = servers.start(gpus="3", env={"GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS": "-1"})
        assert bad.proc is not None and bad.proc.wait(timeout=30) == 1
        assert "ValueError: GPUOPS_SIM_ENGINE_DEAD_AFTER_REQUESTS" in bad.log_text()
    finally:
        servers.close()
