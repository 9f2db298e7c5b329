# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The process table (_host/process_table): the PIDs never to signal, on a fake process table; and the table read
straight from /proc (ScannedTable, gpu_reclaim's) gives the rows psutil's process_iter gives, on real processes of this host."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import types

import psutil
import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host import process_table as _process_table
from ansible_collections.gpuops.fleet.plugins.module_utils._host.process_table import ProcessTable, protected_pids, ScannedTable
from ansible_collections.gpuops.fleet.plugins.module_utils._host.procfs import readable as proc_readable
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_psutil import FakeClock, FakePsutil, host_rows, ME, Row

pytestmark = pytest.mark.skipif(not proc_readable(psutil), reason="needs Linux /proc")


@pytest.fixture
def procs(tmp_path):
    """A sleeper, one whose 15-character kernel name is extended from its command line, one with a rewritten title,
    and a zombie (exited, not yet reaped): each started here and ended through its own Popen."""
    long_name = tmp_path / "sleeper-with-a-long-name"
    os.symlink(shutil.which("sleep"), long_name)
    started = [subprocess.Popen(["sleep", "60"]),  # pylint: disable=consider-using-with
               subprocess.Popen([str(long_name), "60"]),  # pylint: disable=consider-using-with
               subprocess.Popen(["bash", "-c", "exec -a 'VLLM::Worker TP0' sleep 60"]),  # pylint: disable=consider-using-with
               subprocess.Popen(["sleep", "60"])]  # pylint: disable=consider-using-with
    started[3].send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while psutil.Process(started[3].pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)  # the exec of the third
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_rows_are_psutils(procs):
    psutil.process_iter.cache_clear()
    ours = ScannedTable(psutil)
    theirs = ProcessTable(psutil)
    pids = [p.pid for p in procs] + [os.getpid(), os.getppid()]
    for pid in pids:
        mine, reference = dict(ours.info[pid]), dict(theirs.info[pid])
        assert mine.pop("create_time") == pytest.approx(reference.pop("create_time"), abs=0.02)
        if pid in (os.getpid(), os.getppid()):  # running or sleeping as each scan caught it: only the sleepers' is fixed
            assert mine.pop("status") in ("running", "sleeping", "disk-sleep") and reference.pop("status")
        assert mine == reference, pid
    assert ours.info[procs[1].pid]["name"] == "sleeper-with-a-long-name"
    assert ours.info[procs[3].pid]["status"] == "zombie" and ours.info[procs[3].pid]["cmdline"] is None
    assert procs[0].pid in ours.children[os.getpid()]
    assert ours.ancestors(procs[0].pid)[:1] == [os.getpid()]


def test_without_linux_psutil_the_table_is_psutils():
    fake = FakePsutil([Row(1, 0, "init"), Row(10, 1, "python3")], time.monotonic)
    table = ScannedTable(fake)
    assert table.info[10]["name"] == "python3" and table.children[1] == [10]


def test_a_row_read_later_is_the_scans_row_and_none_once_gone(procs):
    table = ScannedTable(psutil)
    assert table.read(procs[0].pid) == table.info[procs[0].pid]
    procs[0].kill()
    procs[0].wait()
    assert table.read(procs[0].pid) is None


@pytest.fixture
def this_pid(monkeypatch):
    """protected_pids() asks os.getpid(); in the fake table this module is ME."""
    monkeypatch.setattr(_process_table, "os", types.SimpleNamespace(getpid=lambda: ME))


def fake():
    return FakePsutil(host_rows(), FakeClock())


def test_protected_pids_are_0_1_this_module_and_its_ancestors(this_pid):  # pylint: disable=redefined-outer-name,unused-argument
    assert protected_pids(fake()) == {0, 1, 50, 51, ME}
