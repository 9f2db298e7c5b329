# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake vLLM on SIGTERM/SIGINT: streams cut at once, then vLLM's grace and SIGKILL of the tree.

The API server and EngineCore sleep without any poll: only a signal (or a child's exit) wakes them. A
server that did not handle SIGTERM in its handler would never exit here, so these tests would fail.
"""

from __future__ import annotations

import json
import signal
import threading
from typing import List

import pytest
from gpusim_helpers import FakeServer, FakeServers, SimHost, StreamResult, is_running, wait_for


def held(simhost: SimHost) -> List[int]:
    """MiB per GPU and the holders left, by the simulator's own reading."""
    return [gpu["used_mib"] for gpu in simhost.gpusim_json("status", "--json")["gpus"]]


def tree(simhost: SimHost) -> List[int]:
    return [record.pid for record in simhost.records() if record.role in ("api_server", "engine_core", "worker")]


def long_stream(server: FakeServer, results: List[StreamResult], first_token: threading.Event) -> threading.Thread:
    """A stream of 2,000 tokens (~40 s at the default pace), read in a thread."""

    def run() -> None:
        conn = server.connection(timeout=60)
        try:
            conn.request("POST", "/v1/completions", json.dumps({
                "prompt": "x", "max_tokens": 2000, "ignore_eos": True, "stream": True}))
            response = conn.getresponse()
            result = StreamResult(response.status, dict(response.getheaders()))
            for line in response:
                if line.startswith(b"data: "):
                    result.events.append(line[6:].strip().decode())
                    first_token.set()
            result.cut = None if result.events and result.events[-1] == "[DONE]" else "closed"
            results.append(result)
        finally:
            conn.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("engine_core", [False, True])
def test_sigterm_cuts_streams_and_frees_every_gpu(simhost: SimHost, servers: FakeServers, engine_core: bool) -> None:
    server = servers.start(gpus="0,1,2,3", engine_core=engine_core)
    server.wait_ready()
    assert held(simhost)[:4] == [4096] * 4
    everyone = tree(simhost)
    assert len(everyone) == 5 + engine_core
    results: List[StreamResult] = []
    first_token = threading.Event()
    reader = long_stream(server, results, first_token)
    assert first_token.wait(30)

    assert server.stop(signal.SIGTERM) == 0
    reader.join(30)
    assert not reader.is_alive() and results[0].cut == "closed"  # cut: no [DONE]
    assert 0 < len(results[0].events) < 2000
    assert wait_for(lambda: not any(is_running(pid) for pid in everyone), timeout=10)
    assert held(simhost) == [0] * 8
    assert "received SIGTERM, shutting down" in server.log_text()


def test_sigint_like_ctrl_c(simhost: SimHost, servers: FakeServers) -> None:
    server = servers.start(gpus="5,6", engine_core=True)
    server.wait_ready()
    everyone = tree(simhost)
    assert server.stop(signal.SIGINT) == 0
    assert wait_for(lambda: not any(is_running(pid) for pid in everyone), timeout=10)
    assert held(simhost) == [0] * 8 and "received SIGINT" in server.log_text()


def test_streams_are_cut_before_the_grace_of_stubborn_workers(simhost: SimHost, servers: FakeServers) -> None:
    server = servers.start(gpus="4", env={"GPUOPS_SIM_IGNORE_SIGTERM": "1", "GPUOPS_SIM_SHUTDOWN_GRACE_S": "5"})
    server.wait_ready()
    everyone = tree(simhost)
    results: List[StreamResult] = []
    first_token = threading.Event()
    reader = long_stream(server, results, first_token)
    assert first_token.wait(30)
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    reader.join(30)
    assert results and results[0].cut == "closed"
    assert server.proc.poll() is None  # the stream was cut while the server still waits out its 5 s grace
    assert server.proc.wait(30) == 0
    assert wait_for(lambda: not any(is_running(pid) for pid in everyone), timeout=10)
    assert held(simhost) == [0] * 8
    assert "still alive after 5 s, sending SIGKILL" in server.log_text()


def test_a_worker_that_dies_takes_the_server_down(simhost: SimHost, servers: FakeServers) -> None:
    server = servers.start(gpus="7,0")
    server.wait_ready()
    workers = [record.pid for record in simhost.records() if record.role == "worker"]
    simhost.kill(workers[0], signal.SIGKILL)
    assert server.proc is not None and server.proc.wait(30) == 1  # woken by SIGCHLD, not by a poll
    assert wait_for(lambda: not any(is_running(pid) for pid in workers), timeout=10)
    assert held(simhost) == [0] * 8 and "died unexpectedly" in server.log_text()
