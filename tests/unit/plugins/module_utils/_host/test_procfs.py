# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""/proc read straight: the stat line's fields, the command line as psutil splits it, a process's start, this boot and
PID namespace, on real processes of this host."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host import procfs

pytestmark = pytest.mark.skipif(not procfs.readable(psutil), reason="needs Linux /proc")


def test_parse_stat_takes_the_fields_after_the_last_parenthesis():
    data = b"4242 (a) b (c)) S 1 4242 4240 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 98765 1000 10 18446744073709551615\n"
    seen = procfs.parse_stat(data)
    assert (seen.state, seen.start_ticks) == ("S", 98765)
    assert (seen.comm, seen.ppid, seen.session) == ("a) b (c)", 1, 4240)


def test_split_cmdline_as_psutil():
    assert procfs.split_cmdline("python3\x00-m\x00vllm\x00") == ["python3", "-m", "vllm"]
    assert procfs.split_cmdline("VLLM::Worker TP0") == ["VLLM::Worker", "TP0"]
    assert procfs.split_cmdline("a b\x00") == ["a", "b"]


def test_stat_of_this_process_agrees_with_psutil():
    seen = procfs.stat(os.getpid())
    me = psutil.Process()
    assert seen.ppid == os.getppid() and seen.session == os.getsid(0) and seen.state in ("R", "S")
    boot, ticks = psutil.boot_time(), os.sysconf("SC_CLK_TCK")
    assert seen.start_ticks / ticks + boot == pytest.approx(me.create_time(), abs=0.02)
    assert os.getpid() in procfs.pids()
    # split as psutil splits it, a title set with spaces (pytest-xdist's workers) included
    assert procfs.split_cmdline(os.fsdecode(procfs.cmdline_bytes(os.getpid())))[0] == me.cmdline()[0]


def test_a_process_that_ended_is_gone_everywhere():
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # pylint: disable=consider-using-with
    child.wait()
    assert procfs.read_stat(child.pid) is None and procfs.stat(child.pid) is None
    assert procfs.cmdline_bytes(child.pid) is None and procfs.wchan(child.pid) is None
    with pytest.raises(procfs.Gone):
        procfs.read_file("/proc/%d/status" % child.pid)
    with pytest.raises(ProcessLookupError):
        procfs.process_start(child.pid)


def test_process_start_is_the_stat_lines_ticks_and_a_zombie_is_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # pylint: disable=consider-using-with
    try:
        deadline = time.monotonic() + 10
        while procfs.stat(child.pid).state != "Z" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert procfs.stat(child.pid).state == "Z"
        with pytest.raises(ProcessLookupError):
            procfs.process_start(child.pid)
    finally:
        child.wait()
    assert procfs.process_start(os.getpid()) == "ticks:%d" % procfs.stat(os.getpid()).start_ticks


def test_boot_id_and_pid_namespace_are_the_kernels():
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
        assert procfs.boot_id() == handle.read().strip()
    assert procfs.pid_namespace() == os.readlink("/proc/self/ns/pid")
    assert procfs.boot_id(proc="/nonexistent") is None and procfs.pid_namespace(proc="/nonexistent") is None


def test_cgroup_paths_put_the_unified_line_first_then_the_named_hierarchies(tmp_path):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").write_text("12:hugetlb:/a\n4:memory:/b\n3:pids:/c\n1:name=systemd:/d\n0::/e\n")
    assert procfs.cgroup_paths(7, str(tmp_path)) == ["/e", "/d", "/c", "/b", "/a"]
    (tmp_path / "7" / "cgroup").write_text("4:memory:/x\n2:cpu,cpuacct:/x\n1:name=systemd:/\n0::/\nnot a line\n")
    assert procfs.cgroup_paths(7, str(tmp_path)) == ["/", "/x"], "each path once"
    assert procfs.cgroup_paths(8, str(tmp_path)) is None
    with open("/proc/self/cgroup", encoding="utf-8") as handle:
        own = [line.split(":", 2)[2] for line in handle.read().splitlines()]
    assert sorted(procfs.cgroup_paths(os.getpid())) == sorted(set(own)), "this process's own file, every path once"
