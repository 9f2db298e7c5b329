# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a failed reclaim hands the operator: survivors' details, /dev/nvidia* holders, Xid lines."""

from __future__ import annotations

import getpass
import os
import subprocess
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host.devices import device_holders
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.evidence import survivor, xid_lines
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.fake_psutil import FakeClock, FakePsutil, Row

psutil = pytest.importorskip("psutil")

XID = "Mar  3 02:14:07 gpu-node-17 kernel: [812345.123456] NVRM: Xid (PCI:0000:1b:00): %d, pid=4242, name=python3, Ch 00000008"


def wait_for_state(pid, state):
    deadline = time.monotonic() + 5
    while psutil.Process(pid).status() != state:
        assert time.monotonic() < deadline, "pid %d never %s" % (pid, state)
        time.sleep(0.005)


@pytest.fixture
def child():
    """Start a real process of this test (ended and reaped by its own Popen handle, even on failure)."""
    started = []

    def start(*argv):
        proc = subprocess.Popen(list(argv))
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


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
    assert survivor(psutil, missing) == {"pid": missing, "state": None, "wchan": None, "username": None, "parents": []}


def fake_proc(root, pid, comm, fds):
    fd_dir = root / str(pid) / "fd"
    fd_dir.mkdir(parents=True)
    (root / str(pid) / "comm").write_text(comm + "\n")
    for number, target in fds.items():
        os.symlink(target, str(fd_dir / str(number)))


def test_device_holders_reads_fd_links_of_every_pid(tmp_path):
    worker_fds = {0: "/dev/null", 3: "/dev/nvidiactl", 4: "/dev/nvidia0", 5: "/dev/nvidia0", 6: "/dev/nvidia-uvm", 7: "socket:[12345]"}
    fake_proc(tmp_path, 10, "VLLM::Worker_TP", worker_fds)
    fake_proc(tmp_path, 11, "bash", {0: "/dev/pts/0", 1: "/tmp/nvidia-notes.txt"})
    (tmp_path / "12").mkdir()  # fd/ not readable (another user's process) or gone: skipped
    fake_proc(tmp_path, 13, "nvidia-smi", {3: "/dev/nvidia7"})
    rows = [Row(pid, 1, "p%d" % pid) for pid in (10, 11, 12, 13, 14)]  # 14: no /proc entry at all
    got = device_holders(FakePsutil(rows, FakeClock()), proc_root=str(tmp_path))
    assert got == [
        {"pid": 10, "name": "VLLM::Worker_TP", "devices": ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"]},
        {"pid": 13, "name": "nvidia-smi", "devices": ["/dev/nvidia7"]},
    ]


def test_device_holders_without_comm_names_it_unknown(tmp_path):
    fd_dir = tmp_path / "20" / "fd"
    fd_dir.mkdir(parents=True)
    os.symlink("/dev/nvidia1", str(fd_dir / "9"))
    got = device_holders(FakePsutil([Row(20, 1, "x")], FakeClock()), proc_root=str(tmp_path))
    assert got == [{"pid": 20, "name": "?", "devices": ["/dev/nvidia1"]}]


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


def test_device_holders_follow_the_device_directory_of_the_environment(tmp_path, monkeypatch, child):
    """A simulated host keeps its device files in its own directory; GPUOPS_NVIDIA_DEVICE_DIR points the evidence there."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia3", "nvidia-not-held"):
        (dev / name).write_text("")
    holder = child("python3", "-c", "import sys, time; handles = [open(p) for p in sys.argv[1:]]; time.sleep(60)",
                   str(dev / "nvidiactl"), str(dev / "nvidia3"))

    def held():
        links = []
        for name in os.listdir("/proc/%d/fd" % holder.pid):
            try:
                links.append(os.readlink("/proc/%d/fd/%s" % (holder.pid, name)))
            except FileNotFoundError:  # closed while Python starts up
                pass
        return [link for link in links if link.startswith(str(dev))]

    deadline = time.monotonic() + 10
    while len(held()) < 2:
        assert time.monotonic() < deadline, "the holder never opened its devices"
        time.sleep(0.01)
    monkeypatch.setenv("GPUOPS_NVIDIA_DEVICE_DIR", str(dev))
    found = {entry["pid"]: entry for entry in device_holders(psutil)}
    assert found[holder.pid]["devices"] == [str(dev / "nvidia3"), str(dev / "nvidiactl")]
    assert os.getpid() not in found
    monkeypatch.delenv("GPUOPS_NVIDIA_DEVICE_DIR")
    assert holder.pid not in {entry["pid"] for entry in device_holders(psutil)}, "outside the directory: /dev only"
