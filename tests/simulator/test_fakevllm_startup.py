# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake vLLM's start-up: the port bound early, /health 503 until ready, crash and hang modes, bad knobs."""

from __future__ import annotations

import json
import signal
import socket
import time
from typing import Any, Dict, List

import pytest
from gpusim_helpers import FakeServers, SimHost, is_running, wait_for


def used_mib(simhost: SimHost) -> List[int]:
    """Memory per GPU by the simulator's own reading (gpusim status), not the server's word."""
    return [gpu["used_mib"] for gpu in simhost.gpusim_json("status", "--json")["gpus"]]


def tree_pids(simhost: SimHost, roles: tuple = ("api_server", "engine_core", "worker")) -> List[int]:
    return [record.pid for record in simhost.records() if record.role in roles]


def test_port_bound_at_once_health_503_until_the_delay(simhost: SimHost, servers: FakeServers) -> None:
    delay = 4.0
    server = servers.start(gpus="0,1", env={"GPUOPS_SIM_STARTUP_DELAY_S": str(delay)},
                           args=("--served-model-name", "chat-a", "chat-b"))
    assert wait_for(lambda: server.health() != 0, timeout=20), server.log_text()
    answers = [server.health()]
    assert answers == [503]  # listening long before the delay is over
    assert wait_for(lambda: used_mib(simhost)[:2] == [4096, 4096], timeout=20)  # every worker holds its GPU
    answers.append(server.health())
    if time.monotonic() - server.launched < delay - 0.5:  # still inside the delay: the delay alone holds it back
        assert answers == [503, 503]
        status, body = server.request("GET", "/v1/models")
        assert status == 503 and json.loads(body)["error"]["code"] == 503
    server.wait_ready(timeout=30)
    assert time.monotonic() - server.launched >= delay  # never ready before the delay, counted from its start
    models = server.get_json("/v1/models")
    assert [model["id"] for model in models["data"]] == ["chat-a", "chat-b"]
    assert {model["root"] for model in models["data"]} == {"org/model"}
    status, body = server.request("POST", "/v1/completions", {"model": "org/model", "prompt": "x", "max_tokens": 1})
    assert status == 404 and "does not exist" in json.loads(body)["error"]["message"]
    status, _body = server.request("POST", "/v1/completions", {"model": "chat-b", "prompt": "x", "max_tokens": 1})
    assert status == 200
    assert 'model_name="chat-a"' in server.request("GET", "/metrics")[1].decode()


def test_crash_at_start_logs_the_error_exits_1_and_ends_its_workers(simhost: SimHost, servers: FakeServers) -> None:
    server = servers.start(gpus="2,3", env={"GPUOPS_SIM_FAIL_AT_START": "crash", "GPUOPS_SIM_FAIL_AFTER_S": "3",
                                            "GPUOPS_SIM_FAIL_MESSAGE": "CUDA error: out of memory"})
    assert wait_for(lambda: server.health() != 0, timeout=20)
    assert server.health() == 503  # bound, never ready
    assert server.proc is not None and server.proc.wait(timeout=60) == 1
    log = server.log_text()
    assert "RuntimeError: CUDA error: out of memory" in log
    assert "RuntimeError: Engine core initialization failed" in log
    assert not any(is_running(pid) for pid in tree_pids(simhost))
    assert used_mib(simhost) == [0] * 8


def test_hang_never_becomes_ready_and_still_stops(simhost: SimHost, servers: FakeServers) -> None:
    server = servers.start(gpus="4", env={"GPUOPS_SIM_FAIL_AT_START": "hang"})
    assert wait_for(lambda: used_mib(simhost)[4] == 4096, timeout=20)
    answers = []
    for _sample in range(5):
        answers.append(server.health())
        time.sleep(0.3)
    assert answers == [503] * 5 and server.proc is not None and server.proc.poll() is None
    status, body = server.request("POST", "/v1/completions", {"prompt": "x"})
    assert status == 503 and json.loads(body)["error"]["type"] == "ServiceUnavailableError"
    assert server.stop(signal.SIGTERM) == 0
    assert wait_for(lambda: used_mib(simhost)[4] == 0)


@pytest.mark.parametrize("env, word", [
    ({"GPUOPS_SIM_TOKENS_PER_S": "fast"}, "GPUOPS_SIM_TOKENS_PER_S"),
    ({"GPUOPS_SIM_FAIL_AT_START": "explode"}, "GPUOPS_SIM_FAIL_AT_START"),
    ({"GPUOPS_SIM_TOKENS_PER_CHUNK": "0"}, "GPUOPS_SIM_TOKENS_PER_CHUNK"),
    ({"GPUOPS_SIM_PREFILL_MS_PER_TOKEN": "-1"}, "GPUOPS_SIM_PREFILL_MS_PER_TOKEN"),
    ({"GPUOPS_SIM_CHAT_ONLY": "maybe"}, "GPUOPS_SIM_CHAT_ONLY"),
])
def test_a_bad_knob_stops_the_start(simhost: SimHost, servers: FakeServers, env: Dict[str, Any], word: str) -> None:
    server = servers.start(gpus="5", env=env)
    assert server.proc is not None and server.proc.wait(timeout=30) == 1
    assert f"ValueError: {word}" in server.log_text()
    assert used_mib(simhost) == [0] * 8 and tree_pids(simhost, ("worker",)) == []


def test_a_taken_port_fails_like_vllm_and_starts_no_worker(simhost: SimHost, servers: FakeServers) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = servers.start(gpus="6", port=taken.getsockname()[1])
        assert server.proc is not None and server.proc.wait(timeout=30) == 1
    assert "Address already in use" in server.log_text()
    assert used_mib(simhost) == [0] * 8 and tree_pids(simhost, ("worker",)) == []
