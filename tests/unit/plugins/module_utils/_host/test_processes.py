# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""psutil join on real processes this test starts (and ends, by its own Popen handles)."""

from __future__ import annotations

import getpass
import os
import sys
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import describe_process, describe_processes

psutil = pytest.importorskip("psutil")


@pytest.fixture
def children(child):
    """Start ``python -c CODE ARGS...`` as a real process of this test (the conftest's ``child``, which ends it)."""
    return lambda *args: child(sys.executable, "-c", *args)


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_process_title_shows_whole_not_cut_to_15_characters(children):
    pytest.importorskip("setproctitle")
    child = children("import setproctitle, time; setproctitle.setproctitle('VLLM::Worker_TP0'); time.sleep(60)")
    wait_for(lambda: psutil.Process(child.pid).cmdline()[:1] == ["VLLM::Worker_TP0"])
    got = describe_process(psutil, child.pid)
    assert got["name"] == "VLLM::Worker_TP0"
    assert got["cmdline"] == ["VLLM::Worker_TP0"]  # the NUL padding of the old argv is dropped
    assert got["visible"] is True
    assert got["ppid"] == os.getpid()
    assert got["username"] == getpass.getuser()
    assert got["state"] in ("sleeping", "running")
    assert got["create_time"] == psutil.Process(child.pid).create_time()


def test_plain_command_line_is_kept_as_words(children):
    child = children("import time; time.sleep(60)", "--tensor-parallel-size", "8")
    wait_for(lambda: "8" in psutil.Process(child.pid).cmdline())  # the new image's argv, not a moment of exec
    got = describe_process(psutil, child.pid)
    assert got["cmdline"] == [sys.executable, "-c", "import time; time.sleep(60)", "--tensor-parallel-size", "8"]


def test_zombie_is_visible_with_its_state(children):
    child = children("pass")
    wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE)
    got = describe_process(psutil, child.pid)
    assert got["visible"] is True
    assert got["state"] == "zombie"


def test_pid_this_namespace_cannot_see_is_invisible_with_nulls():
    with open("/proc/sys/kernel/pid_max") as handle:
        missing = int(handle.read()) + 1  # above pid_max: no process can have it
    assert describe_process(psutil, missing) == {
        "name": None, "cmdline": None, "username": None, "state": None, "ppid": None, "create_time": None, "visible": False,
    }


def test_each_pid_is_described_once():
    seen = []

    class CountingPsutil:
        NoSuchProcess = psutil.NoSuchProcess

        @staticmethod
        def Process(pid):  # noqa: N802  (psutil's name)
            seen.append(pid)
            return psutil.Process(pid)

    got = describe_processes(CountingPsutil, [os.getpid(), os.getpid(), os.getppid()])
    assert sorted(seen) == sorted({os.getpid(), os.getppid()})
    assert set(got) == {os.getpid(), os.getppid()}
