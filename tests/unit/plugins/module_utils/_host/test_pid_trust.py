# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""When NVML's PIDs are trusted, and the evidence that a local process uses a GPU (an NVIDIA device file open)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host import pid_trust as _pid_trust
from ansible_collections.gpuops.fleet.plugins.module_utils._host.pid_trust import assess, holds_device_file, nested_pid_namespace

STATUS = "Name:\tpython3\nTgid:\t%s\nPid:\t%s\nPPid:\t1\nNSpid:\t%s\nNSpgid:\t%s\n"


def status_file(tmp_path, nspid):
    path = tmp_path / "status"
    path.write_text(STATUS % (nspid.split()[-1], nspid.split()[-1], nspid.replace(" ", "\t"), nspid.replace(" ", "\t")))
    return str(path)


def ns_link(tmp_path, target):
    link = tmp_path / "pid"
    link.symlink_to(target)
    return str(link)


@pytest.mark.parametrize("nspid, nested", [("4242", False), ("812345 17", True), ("900001 5012 7", True)])
def test_nested_pid_namespace_reads_nspid(tmp_path, nspid, nested):
    assert nested_pid_namespace(status_file(tmp_path, nspid), ns_link(tmp_path, "pid:[4026531836]")) is nested


@pytest.mark.parametrize("target, nested", [("pid:[4026531836]", False), ("pid:[4026532461]", True)])
def test_a_container_with_its_own_proc_is_told_by_its_namespace(tmp_path, target, nested):
    """A container mounts its own /proc: NSpid shows one entry there, but its PID namespace is not the initial one."""
    assert nested_pid_namespace(status_file(tmp_path, "7"), ns_link(tmp_path, target)) is nested


def test_nested_pid_namespace_without_nspid_or_status_is_not_assumed(tmp_path):
    (tmp_path / "old").write_text("Name:\tpython3\nPid:\t12\n")  # a kernel older than 4.1 has no NSpid line
    missing = str(tmp_path / "no-link")
    assert nested_pid_namespace(str(tmp_path / "old"), missing) is False
    assert nested_pid_namespace(str(tmp_path / "missing"), missing) is False


def test_this_process_agrees_with_its_own_proc():
    with open("/proc/self/status", encoding="utf-8") as handle:
        line = [text for text in handle if text.startswith("NSpid:")]
    expected = os.readlink("/proc/self/ns/pid") != "pid:[4026531836]" or bool(line and len(line[0].split()) > 2)
    assert nested_pid_namespace() is expected


@pytest.fixture
def devices(tmp_path, monkeypatch):
    """A device directory of this test's own (as a simulated host has), named by GPUOPS_NVIDIA_DEVICE_DIR."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia0"):
        (dev / name).write_text("")
    (tmp_path / "elsewhere").write_text("")
    monkeypatch.setenv("GPUOPS_NVIDIA_DEVICE_DIR", str(dev))
    return dev


@pytest.fixture
def child(child):
    """Real processes of this test, each opening the files it is given (the conftest's ``child``, which ends them)."""

    def start(*paths):
        proc = child("python3", "-c", "import sys, time; handles = [open(p) for p in sys.argv[1:]]; "
                     "print('open', flush=True); time.sleep(60)", *[str(p) for p in paths], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "open"
        return proc.pid

    return start


def test_device_file_open_is_the_evidence(devices, child, tmp_path):
    user = child(devices / "nvidia0")
    other = child(tmp_path / "elsewhere")
    assert holds_device_file(user) is True
    assert holds_device_file(other) is False, "a file outside the device directory is no evidence"
    assert holds_device_file(4194305) is False, "a PID this namespace does not have"
    assert holds_device_file(user, prefix="/dev/nvidia") is False, "the simulated files are not /dev's"


def test_assess_trusts_only_the_host_pid_namespace_with_every_pid_here(devices, child, tmp_path):
    user = child(devices / "nvidiactl")
    bystander = child(tmp_path / "elsewhere")
    trusted = assess([], nested=False)
    assert trusted.trusted and trusted.verified(bystander), "NVML's word is enough in the host namespace"
    missing = assess([4194305, 4194306], nested=False)
    assert not missing.trusted and "4194305, 4194306" in missing.why_not and "nested" not in missing.why_not
    assert missing.verified(user) is True and missing.verified(bystander) is False
    assert missing.reason(bystander, "sleep").startswith("unverifiable") and "%d (sleep)" % bystander in missing.reason(bystander, "sleep")
    assert str(devices / "nvidia") + "*" in missing.reason(bystander)
    nested = assess([], nested=True)
    assert not nested.trusted and "nested PID namespace" in nested.why_not
    assert nested.verified(user) is True and nested.verified(bystander) is False


def test_assess_reads_the_namespace_and_asks_for_evidence_once_per_pid(monkeypatch):
    asked = []
    monkeypatch.setattr(_pid_trust, "nested_pid_namespace", lambda status_path=None: True)
    trust = assess([], evidence=lambda pid: asked.append(pid) or pid == 7)
    assert [trust.verified(7), trust.verified(8), trust.verified(7), trust.verified(8)] == [True, False, True, False]
    assert asked == [7, 8]


def test_device_file_evidence_waits_for_nothing(devices, child):
    """The evidence is read from /proc/PID/fd as it is now: a process that closed its devices no longer counts."""
    user = child(devices / "nvidia0")
    assert holds_device_file(user)
    os.kill(user, 9)
    deadline = time.monotonic() + 10
    while holds_device_file(user):
        assert time.monotonic() < deadline, "the killed process still shows its device file"
        time.sleep(0.01)
