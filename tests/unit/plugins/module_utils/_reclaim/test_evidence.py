# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a failed reclaim hands the operator (_reclaim/evidence): survivors' details and Xid lines."""

from __future__ import annotations

import getpass
import os
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.evidence import survivor, xid_lines

psutil = pytest.importorskip("psutil")

XID = "Mar  3 02:14:07 gpu-node-17 kernel: [812345.123456] NVRM: Xid (PCI:0000:1b:00): %d, pid=4242, name=python3, Ch 00000008"


def wait_for_state(pid, state):
    deadline = time.monotonic() + 5
    while psutil.Process(pid).status() != state:
        assert time.monotonic() < deadline, "pid %d never %s" % (pid, state)
        time.sleep(0.005)


def test_survivor_has_state_wchan_user_and_parent_chain(child):
    sleeper = child("sleep", "60")
    wait_for_state(sleeper.pid, psutil.STATUS_SLEEPING)
    got = survivor(psutil, sleeper.pid)
    assert got["pid"] == sleeper.pid
    assert got["state"] == "sleeping"
    assert got["username"] == getpass.getuser()
    assert got["parents"][0] == {"pid": os.getpid(), "name": psutil.Process().name()}
    assert [p["pid"] for p in got["parents"]] == [os.getpid()] + [p.pid for p in psutil.Process().parents()]
    assert got["wchan"] is None or (isinstance(got["wchan"], str) and got["wchan"] != "")


def test_survivor_that_is_a_zombie_says_so(child):
    exited = child("true")
    wait_for_state(exited.pid, psutil.STATUS_ZOMBIE)
    assert survivor(psutil, exited.pid)["state"] == "zombie"


def test_survivor_gone_meanwhile_has_empty_evidence():
    with open("/proc/sys/kernel/pid_max") as handle:
        missing = int(handle.read()) + 1
    assert survivor(psutil, missing) == {"pid": missing, "state": None, "wchan": None, "username": None, "parents": [], "container": None}


def test_survivor_names_its_container(child):
    sleeper = child("sleep", "60")
    container = {"runtime": "podman", "id": "a" * 64, "name": "vllm", "image": "localhost/vllm:test"}
    got = survivor(psutil, sleeper.pid, container)
    assert got["container"] == container and got["container"] is not container
    assert got["state"] in ("sleeping", "running") and got["parents"][0]["pid"] == os.getpid()


def test_xid_lines_of_the_first_readable_log(tmp_path):
    log = tmp_path / "kern.log"
    lines = [XID % 79, "Mar  3 02:14:08 gpu-node-17 kernel: eth0: link up", XID % 13, "NVRM: loading NVIDIA UNIX x86_64 Kernel Module"]
    log.write_text("\n".join(lines) + "\n")
    other = tmp_path / "messages"
    other.write_text(XID % 48 + "\n")
    got = xid_lines([str(tmp_path / "missing.log"), str(log), str(other)])
    assert got == [XID % 79, XID % 13]


def test_xid_lines_keeps_the_most_recent(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("".join(XID % n + "\n" for n in range(30)))
    assert xid_lines([str(log)], limit=3) == [XID % 27, XID % 28, XID % 29]


def test_xid_lines_of_a_log_with_none_or_no_log_at_all(tmp_path):
    quiet = tmp_path / "kern.log"
    quiet.write_bytes(b"kernel: \xff\xfe not utf-8\nkernel: all good\n")
    assert xid_lines([str(quiet), str(tmp_path / "x")]) == []
    assert xid_lines([str(tmp_path / "missing")]) == []
    assert xid_lines([str(tmp_path)]) == []  # a folder is not readable as a log
