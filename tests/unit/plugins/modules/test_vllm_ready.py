# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_ready as Ansible runs it: bad input fails naming the option; the generation check (a dead engine fails the task
and keeps nothing as good); the API key sent and never shown; with a systemd unit (a fake systemctl on PATH), the launch
check, the last known-good mark and the lock's release run on the unit's main PID read once it is ready, and the task
returns the PID it judged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.modules import vllm_process, vllm_ready, vllm_server_check
from ansible_collections.gpuops.fleet.plugins.module_utils._server import ready
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main, capture, documented_options, environ_of, run_printed
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.vllm_answers import DEAD_BODY, GOOD_BODY
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_systemctl import FakeSystemctl
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import LoopbackServer

psutil = pytest.importorskip("psutil")

KEY = "sk-secret456"
UNIT = "gpuops-vllm-8000.service"


@pytest.fixture
def unit_running(tmp_path, monkeypatch):
    """A unit the fake systemctl started (a real `sleep` as its main process) and a server that answers /health."""
    capture(monkeypatch)
    fake = FakeSystemctl(str(tmp_path / "systemctl"), str(tmp_path / "units"))
    monkeypatch.setenv("PATH", fake.bin + os.pathsep + os.environ["PATH"])
    fake.set_unit(UNIT)
    subprocess.run([os.path.join(fake.bin, "systemctl"), "start", UNIT], check=True)
    server = LoopbackServer(lambda handler, body: (200, b""))
    try:
        yield fake, server
    finally:
        server.close()
        fake.end_all()


def test_the_check_mark_and_release_run_on_the_units_main_pid(unit_running, tmp_path, monkeypatch):
    fake, server = unit_running
    main = int(fake.units()[UNIT]["MainPID"])
    judged = []

    def launch_check(pynvml, psutil_, pid, create_time, gpus, size, env, secret_env=()):
        judged.append((pid, create_time))
        return {"ok": True, "checks": [], "workers": [], "msg": "PID %d: held" % pid}
    monkeypatch.setattr(ready, "run_launch_check", launch_check)
    monkeypatch.setattr(ready, "_deps", type("Deps", (), {
        "PSUTIL": type("D", (), {"module": psutil})(), "PYNVML": type("D", (), {"module": object()})(),
        "require": staticmethod(lambda module, *deps: None)}))
    lock = tmp_path / "s.lock"
    lock.write_text(json.dumps({"token": "t1"}))
    config = {"argv": ["vllm", "serve", "m"], "env": {}, "gpus": [0], "config_hash": "abc", "model": "m", "served_name": "m",
              "mode": "systemd", "tensor_parallel_size": 1, "port": 8000, "name": "vllm-8000"}
    result = call_main(vllm_ready, {"url": server.url, "unit": UNIT, "generate_timeout": 0,
                                    "check": {"gpus": [0], "tensor_parallel_size": 1},
                                    "mark_good": {"state_file": str(tmp_path / "s.json"), "config": config},
                                    "release_lock": {"path": str(lock), "token": "t1"}})
    assert result["ready"] and not result["failed"], result
    assert judged == [(main, psutil.Process(main).create_time())]
    assert result["pid"] == main and result["create_time"] == psutil.Process(main).create_time()
    assert result["check"]["ok"] and result["marked_good"] and (tmp_path / "s.last-good").exists()
    assert result["released"] and not lock.exists()


def test_a_ready_unit_without_a_main_pid_cannot_be_checked(unit_running, monkeypatch):
    fake, server = unit_running
    fake.end_all()
    fake.set_unit(UNIT, ActiveState="active", MainPID=0)
    result = call_main(vllm_ready, {"url": server.url, "unit": UNIT, "generate_timeout": 0,
                                    "check": {"gpus": [0], "tensor_parallel_size": 1}})
    assert result["failed"] and result["msg"].startswith("check: needs the server's process") and result["pid"] is None


@pytest.mark.usefixtures("captured")
@pytest.mark.parametrize("args, needle", [
    ({"url": "127.0.0.1:8000"}, "url"),
    ({"url": "http://127.0.0.1:8000", "timeout": -5}, "timeout"),
    ({"url": "http://127.0.0.1:8000", "interval": 0}, "interval"),
    ({"url": "http://127.0.0.1:8000", "pid": 1, "unit": "x.service"}, "pid"),
    ({"url": "http://127.0.0.1:8000", "create_time": 3.0}, "create_time"),
    ({"url": "http://127.0.0.1:8000", "generate_timeout": -1}, "generate_timeout"),
])
def test_bad_input_names_the_option(args, needle):
    result = call_main(vllm_ready, args)
    assert result["failed"] and needle in result["msg"], result


@pytest.mark.usefixtures("captured")
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
    result = call_main(vllm_ready, args)
    assert result["failed"] and result["ready"] is False, result
    assert result["msg"].startswith("generation check failed: a completion of 4 tokens from %s/v1/completions" % api_server["url"])
    assert "got HTTP 500" in result["msg"] and "EngineDeadError" in result["msg"]
    assert result["generation"]["status"] == 500 and result["generation"]["tokens"] == 0
    assert api_server["asked"] == 1 and api_server["keys"] == ["Bearer k-secret"]
    assert not (tmp_path / "vllm-8000.last-good").exists() and "marked_good" not in result
    assert lock.exists() and "released" not in result

    api_server["answers"] = [(200, GOOD_BODY)]
    result = call_main(vllm_ready, args)
    assert not result["failed"] and result["ready"] and result["generation"]["tokens"] == 4, result
    assert result["marked_good"] and json.loads((tmp_path / "vllm-8000.last-good").read_text())["config_hash"] == "abc"

    # generate_timeout=0: no completion is sent (a server that cannot generate)
    result = call_main(vllm_ready, dict(args, generate_timeout=0, mark_good=None, release_lock=None))
    assert result["ready"] and "generation" not in result and api_server["asked"] == 2


@pytest.mark.usefixtures("captured")
def test_ready_without_a_wait_is_one_generation_check(api_server):
    """The systemd reading's use of vllm_ready (timeout 0, after /health answered): one poll and one completion, the
    dead engine's answer in the failed result's generation, nothing waited for."""
    api_server["answers"] = [(500, DEAD_BODY), (200, GOOD_BODY)]
    args = {"url": api_server["url"], "model": "m", "timeout": 0, "generate_timeout": 10}
    dead = call_main(vllm_ready, args)
    assert dead["failed"] and dead["generation"]["ok"] is False and dead["generation"]["problem"] == "HTTP 500", dead
    assert "EngineDeadError" in dead["generation"]["answer"] and dead["elapsed_s"] < 5
    good = call_main(vllm_ready, args)
    assert good["ready"] and good["generation"]["ok"] and api_server["asked"] == 2, good


def keyed_answer(handler, raw):
    """As vLLM with --api-key: /health open, /v1/models and the ready step's completion only with the key."""
    if handler.command == "GET" and handler.path == "/health":
        return 200, b""
    if handler.headers.get("Authorization") != "Bearer " + KEY:
        return 401, b'{"error": "Unauthorized"}'
    if handler.command == "POST":
        return 200, b'{"choices": [{"text": " a b"}], "usage": {"completion_tokens": 2}}'
    return 200, b'{"data": [{"id": "org/m"}]}'


def asked(server):
    """What the keyed server was asked: (path, Authorization header), a POST's path prefixed with "POST "."""
    return [(request[1] if request[0] == "GET" else "%s %s" % request[:2], request[2].get("Authorization")) for request in server.seen]


@pytest.fixture
def keyed():
    server = LoopbackServer(keyed_answer)
    yield server
    server.close()


def test_ready_sends_the_key_and_never_shows_it(keyed, capsys):
    result, text = run_printed(vllm_ready, {"url": keyed.url, "model": "org/m", "api_key": KEY, "timeout": 10}, capsys)
    assert result["ready"] and KEY not in text
    assert ("/v1/models", "Bearer " + KEY) in asked(keyed)
    assert ("POST /v1/completions", "Bearer " + KEY) in asked(keyed) and result["generation"]["tokens"] == 2
    assert ("/health", None) in asked(keyed)  # /health needs no key: none is sent there


@pytest.mark.parametrize("key, needle", [(None, "none was given"), ("wrong-key", "does not accept")])
def test_ready_fails_at_once_on_401_naming_api_key(keyed, capsys, key, needle):
    args = {"url": keyed.url, "model": "org/m", "timeout": 60}
    if key:
        args["api_key"] = key
    started = time.monotonic()
    result, text = run_printed(vllm_ready, args, capsys)
    assert result["failed"] and result["msg"].startswith("api_key:") and needle in result["msg"]
    assert time.monotonic() - started < 10 and KEY not in text and "wrong-key" not in text


def test_check_suboptions_are_documented_as_vllm_server_check_documents_its_own():
    """check runs vllm_server_check's launch check: its suboptions are documented word for word as vllm_server_check
    documents its options of those names (O(env) there is O(check.env) here). A doc fragment cannot hold them once for
    both: Ansible merges a fragment into a module's options one level deep, and vllm_ready nests them under check."""
    own = documented_options(vllm_server_check.DOCUMENTATION)
    check = documented_options(vllm_ready.DOCUMENTATION)["check"]["suboptions"]
    assert set(check) == {"gpus", "tensor_parallel_size", "env", "secret_env"}
    for name, option in check.items():
        assert option == json.loads(json.dumps(own[name]).replace("O(env)", "O(check.env)")), name


def test_vllm_process_ready_is_vllm_readys_wait_and_never_shows_the_key(keyed, capsys, tmp_path):
    """vllm_process's ready (the role's ready step, through vllm_ready's action): vllm_ready's result for the same options,
    the key sent and never shown, even in the failure of a bad option."""
    args = {"url": keyed.url, "model": "org/m", "api_key": KEY, "timeout": 10}
    result, text = run_printed(vllm_process, {"state_file": str(tmp_path / "s.json"), "ready": args}, capsys)
    assert result["ready"] and result["generation"]["tokens"] == 2 and KEY not in text, result
    assert ("POST /v1/completions", "Bearer " + KEY) in asked(keyed) and "env_keys" not in result
    bad, text = run_printed(vllm_process, {"state_file": str(tmp_path / "s.json"), "ready": dict(args, timeout=-5)}, capsys)
    assert bad["failed"] and bad["msg"].startswith("timeout") and KEY not in text, bad
    bad, text = run_printed(vllm_process, {"state_file": str(tmp_path / "s.json"), "ready": dict(args, pid=1, unit="x.service")},
                            capsys)
    assert bad["failed"] and bad["msg"].startswith("ready.") and "pid" in bad["msg"] and KEY not in text, bad


def test_vllm_process_launch_waits_for_its_server_in_the_same_run(keyed, capsys, tmp_path):
    """vllm_process's wait (the role's launch): once the launch succeeded, vllm_ready's wait on the server just launched,
    watched by its record's PID, in the same module run; the key never shown; the wait's environment set only after the
    launch (the server never gets it); a bad wait option fails the wait, named under wait., never the launch."""
    state, log = str(tmp_path / "s.json"), str(tmp_path / "s.log")
    launch = {"state": "running", "state_file": state, "log_file": log, "config_hash": "h1",
              "argv": [sys.executable, "-c", "import time; time.sleep(60)"],
              "wait": {"url": keyed.url, "model": "org/m", "api_key": KEY, "timeout": 10, "mode": "process", "state_file": state},
              "wait_environment": {"GPUOPS_TEST_WAIT_ONLY": "canary"}}
    pids = []
    try:
        result, text = run_printed(vllm_process, launch, capsys)
        pids.append(result["pid"])
        assert result["launched"] and not result.get("failed"), result
        waited = result["waited"]
        assert waited["ready"] and waited["failed"] is False and waited["pid"] == result["pid"], waited
        assert waited["alive"] is True and waited["generation"]["tokens"] == 2 and KEY not in text
        assert ("POST /v1/completions", "Bearer " + KEY) in asked(keyed)
        assert not [entry for entry in environ_of(result["pid"]) if entry.startswith(b"GPUOPS_TEST_WAIT_ONLY=")]
        # the module ran in this process (run_printed): the wait had the environment, set after the launch
        assert os.environ.get("GPUOPS_TEST_WAIT_ONLY") == "canary"
    finally:
        os.environ.pop("GPUOPS_TEST_WAIT_ONLY", None)
        run_printed(vllm_process, {"state": "stopped", "state_file": state}, capsys)
    bad = dict(launch, state_file=str(tmp_path / "t.json"), wait=dict(launch["wait"], pid=1, unit="x.service", mode=None))
    try:
        result, text = run_printed(vllm_process, bad, capsys)
        pids.append(result["pid"])
        assert result["launched"] and result["waited"]["failed"] and result["waited"]["msg"].startswith("wait."), result
        assert KEY not in text
    finally:
        os.environ.pop("GPUOPS_TEST_WAIT_ONLY", None)
        run_printed(vllm_process, {"state": "stopped", "state_file": str(tmp_path / "t.json")}, capsys)
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_check_mode_launch_waits_for_nothing(keyed, capsys, tmp_path):
    launch = {"state": "running", "state_file": str(tmp_path / "s.json"), "log_file": str(tmp_path / "s.log"),
              "argv": [sys.executable, "-c", "pass"], "wait": {"url": keyed.url, "timeout": 10}, "_ansible_check_mode": True}
    result, _text = run_printed(vllm_process, launch, capsys)
    assert result["changed"] and "waited" not in result and not keyed.seen, result
