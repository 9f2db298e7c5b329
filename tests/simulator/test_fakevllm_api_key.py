# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake vLLM's API key, as vLLM's: with --api-key K (or VLLM_API_KEY=K) /v1/* answers only
`Authorization: Bearer K` (401 otherwise); /health, /metrics and the rest stay open."""

from __future__ import annotations

import http.client
import json
from typing import Dict, Iterator, Optional, Tuple

import pytest
from gpusim_helpers import FakeServer, host_with_servers

KEY = "sk-sim-arg-1"
ENV_KEY = "sk-sim-env-2"
COMPLETION = {"model": "org/model", "prompt": "one two three", "max_tokens": 3}


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dict[str, FakeServer]]:
    with host_with_servers(tmp_path_factory.mktemp("fakevllm-api-key"), 4) as started:
        knobs = {"GPUOPS_SIM_TOKENS_PER_S": "2000", "GPUOPS_SIM_TTFT_MS": "1"}
        found = {
            "arg": started.start(gpus="0", env=knobs, args=("--api-key", KEY)),
            "env": started.start(gpus="1", env=dict(knobs, VLLM_API_KEY=ENV_KEY)),
            "both": started.start(gpus="2", env=dict(knobs, VLLM_API_KEY=ENV_KEY), args=("--api-key", KEY)),
            "open": started.start(gpus="3", env=knobs),
        }
        for server in found.values():
            server.wait_ready()
        yield found


def call(server: FakeServer, method: str, path: str, key: Optional[str] = None, body: Optional[dict] = None,
         conn: Optional[http.client.HTTPConnection] = None, header: Optional[str] = None) -> Tuple[int, bytes]:
    own = conn is None
    conn = conn or server.connection(10)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if key is not None:
        headers["Authorization"] = "Bearer " + key
    if header is not None:
        headers["Authorization"] = header
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None, headers)
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        if own:
            conn.close()


@pytest.mark.parametrize("name,key", [("arg", KEY), ("env", ENV_KEY), ("both", KEY)])
def test_v1_needs_the_key(servers: Dict[str, FakeServer], name: str, key: str) -> None:
    server = servers[name]
    status, body = call(server, "GET", "/v1/models")
    assert status == 401 and json.loads(body) == {"error": "Unauthorized"}
    assert call(server, "GET", "/v1/models", key="wrong")[0] == 401
    assert call(server, "GET", "/v1/models", header=key)[0] == 401  # the key without "Bearer "
    assert call(server, "GET", "/v1/models", header="bearer " + key)[0] == 401
    assert call(server, "POST", "/v1/completions", body=COMPLETION)[0] == 401
    assert call(server, "POST", "/v1/chat/completions", body={"messages": [{"role": "user", "content": "hi"}]})[0] == 401
    status, body = call(server, "GET", "/v1/models", key=key)
    assert status == 200 and [entry["id"] for entry in json.loads(body)["data"]] == ["org/model"]
    status, body = call(server, "POST", "/v1/completions", key=key, body=COMPLETION)
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] >= 1


def test_the_argument_wins_over_the_environment(servers: Dict[str, FakeServer]) -> None:
    """As vLLM: --api-key given, VLLM_API_KEY is not a key."""
    assert call(servers["both"], "GET", "/v1/models", key=ENV_KEY)[0] == 401
    assert call(servers["both"], "GET", "/v1/models", key=KEY)[0] == 200


@pytest.mark.parametrize("name", ["arg", "env", "both"])
def test_health_metrics_and_version_stay_open(servers: Dict[str, FakeServer], name: str) -> None:
    server = servers[name]
    assert call(server, "GET", "/health")[0] == 200
    status, body = call(server, "GET", "/metrics")
    assert status == 200 and b"vllm:num_requests_running" in body
    assert call(server, "GET", "/version")[0] == 200


def test_a_refused_request_leaves_the_connection_usable(servers: Dict[str, FakeServer]) -> None:
    server = servers["arg"]
    conn = server.connection(10)
    try:
        assert call(server, "POST", "/v1/completions", body=COMPLETION, conn=conn)[0] == 401
        assert call(server, "POST", "/v1/completions", key=KEY, body=COMPLETION, conn=conn)[0] == 200
    finally:
        conn.close()


def test_without_a_key_v1_is_open(servers: Dict[str, FakeServer]) -> None:
    assert call(servers["open"], "GET", "/v1/models")[0] == 200
    assert call(servers["open"], "GET", "/v1/models", key="anything")[0] == 200


def test_the_key_is_not_in_the_log(servers: Dict[str, FakeServer]) -> None:
    for server in servers.values():
        text = server.log_text()
        assert KEY not in text and ENV_KEY not in text
    assert "API key" not in servers["open"].log_text()
    assert "API key" in servers["arg"].log_text()
