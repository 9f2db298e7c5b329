# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The lock's controller side: this controller's identity, whether a holder's ansible-playbook process is gone, the
task workers a killed run left behind."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host.procfs import process_start
from ansible_collections.gpuops.fleet.plugins.plugin_utils._lock_controller import controller_identity, holder_verdict, leftover_workers

HERE = {"host": "ctl-01", "user": "alice", "pid": 4242, "pid_start": "ticks:500", "boot_id": "b-1", "machine_id": "m-1",
        "pid_namespace": "pid:[4026531836]"}


def _holder(**controller):
    return {"owner": "alice", "token": "run-a", "since": 1000.0, "play": "Restart vLLM servers, rolling",
            "controller": dict(dict(HERE, pid=1234, pid_start="ticks:100"), **controller)}


def _gone(pid):
    raise ProcessLookupError(pid)


def test_holder_whose_playbook_pid_is_gone_on_this_controller_is_gone():
    gone, why = holder_verdict(_holder(), HERE, probe=_gone)
    assert gone and "PID 1234 no longer runs on ctl-01" in why


def test_holder_whose_playbook_pid_still_runs_with_its_start_time_is_alive():
    seen = []
    gone, why = holder_verdict(_holder(), HERE, probe=lambda pid: seen.append(pid) or "ticks:100")
    assert not gone and "still runs" in why and seen == [1234]


def test_holder_whose_pid_was_reused_by_a_later_process_is_gone():
    gone, why = holder_verdict(_holder(), HERE, probe=lambda pid: "ticks:900")
    assert gone and "now another process" in why and "ticks:900" in why


def test_holder_pid_alive_but_start_unreadable_counts_as_alive():
    assert not holder_verdict(_holder(), HERE, probe=lambda pid: None)[0]


@pytest.mark.parametrize("change, needle", [
    ({"host": "ctl-02"}, "came from controller ctl-02"),
    ({"machine_id": "m-2"}, "machine id"),
    ({"boot_id": "b-0"}, "boot"),
    ({"pid_namespace": "pid:[4026532000]"}, "PID namespace"),
])
def test_holder_from_another_controller_is_never_judged_gone_here(change, needle):
    probed = []
    gone, why = holder_verdict(_holder(**change), HERE, probe=lambda pid: probed.append(pid) or _gone(pid))
    assert not gone and needle in why
    assert not probed, "a PID of another controller means nothing here and must not be looked up"


def test_old_lock_without_controller_or_pid_is_not_judged():
    assert not holder_verdict({"owner": "bob running 'x'", "token": "t", "since": 1.0}, HERE, probe=_gone)[0]
    assert not holder_verdict(_holder(pid=None), HERE, probe=_gone)[0]
    assert not holder_verdict(_holder(pid=True), HERE, probe=_gone)[0]


def test_real_process_alive_then_gone_then_start_time_tells_reuse():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        here = controller_identity(os.getpid(), "ctl-01")
        holder = {"token": "run-a", "controller": controller_identity(child.pid, "ctl-01")}
        assert holder["controller"]["pid_start"].startswith("ticks:")
        assert not holder_verdict(holder, here)[0]
        reused = dict(holder, controller=dict(holder["controller"], pid_start="ticks:1"))
        assert holder_verdict(reused, here)[0]
    finally:
        child.kill()
        child.wait()
    gone, why = holder_verdict(holder, here)
    assert gone and "no longer runs" in why
    with pytest.raises(ProcessLookupError):
        process_start(child.pid)


def test_zombie_playbook_counts_as_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open("/proc/%d/stat" % child.pid) as handle:
                if handle.read().rpartition(")")[2].split()[0] == "Z":
                    break
            time.sleep(0.02)
        with pytest.raises(ProcessLookupError):
            process_start(child.pid)
    finally:
        child.wait()


def test_identity_names_the_user_without_user_in_the_environment(monkeypatch):
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    identity = controller_identity(os.getpid(), "ctl-01")
    assert identity["user"] == pwd.getpwuid(os.getuid()).pw_name
    assert identity["host"] == "ctl-01" and identity["pid"] == os.getpid()
    assert identity["pid_start"] == process_start(os.getpid())


FORKING_MAIN = """
import os, sys, time
child = os.fork()
if child == 0:
    os.setsid()  # as an ansible task worker does
    print(os.getpid(), flush=True)  # once it leads its own session
    time.sleep(60)
    os._exit(0)
time.sleep(60)
"""


def test_task_workers_left_by_a_killed_playbook_are_found_until_they_end():
    main = subprocess.Popen([sys.executable, "-c", FORKING_MAIN, "ansible-playbook-lookalike"], stdout=subprocess.PIPE, text=True)
    worker = int(main.stdout.readline())
    try:
        there = controller_identity(main.pid, "ctl-01")
        assert there["argv_sha"]
        assert leftover_workers(there, os.getpid()) == [worker]  # its parent still runs: found all the same (same run)
        main.kill()
        main.wait()
        assert holder_verdict({"token": "t", "controller": there}, controller_identity(os.getpid(), "ctl-01"))[0]
        assert leftover_workers(there, os.getpid()) == [worker]  # orphaned: the task it runs goes on
        assert leftover_workers(dict(there, argv_sha="0" * 16), os.getpid()) == []
    finally:
        os.kill(worker, 9)
    deadline = time.monotonic() + 10
    while leftover_workers(there, os.getpid()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftover_workers(there, os.getpid()) == []
