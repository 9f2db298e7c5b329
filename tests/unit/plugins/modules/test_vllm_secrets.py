# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The role's modules keep secrets out of what Ansible prints: the JSON each module writes (exit_json as Ansible
runs it, invocation included), its record and its log; the other values stay readable."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuops.fleet.plugins.module_utils._server import check as _server_check
from ansible_collections.gpuops.fleet.plugins.modules import vllm_process, vllm_ready, vllm_server_check
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import LoopbackServer

TOKEN = "hf_secret123"
KEY = "sk-secret456"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def run_printed(module, args, capsys):
    """Run the module's main() with Ansible's own exit_json/fail_json; return the JSON it printed, and its text."""
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    text = capsys.readouterr().out
    return json.loads(text), text


def test_process_launch_result_record_and_log_hold_no_secret(tmp_path, capsys):
    state, log = tmp_path / "s.json", tmp_path / "logs" / "s.log"
    args = {"state": "running", "state_file": str(state), "log_file": str(log), "config_hash": "h1",
            "argv": SLEEPER + ["--api-key", KEY, "--port", "8000"],
            "env": {"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL", "MY_PAT": "pat-789", "VLLM_USE_V1": "1"}, "secret_env": ["MY_PAT"]}
    result, text = run_printed(vllm_process, args, capsys)
    pid = result.get("pid")
    try:
        assert result["launched"] and pid, text
        for secret in (TOKEN, KEY, "pat-789"):
            assert secret not in text
            assert secret not in state.read_text() and secret not in log.read_text()
        # the environment really reached the server
        environ = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
        assert b"HF_TOKEN=" + TOKEN.encode() in environ and b"MY_PAT=pat-789" in environ
        # non-secret values stay readable: no "V********M" from a no_log value such as LL or 1
        invocation = result["invocation"]["module_args"]
        assert invocation["env"]["NCCL_PROTO"] == "LL" and invocation["env"]["VLLM_USE_V1"] == "1"
        assert invocation["argv"][-4:] == ["--api-key", "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER", "--port", "8000"]
        assert result["env_keys"] == ["HF_TOKEN", "MY_PAT", "NCCL_PROTO", "VLLM_USE_V1"]
        assert result["secret_env_keys"] == ["HF_TOKEN", "MY_PAT"]
        assert "launched PID %d" % pid in result["msg"]
        assert json.loads(state.read_text())["argv"][-4:] == ["--api-key", "********", "--port", "8000"]
        assert "--api-key ******** --port 8000" in log.read_text()
        assert os.stat(state).st_mode & 0o777 == 0o600 and os.stat(log).st_mode & 0o777 == 0o600

        status, text = run_printed(vllm_process, {"state": "status", "state_file": str(state)}, capsys)
        assert status["running"] and status["record"]["argv"][-3] == "********" and KEY not in text
    finally:
        if pid:
            stopped, _text = run_printed(vllm_process, {"state": "stopped", "state_file": str(state), "stop_timeout": 5}, capsys)
            assert stopped["changed"]


def test_an_older_log_readable_by_others_is_closed(tmp_path, capsys):
    state, log = tmp_path / "s.json", tmp_path / "s.log"
    log.write_text("earlier\n")
    os.chmod(log, 0o644)
    result, _text = run_printed(vllm_process, {"state": "running", "state_file": str(state), "log_file": str(log),
                                               "argv": SLEEPER}, capsys)
    try:
        assert result["launched"] and os.stat(log).st_mode & 0o777 == 0o600
        assert log.read_text().startswith("earlier\n")
    finally:
        run_printed(vllm_process, {"state": "stopped", "state_file": str(state), "stop_timeout": 5}, capsys)


class Proc:
    pid = 4242

    def __init__(self, environ):
        self._environ = environ

    def environ(self):
        return self._environ


class NoPsutil:
    Error = OSError


@pytest.mark.parametrize("actual, ok, shown", [
    ({"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL", "PAT": "p"}, True,
     "PID 4242 runs with HF_TOKEN (secret, as configured), NCCL_PROTO=LL, PAT (secret, as configured)"),
    ({"HF_TOKEN": "hf_other999", "NCCL_PROTO": "LL", "PAT": "p"}, False,
     "PID 4242 runs with HF_TOKEN differs from its configured secret value"),
    ({"NCCL_PROTO": "LL128", "PAT": "q"}, False,
     "PID 4242 runs with HF_TOKEN is not set (expected a secret value); NCCL_PROTO='LL128' (expected 'LL');"
     " PAT differs from its configured secret value"),
])
def test_environment_check_compares_secrets_but_names_them_only(actual, ok, shown):
    check = _server_check._environment_check(NoPsutil, Proc(actual), {"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL", "PAT": "p"}, ["PAT"])
    assert check.ok is ok and check.detail == shown
    assert TOKEN not in check.detail and "hf_other999" not in check.detail and "'p'" not in check.detail


def test_check_module_hides_secret_values_only(capsys):
    result, text = run_printed(vllm_server_check, {"pid": 0, "gpus": [0], "tensor_parallel_size": 1,
                                                   "env": {"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"}}, capsys)
    assert result["failed"] and "pid" in result["msg"]
    assert TOKEN not in text and result["invocation"]["module_args"]["env"]["NCCL_PROTO"] == "LL"


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
