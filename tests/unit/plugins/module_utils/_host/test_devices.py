# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who holds the /dev/nvidia* device files (_host/devices.device_holders): fake /proc fd links, and a real process of this test."""

from __future__ import annotations

import os
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host.devices import device_holders
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_psutil import FakeClock, FakePsutil, Row

psutil = pytest.importorskip("psutil")


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
