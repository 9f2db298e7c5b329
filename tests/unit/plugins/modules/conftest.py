# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures shared by the unit tests of the vllm_* modules: the harness's capture, a loopback vLLM API server, a server
launched and recorded by vllm_process, and a `vllm serve` started by hand under a shell."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.modules import vllm_process
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import LoopbackServer
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main, capture

MODELS_BODY = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()

# `vllm serve` in its title (the script's name), with a child that inherits the socket, as vLLM's engine core does;
# `serve 0`: on the port the kernel gives, which the fixture reads from the server's socket
HAND_STARTED_SERVER = """
import os, socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[2]))); s.listen()
if os.fork() == 0:
    time.sleep(120); os._exit(0)
time.sleep(120)
"""


@pytest.fixture
def captured(monkeypatch):
    """The module harness's capture (module_harness.capture): exit_json and fail_json end a run with its result."""
    capture(monkeypatch)


@pytest.fixture
def api_server():
    """A loopback server that answers /health and /v1/models like a ready vLLM serving model m, and each completion with
    the next (status, body) of ``answers`` (vllm_answers.py); ``asked`` counts the completions, ``keys`` holds the
    Authorization header of each."""
    state = {"answers": [], "asked": 0, "keys": []}

    def answer(handler, _body):
        if handler.command == "GET":
            return (200, b"") if handler.path == "/health" else (200, MODELS_BODY)
        state["asked"] += 1
        state["keys"].append(handler.headers.get("Authorization"))
        return state["answers"].pop(0)

    server = LoopbackServer(answer)
    state["url"] = server.url
    try:
        yield state
    finally:
        server.close()


@pytest.fixture
def recorded_server(tmp_path, captured):  # pylint: disable=unused-argument,redefined-outer-name
    """A process launched and recorded by vllm_process (config hash h1), stopped at the end: the server a reading reads."""
    state = str(tmp_path / "s.json")
    launched = call_main(vllm_process, {"state": "running", "state_file": state, "log_file": str(tmp_path / "s.log"),
                                        "config_hash": "h1", "argv": [sys.executable, "-c", "import time; time.sleep(60)"]})
    assert launched["launched"], launched
    try:
        yield state
    finally:
        call_main(vllm_process, {"state": "stopped", "state_file": state})


@pytest.fixture
def hand_started(tmp_path):
    """bash -> `python .../vllm serve 0` (-> its child); yields (bash, server PID, the port it listens on); ends what is
    left."""
    psutil = pytest.importorskip("psutil")
    script = tmp_path / "vllm"
    script.write_text(HAND_STARTED_SERVER)
    shell = subprocess.Popen(["bash", "-c", "%s %s serve 0 --api-key sk-unit-secret; sleep 120" % (sys.executable, script)],
                             start_new_session=True)
    deadline = time.monotonic() + 20
    server = port = None
    while time.monotonic() < deadline and server is None:
        for child in psutil.Process(shell.pid).children():
            ports = [c.laddr.port for c in child.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
            server, port = (child.pid, ports[0]) if ports else (None, None)
        time.sleep(0.05)
    assert server is not None, "the server never listened"
    yield shell, server, port
    for child in psutil.Process(shell.pid).children(recursive=True) if shell.poll() is None else []:
        child.kill()
    if shell.poll() is None:
        shell.kill()
    shell.wait()
