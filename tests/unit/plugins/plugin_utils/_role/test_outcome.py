# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a run did (vllm_server_result) and what a failed launch left (vllm_server_failure), from the steps' results."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.outcome import failure, result, rollback, start_again, status_of

PLAN = {"name": "vllm-8000", "state": "started", "port": 8000, "gpus": [0, 1], "url": "http://127.0.0.1:8000", "keep_failed": False,
        "argv_masked": ["vllm", "serve", "m", "--api-key", "********"], "env_shown": ["NCCL_PROTO=LL"],
        "files": {"unit": "gpuops-vllm-8000.service"}, "config_hash": "h"}
TAKEN = {"pid": 4242, "command": "vllm serve m --api-key ********", "unit": None, "container": None}


def test_the_reading_acted_on_is_the_lock_s_once_taken():
    assert status_of({"status": {"mode": "systemd"}}, {"mode": "process"}) == {"mode": "systemd"}
    assert status_of({"failed": True}, {"mode": "process"}) == {"mode": "process"}
    assert status_of(None, {"skipped": True}) == {}


def test_a_forced_restart():
    steps = {"status": {"running": True, "pid": 10, "reason": "a restart was forced"},
             "preflight": {"gpus": [{"memory_used_mib_before": 80000}, {"memory_used_mib_before": 80100}], "would_kill": [{"name": "w"}]},
             "stopped": {"stopped": [{"name": "vllm", "pid": 10}], "drained": {"answered": True}},
             "reclaim": {"killed": [{"name": "VLLM::Worker_TP1", "pid": 12}]},
             "verify": {"gpus": [{"memory_used_mib": 5}, {"memory_used_mib": None}], "left": []},
             "launched": {"pid": 30}, "ready": {"pid": 31, "elapsed_s": 4.2, "check": {"workers": [{"pid": 32}], "checks": ["ok"]}}}
    done = result("node", PLAN, steps, check_mode=False)
    assert done["action"] == "restarted" and done["stopped_pids"] == [10, 12] and done["stopped"] == ["vllm", "VLLM::Worker_TP1"]
    assert done["freed_mib"] == 160095 and done["would_free_mib"] == 160100 and done["pid"] == 31 and done["ready_s"] == 4.2
    assert done["workers"] == [{"pid": 32}] and done["taken_over"] is None and done["would_launch"] == "" and done["crash_loop"] == ""


@pytest.mark.parametrize("plan, status, action", [
    (PLAN, {"running": False}, "started"),
    (PLAN, {"running": True, "pid": 3}, "restarted"),
    (PLAN, {"running": False, "takeover": TAKEN}, "restarted"),
    (dict(PLAN, state="stopped"), {"running": True, "pid": 3}, "stopped"),
])
def test_the_action(plan, status, action):
    assert result("n", plan, {"status": status}, check_mode=False)["action"] == action


def test_check_mode_says_what_a_real_run_would_launch_with_secrets_masked():
    done = result("n", PLAN, {"status": {"running": True, "pid": 3}}, check_mode=True)
    assert done["would_launch"] == "would stop PID 3 and launch vllm serve m --api-key ******** with NCCL_PROTO=LL on GPU 0, 1"
    assert result("n", PLAN, {"status": {}}, check_mode=True)["would_launch"].startswith("would launch vllm serve")


def test_a_takeover_is_named_with_the_reason_and_how_it_was_stopped():
    status = {"running": False, "reason": "no managed server ran", "takeover": dict(TAKEN, how="tmux", started="by hand in tmux")}
    stopped = {"takeover_stopped": {"stopped": [{"pid": 4242}], "unit_disabled": False, "drained": {"answered": True}}}
    done = result("n", PLAN, {"status": status, "stopped": stopped}, check_mode=False)
    assert done["reason"] == "a server this role did not start listens on port 8000: taken over"
    assert done["taken_over"]["stopped_pids"] == [4242] and done["taken_over"]["how"] == "tmux"


def test_a_crash_loop_and_jobs_left_alone_when_stopping():
    stopping = dict(PLAN, state="stopped")
    done = result("n", stopping, {"status": {"crash_loop": "5 starts in 60 s"}, "reclaim": {"foreign": [{"reason": "a job of bob"}]},
                                  "verify": {"left": [1]}}, check_mode=False)
    assert done["crash_loop"] == "unit gpuops-vllm-8000.service: 5 starts in 60 s"
    assert done["left_alone"] == ["a job of bob"] and done["left_gpus"] == [1]


HEAD = "; the server taken over (PID 4242, started %s) stays stopped, this run does not start it again: "


@pytest.mark.parametrize("taken, stopped, words", [
    (dict(TAKEN, started="in the docker container vllm-old", container={"runtime": "docker", "id": "ab" * 32, "name": "vllm-old"}),
     {"takeover_stopped": {"unit_disabled": False}},
     HEAD % "in the docker container vllm-old" + "start its container again with `docker start vllm-old`"),
    (dict(TAKEN, started="in a container", container={"runtime": "podman", "id": "ab" * 32, "name": ""}),
     {"takeover_stopped": {"stopped": []}}, HEAD % "in a container" + "start its container again with `podman start abababababab`"),
    (dict(TAKEN, started="by the unit vllm-old.service", unit="vllm-old.service"), {"takeover_stopped": {"unit_disabled": True}},
     HEAD % "by the unit vllm-old.service" + "start its unit again with `systemctl enable --now vllm-old.service`"),
    (dict(TAKEN, started="by hand in tmux (PID 17)"), {"takeover_stopped": {"stopped": [{"pid": 4242}]}},
     HEAD % "by hand in tmux (PID 17)" + "its command line was `vllm serve m --api-key ********` (secrets masked)"),
    (None, {"stopped": [{"pid": 4242}]}, ""),
    (dict(TAKEN, started="by hand"), {}, ""),  # the failure came before the stop: nothing was taken over
])
def test_the_words_for_each_way_a_server_was_taken_over(taken, stopped, words):
    assert start_again({"takeover": taken}, stopped) == words


def test_a_failed_launch_is_undone_or_kept():
    steps = {"launched": {"pid": 30}, "status": {}}
    undone = failure(PLAN, "Wait for /health", {"msg": "it died", "log_tail": ["oom"]}, steps)
    assert undone == {"task": "Wait for /health", "msg": "it died", "log_tail": ["oom"], "new_pid": 30,
                      "undo": "the new server (PID 30) was stopped and GPU 0, 1 verified free (vllm_server_keep_failed_server=true leaves it for debugging)"}
    kept = failure(dict(PLAN, keep_failed=True), "Launch the server", {}, {})
    assert kept["undo"] == "the new server was left as it is, with its GPUs (vllm_server_keep_failed_server=true)" and kept["msg"] == "no message"


def test_the_rollback_s_summary():
    done = rollback("n", PLAN, {"result": {"action": "unchanged", "pid": 5, "stopped_pids": []},
                                "last_good": {"summary": {"since": "2026-12-01T00:00:00Z"}}, "ready": {"check": {"checks": ["c"]}}})
    assert done["action"] == "unchanged" and done["pid"] == 5 and done["good_since"] == "2026-12-01T00:00:00Z" and done["checks"] == ["c"]


def test_the_result_says_where_the_caches_are_once_a_server_is_launched():
    steps = {"status": {"running": False}, "preflight": {"caches": {"shown": "in vllm_server_cache_dir: HF_HOME=/c/huggingface"}}}
    assert result("node", PLAN, steps, check_mode=True)["caches"] == "in vllm_server_cache_dir: HF_HOME=/c/huggingface"
    assert result("node", dict(PLAN, state="stopped"), steps, check_mode=False)["caches"] == ""
    assert result("node", PLAN, {"status": {"running": False}}, check_mode=False)["caches"] == ""
