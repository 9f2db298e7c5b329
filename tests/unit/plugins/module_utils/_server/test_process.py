# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Detached launch and stop by record, on real processes."""

from __future__ import annotations

import os
import sys
import time

import psutil
import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.process import LaunchError, launch_detached, stop_tree

# a parent that starts two children and waits; with IGNORE_TERM=1 everyone ignores SIGTERM
TREE = r"""
import os, signal, subprocess, sys, time
if os.environ.get("IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
kids = [subprocess.Popen([sys.executable, "-c", "import signal, os, time\n"
         "if os.environ.get('IGNORE_TERM') == '1': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
         "time.sleep(60)"]) for _ in range(2)]
print("tree up", flush=True)
time.sleep(60)
"""


def _wait_children(pid, count, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(psutil.Process(pid).children(recursive=True)) >= count:
            return
        time.sleep(0.05)
    raise AssertionError("children did not start")


def _launch(tmp_path, **env):
    log = str(tmp_path / "logs" / "server.log")
    pid = launch_detached([sys.executable, "-c", TREE], dict(os.environ, **env), log, str(tmp_path))
    _wait_children(pid, 2)
    return pid, log


def test_launch_is_detached_in_its_own_session_with_output_in_the_log(tmp_path):
    pid, log = _launch(tmp_path)
    try:
        assert os.getsid(pid) == pid and os.getpgid(pid) == pid
        deadline = time.monotonic() + 10
        while "tree up" not in open(log).read() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "launching:" in open(log).read() and "tree up" in open(log).read()
    finally:
        stop_tree(psutil, psutil.Process(pid), 5)


def test_stop_ends_the_whole_tree_with_sigterm(tmp_path):
    pid, _log = _launch(tmp_path)
    members = [pid] + [p.pid for p in psutil.Process(pid).children(recursive=True)]
    stopped = stop_tree(psutil, psutil.Process(pid), 10)
    assert sorted(s.pid for s in stopped) == sorted(members)
    assert {s.pid: s.signal for s in stopped}[pid] == "SIGTERM"
    for member in members:
        assert not psutil.pid_exists(member) or psutil.Process(member).status() == psutil.STATUS_ZOMBIE


def test_stop_escalates_to_sigkill_for_a_tree_that_ignores_sigterm(tmp_path):
    pid, _log = _launch(tmp_path, IGNORE_TERM="1")
    members = [pid] + [p.pid for p in psutil.Process(pid).children(recursive=True)]
    stopped = stop_tree(psutil, psutil.Process(pid), 0.5)
    assert {s.pid for s in stopped} == set(members)
    assert all(s.signal == "SIGKILL" for s in stopped)


def test_launch_of_a_missing_program_names_it(tmp_path):
    with pytest.raises(LaunchError, match="no-such-vllm"):
        launch_detached(["no-such-vllm", "serve"], dict(os.environ), str(tmp_path / "l.log"), None)
