# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_secured against a real listener that this test starts (a keyed process on a loopback port): its result and
warnings name the key and the dropped secrets, never a value."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import listening_pid
from ansible_collections.gpuops.fleet.plugins.modules import vllm_secured
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import run_module

psutil = pytest.importorskip("psutil")

KEY = "sk-secret456"
TOKEN = "hf_secret123"
# listens on a free loopback port, prints it, sleeps (its argv and environment are what the module reads)
SERVER = """
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(60)
"""


@pytest.fixture
def keyed_listener():
    """(port, PID) of a process started with --api-key KEY and HF_TOKEN in its environment."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin"), "HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"}
    proc = subprocess.Popen([sys.executable, "-c", SERVER, "--api-key", KEY], stdout=subprocess.PIPE, env=env)
    try:
        yield int(proc.stdout.readline()), proc.pid
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def test_a_configuration_without_a_key_opens_the_keyed_listener_and_drops_its_token(keyed_listener, monkeypatch):
    port, pid = keyed_listener
    result = run_module(vllm_secured, {"port": port, "env_names": ["NCCL_PROTO"]}, monkeypatch)
    text = json.dumps(result)
    assert result["opens"] is True and result["running_key"] == "--api-key" and result["new_key"] is None
    assert result["dropped_secret_env"] == ["HF_TOKEN"]
    assert result["listener"]["pid"] == pid and result["listener"]["env_read"] is True
    assert "********" in result["listener"]["cmdline"]
    assert len(result["warnings"]) == 1 and "HF_TOKEN" in result["warnings"][0]
    assert KEY not in text and TOKEN not in text and result["changed"] is False


def test_the_same_key_kept_through_the_environment_and_the_token_kept_by_inheritance(keyed_listener, monkeypatch):
    port, _pid = keyed_listener
    monkeypatch.setenv("HF_TOKEN", "inherited")  # a detached process inherits the task's environment (inherit_env)
    result = run_module(vllm_secured, {"port": port, "env_names": ["VLLM_API_KEY"], "inherit_env": True}, monkeypatch)
    assert result["opens"] is False and result["new_key"] == "VLLM_API_KEY" and result["dropped_secret_env"] == []
    assert result["warnings"] == []
    # not inherited (a systemd unit): HF_TOKEN goes, and the warning says so
    result = run_module(vllm_secured, {"port": port, "env_names": ["VLLM_API_KEY"]}, monkeypatch)
    assert result["dropped_secret_env"] == ["HF_TOKEN"] and len(result["warnings"]) == 1 and "HF_TOKEN" in result["warnings"][0]


def test_nothing_listening_is_no_failure(monkeypatch):
    port = next(candidate for candidate in range(47000, 47100) if listening_pid(psutil, candidate) is None)
    result = run_module(vllm_secured, {"port": port}, monkeypatch)
    assert result["listener"] is None and result["opens"] is False and not result.get("failed")


def test_a_port_out_of_range_is_named(monkeypatch):
    result = run_module(vllm_secured, {"port": 70000}, monkeypatch)
    assert result["failed"] and "port" in result["msg"] and "70000" in result["msg"]
