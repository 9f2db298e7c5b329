# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_reclaim's orphans_only and owner as Ansible runs the module: what check mode and a real run say of a live job's vLLM."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim import reclaim as _reclaim
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.fake_psutil import Row, vllm_server
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.test_gpu_reclaim import (  # pylint: disable=unused-import
    FAST,
    INCIDENT_MIB,
    MISSING_PID,
    Host,
    assert_bystanders_untouched,
    device_files,
    host_pid_namespace,
    run_module,
)

VLLM_MATCH = [r"^VLLM::", r"vllm\.entrypoints\.", r"(^|/)vllm\s+serve(\s|$)"]
BATCH = ["python3", "batch_infer.py"]


@pytest.fixture(autouse=True)
def one_session(monkeypatch):
    """Every process of the fake table is in session 1 (no adoption told by sessions)."""
    monkeypatch.setattr(_reclaim, "getsid", lambda pid: 1)


def incident_and_colleague():
    """The incident's seven orphans on GPUs 1-7 (adopted by PID 1) and a colleague's worker on GPU 3."""
    rows, held = vllm_server(1000, range(8), engine_core=False)
    rows = [row for row in rows if row.pid not in (1000, 1002, 1010)]
    for row in rows:
        row.ppid = 1
    held = {pid: gpu for pid, gpu in held.items() if gpu > 0}
    rows += [Row(3000, 1, "python3", BATCH, username="alice"), Row(3001, 3000, "VLLM::Worker_TP0", ["VLLM::Worker_TP0"], username="alice")]
    host = Host(rows, held)
    host.hold(3001, 3, 12000)
    return host, held


def test_check_mode_names_the_colleagues_worker_in_would_fail_and_foreign(monkeypatch):
    host, held = incident_and_colleague()
    result = run_module(monkeypatch, host, dict(FAST, match=VLLM_MATCH, orphans_only=True, _ansible_check_mode=True))
    assert {k["pid"] for k in result["would_kill"]} == set(held)
    assert result["would_fail"] == [
        "GPU 3: pid 3001 (VLLM::Worker_TP0) holds 12000 MiB: not signalled: belongs to live PID 3000 (python3 batch_infer.py), "
        "not to this server nor an orphan: someone else's job"]
    assert result["foreign"] == [{
        "pid": 3001, "name": "VLLM::Worker_TP0", "cmdline": ["VLLM::Worker_TP0"], "username": "alice", "gpus": [3],
        "launcher": None, "parent": {"pid": 3000, "name": "python3", "cmdline": BATCH, "username": "alice"},
        "reason": "PID 3001 VLLM::Worker_TP0 on GPU 3 belongs to live PID 3000 (python3 batch_infer.py), not to this server: not ended"}]
    assert host.psutil.signals == []


def test_real_run_ends_the_orphans_leaves_the_colleague_and_fails_naming_it(monkeypatch):
    host, held = incident_and_colleague()
    result = run_module(monkeypatch, host, dict(FAST, match=VLLM_MATCH, orphans_only=True))
    assert result["failed"] is True and result["verified"] is False
    assert {k["pid"] for k in result["killed"]} == set(held)
    assert {3000, 3001} <= set(host.psutil.table) and not {3000, 3001} & {pid for pid, _n in host.psutil.signals}
    assert "GPU 3: pid 3001 (VLLM::Worker_TP0, state sleeping) holds 12000 MiB: not signalled: belongs to live PID 3000" in result["msg"]
    assert [f["pid"] for f in result["foreign"]] == [3001]
    assert_bystanders_untouched(host)


def test_without_orphans_only_everything_that_matches_is_ended(monkeypatch):
    """What vllm_server_reclaim_all_holders (or a plain reclaim) does: the colleague's worker too, never batch_infer.py."""
    host, held = incident_and_colleague()
    result = run_module(monkeypatch, host, dict(FAST, match=VLLM_MATCH))
    assert result.get("failed") is not True and result["verified"] is True
    assert {k["pid"] for k in result["killed"]} == set(held) | {3001} and result["foreign"] == []
    assert 3000 in host.psutil.table


def test_bad_owner_fails_before_anything_is_read(monkeypatch):
    host, _held = incident_and_colleague()
    result = run_module(monkeypatch, host, dict(FAST, owner={"pid": 1}, orphans_only=True))
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("owner.pid: 1 is not the PID of a server"), result["msg"]
    assert host.psutil.signals == []


# live_jobs: keep. The colleague's worker (PID 3001 on GPU 3) is left alone on purpose: it does not fail the run
COLLEAGUE = {"pid": 3001, "name": "VLLM::Worker_TP0", "cmdline": ["VLLM::Worker_TP0"], "username": "alice", "gpus": [3],
             "used_memory_mib": 12000, "rule": "orphans_only",
             "why": "belongs to live PID 3000 (python3 batch_infer.py), not to this server nor an orphan: someone else's job"}
KEEP = dict(FAST, match=VLLM_MATCH, orphans_only=True, live_jobs="keep")


def test_keep_ends_the_orphans_and_accepts_the_gpu_the_colleague_keeps_busy(monkeypatch):
    host, held = incident_and_colleague()
    result = run_module(monkeypatch, host, KEEP)
    assert result.get("failed") is not True and result["verified"] is True, result["msg"]
    assert {k["pid"] for k in result["killed"]} == set(held)
    assert {3000, 3001} <= set(host.psutil.table) and not {3000, 3001} & {pid for pid, _n in host.psutil.signals}
    assert host.used() == [0, 0, 0, 12000, 0, 0, 0, 0]
    assert result["left_alone"] == [COLLEAGUE] and [f["pid"] for f in result["foreign"]] == [3001]
    assert [g["left_alone"] for g in result["gpus"]] == [[], [], [], [3001], [], [], [], []]
    assert result["msg"].startswith("GPU 0, 1, 2, 4, 5, 6, 7 verified free by fresh NVML readings; GPU 3 kept busy by 1 holder(s) "
                                    "left alone on purpose (left_alone): ended 7 process(es)"), result["msg"]
    assert_bystanders_untouched(host)


def test_keep_in_check_mode_lists_what_it_would_leave_alone_and_warns_of_nothing(monkeypatch):
    host, held = incident_and_colleague()
    result = run_module(monkeypatch, host, dict(KEEP, _ansible_check_mode=True))
    assert {k["pid"] for k in result["would_kill"]} == set(held)
    assert result["would_fail"] == [] and result.get("warnings", []) == []
    assert result["left_alone"] == [COLLEAGUE] and result["gpus"][3]["left_alone"] == [3001]
    assert "GPU 3 would keep busy by 1 holder(s)" in result["msg"] and "would fail" not in result["msg"]
    assert host.psutil.signals == []


def test_the_default_fails_naming_the_colleague_and_lists_it_the_same(monkeypatch):
    host, _held = incident_and_colleague()
    result = run_module(monkeypatch, host, dict(FAST, match=VLLM_MATCH, orphans_only=True))
    assert result["failed"] is True and "GPU 3: pid 3001 (VLLM::Worker_TP0, state sleeping) holds 12000 MiB: not signalled" in result["msg"]
    assert result["left_alone"] == [COLLEAGUE] and result["gpus"][3]["left_alone"] == [3001] and result["gpus"][3]["verified"] is False


def survivor(host):
    host.psutil.table[1013].on_signal = {}


def zombie_left_alone(host):
    """A process that match does not take, a zombie that keeps 4096 MiB on GPU 0: no job runs there."""
    host.psutil.table[4000] = Row(4000, 1, "python3", ["python3", "train.py"], status="zombie")
    host.hold(4000, 0, 4096)


def memory_of_no_process(host):
    host.lib.devices[3]["used"] += 4096  # beside the colleague's worker


def lost_gpu(host):
    host.lib.devices[5]["lost"] = True


def foreign_pid(host):
    host.hold(MISSING_PID, 0, 20000)


@pytest.mark.parametrize("fault, named", [
    (survivor, "GPU 3: pid 1013 (VLLM::Worker_TP3, state sleeping) holds %d MiB: still there after every signal" % INCIDENT_MIB),
    (zombie_left_alone, "GPU 0: pid 4000 (python3) holds 4096 MiB but is a zombie"),
    (memory_of_no_process, "GPU 3: 16096 MiB used, 4096 MiB of it beyond what the holders left alone hold (pid 3001 (VLLM::Worker_TP0, "
                           "12000 MiB)), above memory_threshold_mib 1024: memory held by no process"),
    (lost_gpu, "GPU 5: GPU is lost"),
    (foreign_pid, "GPU 0: pid %d holds 20000 MiB but is not visible in this PID namespace" % MISSING_PID),
], ids=["survivor", "zombie", "memory-of-no-process", "lost-gpu", "foreign-pid"])
def test_keep_still_fails_for_everything_else_beside_the_colleague(monkeypatch, fault, named):
    host, held = incident_and_colleague()
    fault(host)
    if fault is foreign_pid:  # NVML lists a PID this namespace lacks: a holder is trusted with its device files open
        device_files(monkeypatch, list(held) + [3001])
    result = run_module(monkeypatch, host, KEEP)
    assert result["failed"] is True and result["verified"] is False
    assert named in result["msg"], result["msg"]
    assert "pid 3001 (" not in result["msg"].replace("the holders left alone hold (pid 3001 (", ""), "the colleague is no reason"
    assert result["left_alone"] == [COLLEAGUE] and 3001 in host.psutil.table and host.psutil.signalled(3001) == []
