# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verify step's verdict on the server's GPUs, case by case."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.verify import fresh_reading, left_alone_pids, verdict

PLAN = {"name": "vllm-8000", "gpus": [0, 1], "memory_threshold_mib": 1024, "state": "started"}
WORKER = {"pid": 41, "name": "VLLM::Worker_TP1", "used_memory_mib": 80000, "username": "svc", "cmdline": ["python", "-m", "vllm"]}


def gpu(index, used=0, processes=(), error=None):
    return {"index": index, "memory_used_mib": used, "memory_total_mib": 81559, "processes": list(processes), "error": error}


@pytest.mark.parametrize("gpus, busy", [
    ([gpu(0), gpu(1, used=1024)], []),                          # at the threshold is free
    ([gpu(0), gpu(1, used=1025)], [1]),                         # above it, held by no process
    ([gpu(0), gpu(1, used=80000, processes=[WORKER])], [1]),    # a holder
    ([gpu(0, error="GPU is lost"), gpu(1)], [0]),               # a GPU that does not answer is not free
    ([gpu(0), gpu(1), gpu(2, used=90000, processes=[WORKER])], []),  # not the server's GPU
])
def test_busy_gpus(gpus, busy):
    judged = verdict("node", PLAN, gpus, [], None, check_mode=False)
    assert [entry["index"] for entry in judged["busy"]] == busy
    assert judged["failed"] is bool(busy)


def test_the_failure_names_each_holder_and_the_reclaim_s_words():
    judged = verdict("node-1", PLAN, [gpu(0), gpu(1, used=80000, processes=[WORKER])], [], {"msg": "GPU 1 still held"}, check_mode=False)
    assert judged["msg"].splitlines()[0] == "node-1: 1 GPU(s) of server vllm-8000 not free (gpu_reclaim said: GPU 1 still held):"
    assert "GPU 1: 80000 / 81559 MiB used" in judged["msg"]
    assert "PID 41  VLLM::Worker_TP1  80000 MiB  user svc  python -m vllm" in judged["msg"]


def test_check_mode_shows_a_held_gpu_without_failing():
    judged = verdict("n", PLAN, [gpu(0, used=5000)], [], None, check_mode=True)
    assert not judged["failed"] and "held now (check mode stops nothing)" in judged["msg"] and "held by no process" in judged["msg"]


def test_a_gpu_only_a_job_left_alone_holds_is_named_not_failed_when_stopping():
    stopping = dict(PLAN, state="stopped")
    alone = left_alone_pids(stopping, {"foreign": [{"pid": 41}]}, None)
    judged = verdict("n", stopping, [gpu(0), gpu(1, used=80000, processes=[WORKER])], alone, None, check_mode=False)
    assert judged["left"] == [1] and not judged["failed"]
    assert judged["msg"] == "GPU 0 free (no holder, at most 1024 MiB used); GPU 1 held by a job left alone"
    assert left_alone_pids(PLAN, {"foreign": [{"pid": 41}]}, None) == [], "a start frees every GPU of the server"
    assert left_alone_pids(stopping, {}, {"foreign": [{"pid": 7}]}) == [7], "the preflight's, when the reclaim named none"


@pytest.mark.parametrize("reclaim, fresh", [
    ({"verified": True, "gpus": [{"index": 0, "memory_used_mib_after": 3, "processes_left": []}],
      "reading_after": {"fresh_session": True}}, True),
    ({"verified": True, "gpus": [], "reading_after": {"fresh_session": False}}, False),
    ({"verified": False, "gpus": [], "reading_after": {"fresh_session": True}}, False),
    ({}, False),
    (None, False),
])
def test_the_reclaim_s_reading_is_judged_only_when_it_proved_the_gpus_free_in_a_fresh_session(reclaim, fresh):
    reading = fresh_reading(reclaim)
    assert (reading is not None) is fresh
    if fresh:
        assert reading == [{"index": 0, "uuid": None, "error": None, "memory_used_mib": 3, "processes": []}]
