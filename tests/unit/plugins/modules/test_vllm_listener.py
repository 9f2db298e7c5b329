# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_listener, vllm_lock's status.listener and vllm_process's takeover, on real processes this test starts: a bash that
runs a listener named like `vllm serve` (ended by the test's Popen handle and by PID)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.modules import vllm_listener, vllm_lock, vllm_process
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main, capture
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.fake_systemctl import FakeSystemctl

psutil = pytest.importorskip("psutil")

# `vllm serve` in its title (the script's name), with a child that inherits the socket, as vLLM's engine core does
SERVER = """
import os, socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[2]))); s.listen()
if os.fork() == 0:
    time.sleep(120); os._exit(0)
time.sleep(120)
"""


@pytest.fixture(autouse=True)
def captured(monkeypatch):
    capture(monkeypatch)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def hand_started(tmp_path):
    """bash -> `python .../vllm serve PORT` (-> its child); yields (bash, server PID, port); ends what is left."""
    script = tmp_path / "vllm"
    script.write_text(SERVER)
    port = free_port()
    shell = subprocess.Popen(["bash", "-c", "%s %s serve %d --api-key sk-unit-secret; sleep 120" % (sys.executable, script, port)],
                             start_new_session=True)
    deadline = time.monotonic() + 20
    server = None
    while time.monotonic() < deadline and server is None:
        children = psutil.Process(shell.pid).children()
        listening = children and any(c.status == "LISTEN" and c.laddr.port == port for c in psutil.net_connections("tcp"))
        server = children[0].pid if listening else None
        time.sleep(0.05)
    assert server is not None, "the server never listened"
    yield shell, server, port
    for child in psutil.Process(shell.pid).children(recursive=True) if shell.poll() is None else []:
        child.kill()
    if shell.poll() is None:
        shell.kill()
    shell.wait()


@pytest.mark.parametrize("args, needle", [
    ({"port": 0}, "port"),
    ({"port": 70000}, "port"),
    ({"port": 8000, "match": ["("]}, "match"),
    ({"port": 8000, "match": [""]}, "match"),
])
def test_bad_input_names_the_option(args, needle):
    result = call_main(vllm_listener, args)
    assert result["failed"] and needle in result["msg"], result


def test_nothing_listens():
    result = call_main(vllm_listener, {"port": free_port()})
    assert not result.get("failed") and result["listener"] is None and "nothing listens" in result["msg"]


def test_a_server_under_a_live_shell_is_taken_over_and_its_tree_stopped_but_not_its_shell(hand_started, tmp_path, monkeypatch):
    shell, server, port = hand_started
    # the role's own unit, which systemd does not know (a fake systemctl): its stop finds nothing to do
    fake = FakeSystemctl(str(tmp_path / "systemctl"), str(tmp_path / "units"))
    monkeypatch.setenv("PATH", fake.bin + ":" + os.environ["PATH"])
    own = {"mode": "systemd", "unit": "gpuops-vllm-%d.service" % port}
    found = call_main(vllm_listener, {"port": port})["listener"]
    assert (found["pid"], found["how"], found["by"], found["vllm"], found["takeover"]) == (server, "shell", shell.pid, True, True)
    assert "sk-unit-secret" not in json.dumps(found) and "--api-key ********" in found["command"]
    assert found["tree"] == [c.pid for c in psutil.Process(server).children(recursive=True)] and len(found["tree"]) == 1
    # not vLLM by these patterns: refused, naming it
    other = call_main(vllm_listener, {"port": port, "match": ["^nginx"]})["listener"]
    assert not other["takeover"] and "not a vLLM server" in other["refusal"] and "PID %d" % server in other["refusal"]

    # the lock's status reads the same, in its own call
    lock = call_main(vllm_lock, {"path": str(tmp_path / "s.lock"), "token": "t1",
                                 "status": {"state_file": str(tmp_path / "s.json"), "listener": {"port": port}}})
    assert lock["acquired"] and lock["status"]["listener"]["pid"] == server and lock["status"]["running"] is False

    # another start time: nothing is signalled
    record = tmp_path / "s.json"
    # the role's record in systemd mode is its unit's configuration, no process record: a takeover neither reads nor touches it
    unit_record = json.dumps({"unit": "gpuops-vllm-%d.service" % port, "config_hash": "c0ffee", "argv": ["vllm", "serve"]})
    record.write_text(unit_record)
    wrong = call_main(vllm_process, {"state": "stopped", "state_file": str(record), **own,
                                     "takeover": {"pid": server, "create_time": found["create_time"] - 100}})
    assert not wrong["changed"] and psutil.pid_exists(server)
    stopped = call_main(vllm_process, {"state": "stopped", "state_file": str(record), "stop_timeout": 5, **own,
                                       "takeover": {"pid": server, "create_time": found["create_time"]}})
    assert stopped["changed"] and sorted(s["pid"] for s in stopped["stopped"]) == sorted([server] + found["tree"])
    assert stopped["takeover_stopped"]["stopped"] == stopped["stopped"] and stopped["takeover_stopped"]["unit_disabled"] is False
    for pid in [server] + found["tree"]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert shell.poll() is None, "the shell that started the server was ended"
    assert call_main(vllm_listener, {"port": port})["listener"] is None
    assert record.read_text() == unit_record


def test_the_lock_refuses_a_listener_it_may_not_take_over_and_releases_itself(hand_started, tmp_path):
    """The lock's status reading judges the listener: one that is not vLLM fails the task naming it, nothing is stopped
    and the lock just taken is released."""
    _shell, server, port = hand_started
    lock = tmp_path / "s.lock"
    result = call_main(vllm_lock, {"path": str(lock), "token": "t1",
                                   "status": {"state_file": str(tmp_path / "s.json"), "listener": {"port": port, "match": ["^nginx"]},
                                              "decide": {"state": "started"}}})
    assert result["failed"] and result["msg"].startswith("vllm_server: nothing was stopped: port %d is held by PID %d" % (port, server))
    assert not lock.exists() and result["released"] and not result["acquired"]
    assert result["status"]["takeover"]["pid"] == server and result["status"]["reason"] == "no managed server ran"
    assert psutil.pid_exists(server) and psutil.Process(server).status() != psutil.STATUS_ZOMBIE
