# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ladder's looks on real processes of this host: one read of /proc/PID/stat per look, identity by start time."""

from __future__ import annotations

import signal
import subprocess
import time

import psutil
import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host.procfs import readable as proc_readable
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.looks import RUNNING, ZOMBIE, Looks
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.ladder import run_ladder
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import Target

pytestmark = pytest.mark.skipif(not proc_readable(psutil), reason="needs Linux /proc")


@pytest.fixture
def sleeper():
    started = []

    def start():
        proc = subprocess.Popen(["sleep", "60"])  # pylint: disable=consider-using-with
        started.append(proc)
        return proc

    yield start
    for proc in started:  # only what this test started, through its own Popen
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_look_is_one_read_and_agrees_with_psutil(sleeper):
    proc = sleeper()
    looks = Looks(psutil)
    assert looks.direct
    assert looks.attach(proc.pid, psutil.Process(proc.pid).create_time())
    assert looks.reads == 1
    assert looks.state(proc.pid) == RUNNING
    assert looks.reads == 2
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while looks.state(proc.pid) != ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.01)
    assert psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE, "not reaped yet: psutil says zombie too"
    assert looks.state(proc.pid) == ZOMBIE
    proc.wait()
    assert looks.state(proc.pid) is None


def test_another_start_time_is_another_process(sleeper):
    proc = sleeper()
    created = psutil.Process(proc.pid).create_time()
    looks = Looks(psutil)
    assert not looks.attach(proc.pid, created - 1.0), "a PID whose start time differs from the plan's is not attached"
    assert looks.attach(proc.pid, created)
    looks._start[proc.pid] -= 1  # as if the PID now named a process started one tick later than the first look saw
    assert looks.state(proc.pid) is None, "a start time that changed since the first look means exited"


def test_the_ladder_reads_each_target_once_per_round(sleeper):
    procs = [sleeper() for _n in range(4)]
    targets = [Target(p.pid, psutil.Process(p.pid).create_time(), "sleep", ["sleep", "60"], None, "holder", 0, [0]) for p in procs]
    looks = Looks(psutil)
    rounds = []

    def sleep(seconds):
        rounds.append(looks.reads)
        time.sleep(seconds)

    outcomes = run_ladder(psutil, targets, [("SIGTERM", signal.SIGTERM), ("SIGKILL", signal.SIGKILL)], 10.0, sleep=sleep, looks=looks)
    assert all(o.signal == "SIGTERM" and o.ended in ("zombie", "exited") for o in outcomes), outcomes
    # attach (1) + the look before SIGTERM (1) + one look per poll while it runs
    polls = len(rounds) + 1
    assert looks.reads <= 4 * (2 + polls)
    assert all(p.poll() is not None or p.wait(5) is not None for p in procs)
