# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_reclaim's lineage watch and ``settle``: a parent that respawns what was ended, and no wait when nothing can."""

from __future__ import annotations

import threading
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim import reclaim as _reclaim
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.reclaim import RESPAWN_WINDOW_S
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import SpecError, build_spec
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.fake_psutil import TERM, Row, vllm_server
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.test_gpu_reclaim import (  # pylint: disable=unused-import
    Host,
    Untouchable,
    assert_bystanders_untouched,
    host_pid_namespace,
    run_module,
)

SUPERVISOR = Row(200, 1, "python3", ["python3", "/opt/jobs/supervise.py"])
MODEL = ["python3", "/opt/jobs/serve_model.py", "--shard", "0"]
OTHER = ["python3", "/opt/jobs/other_job.py"]
RUN = {"gpus": ["0"], "grace": 0.2, "timeout": 5}


class Supervised(Host):
    """GPU 0 held by PID 300, a child of a live supervisor (PID 200) that forks PID 301 once 300 has exited;
    301 holds ``respawn_mib`` on GPU 0 at once (0: not yet)."""

    def __init__(self, respawn_cmdline, respawn_mib):
        super().__init__([Row(200, 1, "python3", list(SUPERVISOR.cmdline)), Row(300, 200, "python3", MODEL)], {300: 0})
        self.respawn = Row(301, 200, "python3", respawn_cmdline, create_time=2000.0)
        self.respawn_mib = respawn_mib

    def release(self, pid):
        super().release(pid)
        if pid == 300:
            self.psutil.table[301] = self.respawn
            if self.respawn_mib:
                self.hold(301, 0, self.respawn_mib)


def test_a_holder_respawned_by_its_live_parent_is_ended_and_the_window_waited(monkeypatch):
    host = Supervised(MODEL, 10000)
    result = run_module(monkeypatch, host, RUN)
    assert result.get("failed") is not True and result["verified"] is True, result["msg"]
    killed = {k["pid"]: k for k in result["killed"]}
    assert set(killed) == {300, 301} and killed[301]["role"] == "respawned" and killed[301]["signal"] == "SIGTERM"
    assert host.psutil.signalled(301) == [TERM] and host.psutil.signalled(200) == []
    assert 301 not in host.psutil.table and 200 in host.psutil.table
    assert host.used()[0] == 0
    watch = result["respawn_watch"]
    assert watch["settle"] == "auto" and watch["candidates"] == []
    assert [(p["pid"], p["alive"]) for p in watch["parents"]] == [(200, True)]
    assert watch["waited_s"] > 0 and result["elapsed_s"] >= RESPAWN_WINDOW_S  # the window counts from the last exit
    assert_bystanders_untouched(host)


@pytest.mark.parametrize("live_jobs", ["fail", "keep"])
@pytest.mark.parametrize("respawn_mib", [10000, 0])
def test_a_respawn_the_run_may_not_end_fails_it_while_it_runs(monkeypatch, respawn_mib, live_jobs):
    """``match`` takes the holder, not its replacement: the run must not call the GPU free, with or without memory yet.
    A respawn is not a holder the run left alone on purpose: live_jobs: keep does not accept it."""
    host = Supervised(OTHER, respawn_mib)
    result = run_module(monkeypatch, host, dict(RUN, match=["serve_model"], live_jobs=live_jobs))
    assert result["failed"] is True and result["verified"] is False
    assert result["left_alone"] == [] and result["gpus"][0]["left_alone"] == []
    assert "pid 301" in result["msg"] and "forked by PID 200 (python3 /opt/jobs/supervise.py)" in result["msg"], result["msg"]
    assert "does not match `match`" in result["msg"]
    assert ("holds 10000 MiB" in result["msg"]) == bool(respawn_mib) and ("no GPU memory yet" in result["msg"]) != bool(respawn_mib)
    assert host.psutil.signalled(301) == [] and 301 in host.psutil.table and host.used()[0] == respawn_mib
    (candidate,) = result["respawn_watch"]["candidates"]
    assert (candidate["pid"], candidate["parent"], candidate["running"]) == (301, 200, True)


def test_nothing_can_respawn_the_first_free_reading_verifies(monkeypatch):
    """The workers' launcher is ended and hangs from PID 1: no parent to watch, no window."""
    rows, held = vllm_server(1000, range(8))
    host = Host(rows, held)
    result = run_module(monkeypatch, host, {"grace": 0.2, "timeout": 5})
    assert result["verified"] is True and host.used() == [0] * 8
    assert result["respawn_watch"] == {"settle": "auto", "parents": [], "candidates": [], "waited_s": 0.0}
    assert result["elapsed_s"] < RESPAWN_WINDOW_S, "no fixed window when nothing can respawn"


def test_a_live_wrapper_above_the_launcher_is_watched_for_the_window(monkeypatch):
    rows, held = vllm_server(1000, range(2), parent=200)
    host = Host([Row(200, 1, "bash", ["/bin/bash", "/opt/run-vllm.sh"])] + rows, held, gpus=2)
    result = run_module(monkeypatch, host, {"grace": 0.2, "timeout": 5})
    assert result["verified"] is True and host.psutil.signalled(200) == []
    assert [p["pid"] for p in result["respawn_watch"]["parents"]] == [200]
    assert result["respawn_watch"]["waited_s"] > 0 and result["elapsed_s"] >= RESPAWN_WINDOW_S


def test_a_fixed_settle_waits_whatever_the_lineage(monkeypatch):
    rows, held = vllm_server(1000, range(8))
    result = run_module(monkeypatch, Host(rows, held), {"grace": 0.2, "timeout": 5, "settle": 0.3})
    assert result["verified"] is True and result["respawn_watch"]["settle"] == 0.3
    assert result["respawn_watch"]["waited_s"] >= 0.3


@pytest.mark.parametrize("value", ["often", "0.5s", "", True, -1, 61, float("nan"), [0.5], {"s": 1}])
def test_bad_settle_fails_naming_it_before_anything_is_read_or_signalled(monkeypatch, value):
    monkeypatch.setattr(_deps.PYNVML, "module", Untouchable())
    monkeypatch.setattr(_deps.PSUTIL, "module", Untouchable())
    result = run_module(monkeypatch, None, {"settle": value})
    assert result["failed"] is True and result["msg"].startswith("settle: %r is neither auto nor a number of seconds" % (value,)), result["msg"]


@pytest.mark.parametrize("value, settle", [("auto", "auto"), (" AUTO ", "auto"), ("0.25", 0.25), (0, 0.0), (2, 2.0), (60, 60.0)])
def test_good_settle_values(value, settle):
    assert build_spec({"settle": value}).settle == settle


def test_settle_default_is_auto():
    assert build_spec({}).settle == "auto"
    with pytest.raises(SpecError):
        build_spec({"settle": None})


def test_a_cluster_daemons_new_child_that_holds_nothing_is_only_reported(monkeypatch):
    """raylet refills its pool of idle workers once an actor exits: not a respawn to end, nor a reason to fail."""
    host = Supervised(["ray::IDLE"], 0)
    host.psutil.table[200].name, host.psutil.table[200].cmdline = "raylet", ["/opt/ray/core/src/ray/raylet/raylet", "--node-manager-port=0"]
    result = run_module(monkeypatch, host, RUN)
    assert result["verified"] is True, result["msg"]
    assert host.psutil.signalled(301) == [] and host.psutil.signalled(200) == []
    (candidate,) = result["respawn_watch"]["candidates"]
    assert candidate["pid"] == 301 and "cluster daemon" in candidate["reason"]


OFFSET = 5000.0  # create_time - OFFSET = time.monotonic() at the start: what _boot_offset gives on a real host
SCOPE = "/user.slice/user-1000.slice/session-3.scope"
WORKER = ["python3", "/opt/jobs/worker.py", "--rank", "0"]


class Daemonizing(Host):
    """GPU 0 held by PID 300 (below PID 1, in SCOPE). As it exits it leaves PID 301: a daemon whose parent is gone
    (PID 1 adopted it), in ``cgroup``, that takes ``mib`` of GPU 0 ``delay`` s later (0 MiB: never)."""

    def __init__(self, monkeypatch, mib, delay=0.0, cgroup=SCOPE):
        super().__init__([Row(300, 1, "python3", WORKER)], {300: 0})
        self.mib, self.delay = mib, delay
        self.timers = []
        cgroups = {300: SCOPE, 301: cgroup}
        monkeypatch.setattr(_reclaim, "read_cgroup", lambda pid: cgroups.get(pid, "/system.slice/other.service"))
        monkeypatch.setattr(_reclaim, "_boot_offset", lambda psutil, clock: OFFSET)

    def release(self, pid):
        super().release(pid)
        if pid == 300:
            self.psutil.table[301] = Row(301, 1, "python3", WORKER, create_time=time.monotonic() + OFFSET)
            if self.mib:
                timer = threading.Timer(self.delay, self.hold, (301, 0, self.mib))
                self.timers.append(timer)
                timer.start()


@pytest.mark.parametrize("delay", [0.0, 0.2])
def test_a_daemon_the_worker_leaves_as_it_ends_fails_the_run_once_it_takes_the_gpu(monkeypatch, delay):
    """A worker that daemonizes a child as it ends, the child taking the GPU a moment later under a new PID: the run
    watches it for RESPAWN_WINDOW_S and fails naming it and its worker, never verified; nothing proves it is the tree's,
    so it is not signalled."""
    host = Daemonizing(monkeypatch, 40000, delay)
    result = run_module(monkeypatch, host, RUN)
    for timer in host.timers:
        timer.join()
    assert result["failed"] is True and result["verified"] is False, result["msg"]
    assert "GPU 0: pid 301 (python3, state sleeping) holds 40000 MiB" in result["msg"], result["msg"]
    assert "most likely forked by it as it ended" in result["msg"] and "PID 300 (python3 /opt/jobs/worker.py --rank 0)" in result["msg"]
    assert host.psutil.signalled(301) == [] and 301 in host.psutil.table and host.used()[0] == 40000
    assert [k["pid"] for k in result["killed"]] == [300]
    (candidate,) = result["respawn_watch"]["candidates"]
    assert (candidate["pid"], candidate["forked_by"], candidate["parent"], candidate["detached"], candidate["running"]) == (301, 300, 1, True, True)
    assert_bystanders_untouched(host)


def test_a_daemon_that_holds_nothing_is_watched_for_the_window_then_named_in_a_warning(monkeypatch):
    host = Daemonizing(monkeypatch, 0)
    result = run_module(monkeypatch, host, RUN)
    assert result["verified"] is True, result["msg"]
    assert result["elapsed_s"] >= RESPAWN_WINDOW_S, "watched for the window from its first sight"
    assert host.psutil.signalled(301) == [] and 301 in host.psutil.table and host.used()[0] == 0
    (warning,) = result["warnings"]
    assert warning.startswith("pid 301 (python3) holds no selected GPU after the respawn watch, but still runs: started "), warning
    assert [c["pid"] for c in result["respawn_watch"]["candidates"]] == [301]


def test_a_new_process_of_another_cgroup_below_pid_1_costs_no_wait(monkeypatch):
    """A service PID 1 starts at that moment, in a cgroup of its own, is not the tree's: the first free reading verifies."""
    host = Daemonizing(monkeypatch, 0, cgroup="/system.slice/cron.service")
    result = run_module(monkeypatch, host, RUN)
    assert result["verified"] is True and result["warnings"] == [], result
    assert result["elapsed_s"] < RESPAWN_WINDOW_S and result["respawn_watch"]["candidates"] == []


def test_a_target_whose_cgroup_was_not_read_matches_any(monkeypatch):
    """Beyond CGROUP_READS targets the cgroup is not read before the signals: what they leave is watched, never missed."""
    monkeypatch.setattr(_reclaim, "CGROUP_READS", 0)
    host = Daemonizing(monkeypatch, 40000, cgroup="/system.slice/cron.service")
    result = run_module(monkeypatch, host, RUN)
    for timer in host.timers:
        timer.join()
    assert result["failed"] is True and "GPU 0: pid 301" in result["msg"] and host.psutil.signalled(301) == []
