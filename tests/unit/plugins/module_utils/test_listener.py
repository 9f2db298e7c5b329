# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The listener on a port and its /proc readings, on real processes this test starts (and ends by their Popen)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import (
    ListenerError, listening_pid, read_cgroup, read_environ)

psutil = pytest.importorskip("psutil")

# a parent that listens, then forks a child that inherits the socket (as vLLM's engine core does); prints the port
SERVER = """
import os, socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 0)); s.listen()
if os.fork() == 0:
    time.sleep(60); os._exit(0)
print(s.getsockname()[1], flush=True); time.sleep(60)
"""


@pytest.fixture
def started():
    procs = []
    yield procs
    for proc in procs:
        for child in psutil.Process(proc.pid).children() if proc.poll() is None else []:
            child.kill()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_the_listener_is_the_top_of_the_processes_holding_the_socket(started):
    proc = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, env=dict(os.environ, CANARY_VAR="x=y"))
    started.append(proc)
    port = int(proc.stdout.readline())
    deadline = time.monotonic() + 5
    while len(psutil.Process(proc.pid).children()) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert listening_pid(psutil, port) == proc.pid
    assert read_environ(proc.pid)["CANARY_VAR"] == "x=y"
    assert read_cgroup(proc.pid) is not None


def test_nothing_listening_is_none():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert listening_pid(psutil, port) is None


def test_two_unrelated_listeners_are_an_error(started):
    code = ("import socket, sys, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1);"
            "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); print('ok', flush=True); time.sleep(60)")
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        started.extend(subprocess.Popen([sys.executable, "-c", code, str(port)], stdout=subprocess.PIPE) for side in "ab")
        assert [proc.stdout.readline().strip() for proc in started] == [b"ok", b"ok"]
    with pytest.raises(ListenerError, match="port %d: 2 unrelated" % port):
        listening_pid(psutil, port)


def test_readings_of_a_missing_pid_are_none(tmp_path):
    assert read_environ(4242, proc_root=str(tmp_path)) is None
    assert read_cgroup(4242, proc_root=str(tmp_path)) is None


def test_cgroup_prefers_the_unified_hierarchy(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text("12:pids:/user.slice\n1:name=systemd:/system.slice/x.service\n0::/system.slice/vllm.service\n")
    assert read_cgroup(7, proc_root=str(tmp_path)) == "/system.slice/vllm.service"
    (tmp_path / "7" / "cgroup").write_text("12:pids:/a\n1:name=systemd:/system.slice/x.service\n")
    assert read_cgroup(7, proc_root=str(tmp_path)) == "/system.slice/x.service"
