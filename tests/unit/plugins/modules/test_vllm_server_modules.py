# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's modules as Ansible runs them: bad input fails naming the option and the value, before anything is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuops.fleet.plugins.modules import vllm_drain, vllm_lock, vllm_process, vllm_ready, vllm_server_check
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main, capture


@pytest.fixture(autouse=True)
def captured(monkeypatch):
    capture(monkeypatch)


def run(module, args):
    return call_main(module, args)


@pytest.mark.parametrize("module, args, needle", [
    (vllm_process, {"state": "running", "state_file": "/tmp/x.json", "log_file": "/tmp/x.log", "argv": []}, "argv"),
    (vllm_process, {"state": "running", "state_file": "/tmp/x.json", "argv": ["vllm"]}, "log_file"),
    (vllm_process, {"state": "started", "state_file": "/tmp/x.json"}, "state"),
    (vllm_process, {"state": "stopped", "state_file": "/tmp/x.json", "stop_timeout": -1}, "stop_timeout"),
    (vllm_process, {"state": "stopped", "state_file": "/tmp/x.json", "stop_timeout": 99999}, "stop_timeout"),
    (vllm_ready, {"url": "127.0.0.1:8000"}, "url"),
    (vllm_ready, {"url": "http://127.0.0.1:8000", "timeout": -5}, "timeout"),
    (vllm_ready, {"url": "http://127.0.0.1:8000", "interval": 0}, "interval"),
    (vllm_ready, {"url": "http://127.0.0.1:8000", "pid": 1, "unit": "x.service"}, "pid"),
    (vllm_ready, {"url": "http://127.0.0.1:8000", "create_time": 3.0}, "create_time"),
    (vllm_ready, {"url": "http://127.0.0.1:8000", "generate_timeout": -1}, "generate_timeout"),
    (vllm_drain, {"url": "ftp://host"}, "url"),
    (vllm_drain, {"url": "http://127.0.0.1:1", "timeout": 1e9}, "timeout"),
    (vllm_drain, {"url": "http://127.0.0.1:1", "interval": 0}, "interval"),
    (vllm_lock, {"path": "/tmp/l", "token": "  "}, "token"),
    (vllm_lock, {"path": "/tmp/l", "token": "t", "stale_after": 0}, "stale_after"),
    (vllm_lock, {"path": "/tmp/l", "token": "t", "state": "open"}, "state"),
    (vllm_server_check, {"pid": 1, "gpus": [], "tensor_parallel_size": 1}, "gpus"),
    (vllm_server_check, {"pid": 1, "gpus": [0, 0], "tensor_parallel_size": 2}, "gpus"),
    (vllm_server_check, {"pid": 1, "gpus": [-1], "tensor_parallel_size": 1}, "gpus"),
    (vllm_server_check, {"pid": 1, "gpus": [0], "tensor_parallel_size": 0}, "tensor_parallel_size"),
    (vllm_server_check, {"pid": 0, "gpus": [0], "tensor_parallel_size": 1}, "pid"),
    (vllm_server_check, {"pid": 1, "gpus": ["zero"], "tensor_parallel_size": 1}, "gpus"),
])
def test_bad_input_names_the_option(module, args, needle):
    result = run(module, args)
    assert result["failed"] and needle in result["msg"], result


def test_malformed_record_is_refused_and_nothing_is_signalled(tmp_path):
    state = tmp_path / "vllm-8000.json"
    state.write_text(json.dumps({"pid": os.getpid()}))
    result = run(vllm_process, {"state": "stopped", "state_file": str(state)})
    assert result["failed"] and str(state) in result["msg"]
    assert state.exists()


def test_running_launches_then_is_idempotent_then_refuses_another_configuration_then_stops(tmp_path):
    state, log = str(tmp_path / "s.json"), str(tmp_path / "s.log")
    args = {"state": "running", "state_file": state, "log_file": log, "config_hash": "h1",
            "argv": [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"], "env": {"X": 1}}
    first = run(vllm_process, args)
    try:
        assert first["changed"] and first["launched"] and first["pid"]
        assert open("/proc/%d/environ" % first["pid"], "rb").read().split(b"\0").count(b"X=1") == 1
        again = run(vllm_process, args)
        assert not again["changed"] and again["pid"] == first["pid"]
        other = run(vllm_process, dict(args, config_hash="h2"))
        assert other["failed"] and "another configuration" in other["msg"]
        status = run(vllm_process, {"state": "status", "state_file": state, "config_hash": "h2"})
        assert status["running"] and status["config_matches"] is False
    finally:
        stopped = run(vllm_process, {"state": "stopped", "state_file": state})
    assert stopped["changed"] and [s["pid"] for s in stopped["stopped"]] == [first["pid"]]
    assert not os.path.exists(state)
    assert subprocess.run(["kill", "-0", str(first["pid"])], capture_output=True, check=False).returncode != 0 or \
        open("/proc/%d/stat" % first["pid"]).read().split(")")[1].split()[0] == "Z"


DEAD_BODY = json.dumps({"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                                  "type": "EngineDeadError", "param": None, "code": 500}}).encode()
GOOD_BODY = json.dumps({"choices": [{"text": " a b c d"}], "usage": {"completion_tokens": 4}}).encode()


@pytest.fixture
def api_server():
    """A loopback server that answers /health and /v1/models like a ready vLLM serving model m (with key k), and each
    completion with the next (status, body) of ``answers``; ``asked`` counts the completions."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # pylint: disable=import-outside-toplevel
    import threading  # pylint: disable=import-outside-toplevel
    state = {"answers": [], "asked": 0, "keys": []}

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status, body):
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802
            if self.path == "/health":
                self._send(200, b"")
            else:
                self._send(200, json.dumps({"object": "list", "data": [{"id": "m"}]}).encode())

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            state["asked"] += 1
            state["keys"].append(self.headers.get("Authorization"))
            self._send(*state["answers"].pop(0))

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    state["url"] = "http://127.0.0.1:%d" % httpd.server_address[1]
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_ready_fails_on_a_dead_engine_and_keeps_nothing_as_good(api_server, tmp_path):
    """/health and /v1/models answer, the completion is HTTP 500 EngineDeadError: the task fails naming the generation
    check and the answer, the key masked; the last known-good file is not written and the lock is not released."""
    state_file = tmp_path / "vllm-8000.json"
    lock = tmp_path / "vllm-8000.lock"
    lock.write_text(json.dumps({"token": "t1"}))
    config = {"argv": ["vllm", "serve", "m"], "env": {"NCCL_PROTO": "LL"}, "gpus": [0], "config_hash": "abc", "model": "m",
              "served_name": "m", "mode": "process", "tensor_parallel_size": 1, "port": 8000, "name": "vllm-8000"}
    args = {"url": api_server["url"], "model": "m", "api_key": "k-secret", "generate_timeout": 10,
            "mark_good": {"state_file": str(state_file), "config": config},
            "release_lock": {"path": str(lock), "token": "t1"}}
    api_server["answers"] = [(500, DEAD_BODY)]
    result = run(vllm_ready, args)
    assert result["failed"] and result["ready"] is False, result
    assert result["msg"].startswith("generation check failed: a completion of 4 tokens from %s/v1/completions" % api_server["url"])
    assert "got HTTP 500" in result["msg"] and "EngineDeadError" in result["msg"]
    assert result["generation"]["status"] == 500 and result["generation"]["tokens"] == 0
    assert api_server["asked"] == 1 and api_server["keys"] == ["Bearer k-secret"]
    assert not (tmp_path / "vllm-8000.last-good").exists() and "marked_good" not in result
    assert lock.exists() and "released" not in result

    api_server["answers"] = [(200, GOOD_BODY)]
    result = run(vllm_ready, args)
    assert not result["failed"] and result["ready"] and result["generation"]["tokens"] == 4, result
    assert result["marked_good"] and json.loads((tmp_path / "vllm-8000.last-good").read_text())["config_hash"] == "abc"

    # generate_timeout=0: no completion is sent (a server that cannot generate)
    result = run(vllm_ready, dict(args, generate_timeout=0, mark_good=None, release_lock=None))
    assert result["ready"] and "generation" not in result and api_server["asked"] == 2


@pytest.fixture
def recorded_server(tmp_path):
    """A process launched and recorded by vllm_process (config hash h1), stopped at the end: the server a reading reads."""
    state = str(tmp_path / "s.json")
    launched = run(vllm_process, {"state": "running", "state_file": state, "log_file": str(tmp_path / "s.log"), "config_hash": "h1",
                                  "argv": [sys.executable, "-c", "import time; time.sleep(60)"]})
    assert launched["launched"], launched
    try:
        yield state
    finally:
        run(vllm_process, {"state": "stopped", "state_file": state})


def test_status_with_generate_tells_a_dead_engine_behind_a_live_health(api_server, recorded_server):
    """The reading that decides whether a running server is left alone: it answers /health, and only a completion tells
    that its engine is dead. Nothing is asked of a server that differs or fails /health, nor with timeout 0."""
    url = api_server["url"]
    args = {"state": "status", "state_file": recorded_server, "config_hash": "h1", "health_url": url + "/health",
            "generate": {"url": url, "model": "m", "api_key": "k-secret", "timeout": 10}}
    api_server["answers"] = [(500, DEAD_BODY), (200, GOOD_BODY)]
    dead = run(vllm_process, args)
    assert dead["running"] and dead["healthy"] and dead["generates"] is False, dead
    assert dead["generation"]["status"] == 500 and dead["generation"]["problem"] == "HTTP 500"
    assert "EngineDeadError" in dead["generation"]["answer"] and "k-secret" not in json.dumps(dead)
    assert api_server["keys"] == ["Bearer k-secret"]
    good = run(vllm_process, args)
    assert good["generates"] is True and good["generation"]["tokens"] == 4 and api_server["asked"] == 2

    for other in ({"config_hash": "h2"}, {"health_url": "http://127.0.0.1:9/health"},
                  {"generate": dict(args["generate"], timeout=0)}, {"generate": None}):
        result = run(vllm_process, dict(args, **other))
        assert result["generates"] is None and result["generation"] is None, (other, result)
    assert api_server["asked"] == 2  # none of them sent a completion
    # the other states act on the record, whatever the server answers: no completion either
    run(vllm_process, dict(args, state="running", argv=["true"], log_file=recorded_server + ".log"))
    assert api_server["asked"] == 2


def test_the_lock_reads_generation_under_it(api_server, recorded_server, tmp_path):
    url = api_server["url"]
    api_server["answers"] = [(500, DEAD_BODY)]
    status = {"state_file": recorded_server, "config_hash": "h1", "health_url": url + "/health",
              "generate": {"url": url, "model": "m", "timeout": 10}}
    result = run(vllm_lock, {"path": str(tmp_path / "l"), "token": "t1", "status": status})
    assert result["acquired"] and result["status"]["generates"] is False, result
    assert "EngineDeadError" in result["status"]["generation"]["answer"] and api_server["asked"] == 1
    run(vllm_lock, {"path": str(tmp_path / "l"), "token": "t1", "state": "unlocked"})


@pytest.mark.parametrize("module, args, needle", [
    (vllm_process, {"state_file": "/tmp/x.json", "generate": {"url": "127.0.0.1:8000"}}, "generate.url"),
    (vllm_process, {"state_file": "/tmp/x.json", "generate": {"url": "http://h:1", "timeout": -1}}, "generate.timeout"),
    (vllm_lock, {"token": "t", "status": {"state_file": "/tmp/x.json", "generate": {"url": "h:1"}}}, "status.generate.url"),
    (vllm_lock, {"token": "t", "status": {"state_file": "/tmp/x.json", "generate": {"url": "http://h:1", "timeout": 1e9}}},
     "status.generate.timeout"),
])
def test_a_bad_generate_option_is_named(module, args, needle, tmp_path):
    lock = tmp_path / "never.lock"
    result = run(module, dict(args, path=str(lock)) if module is vllm_lock else args)
    assert result["failed"] and needle in result["msg"], result
    assert not lock.exists()  # refused before the lock


def test_ready_without_a_wait_is_one_generation_check(api_server):
    """The systemd reading's use of vllm_ready (timeout 0, after /health answered): one poll and one completion, the
    dead engine's answer in the failed result's generation, nothing waited for."""
    api_server["answers"] = [(500, DEAD_BODY), (200, GOOD_BODY)]
    args = {"url": api_server["url"], "model": "m", "timeout": 0, "generate_timeout": 10}
    dead = run(vllm_ready, args)
    assert dead["failed"] and dead["generation"]["ok"] is False and dead["generation"]["problem"] == "HTTP 500", dead
    assert "EngineDeadError" in dead["generation"]["answer"] and dead["elapsed_s"] < 5
    good = run(vllm_ready, args)
    assert good["ready"] and good["generation"]["ok"] and api_server["asked"] == 2, good
