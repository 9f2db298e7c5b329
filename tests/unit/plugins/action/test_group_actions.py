# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A server across hosts in the action plugins: vllm_lock's judges every host's reading before any lock, and
vllm_server_verdict's preflight judges every host on the reading its lock made (hostvars, as Ansible gives them)."""

from __future__ import annotations

from types import SimpleNamespace

from ansible_collections.gpuops.fleet.plugins.action import vllm_lock as lock_action
from ansible_collections.gpuops.fleet.plugins.action import vllm_server_verdict as verdict_action

PLAN = {"host": "n1", "gpus": [0], "whole": True, "group": {"name": "glm5_a", "nodes": ["n1", "n2"], "size": 2, "headless": False}}


def _action(module, args):
    action = module.ActionModule.__new__(module.ActionModule)
    action._task = SimpleNamespace(args=args, async_val=0, check_mode=False, action="x")
    action._play_context = SimpleNamespace(check_mode=False)
    action._connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/nonexistent"))
    runs = []

    def execute_module(module_name, module_args, task_vars):
        runs.append(module_name)
        return {"failed": True, "msg": "no module runs in this test"}
    action._execute_module = execute_module
    return action, runs


def _vars(n1, n2, batch=("n1", "n2")):
    return {"inventory_hostname": "n1", "__vllm_server_read": n1, "ansible_play_batch": list(batch),
            "hostvars": {"n1": {"__vllm_server_read": n1}, "n2": {"__vllm_server_read": n2}}}


def test_the_lock_leaves_a_whole_unchanged_group_alone_and_locks_nothing():
    action, runs = _action(lock_action, {"path": "/l", "preflight": PLAN})
    result = action.run(task_vars=_vars({"reason": ""}, {"reason": ""}))
    assert result["unchanged"] is True and result["acquired"] is False and runs == []


def test_a_host_of_the_group_out_of_the_run_fails_the_lock_before_anything():
    action, runs = _action(lock_action, {"path": "/l", "preflight": PLAN})
    result = action.run(task_vars=_vars({"reason": ""}, None, batch=("n1",)))
    assert result["failed"] and "n2 is not in this run" in result["msg"] and runs == []


def test_a_group_with_one_host_changed_goes_on_to_the_lock():
    action, runs = _action(lock_action, {"path": "/l", "preflight": PLAN})
    action.run(task_vars=_vars({"reason": ""}, {"reason": "it does not answer /health (HTTP 503)"}))
    assert runs == ["gpuops.fleet.vllm_lock"]  # the lock's module run (here answered with a failure)


def test_the_preflight_refuses_for_another_host_of_the_group():
    action, _runs = _action(verdict_action, {})
    their_plan = dict(PLAN, host="n2", state="started", given={}, gpu_words=["0"])
    refused = {"would_fail": ["GPU 0: PID 9 (python3 train.py), someone else's job"], "failed": False, "msg": ""}
    task_vars = {"ansible_play_batch": ["n1", "n2"], "hostvars": {
        "n2": {"__vllm_server_lock": {"failed": False, "preflight": refused}, "vllm_server_plan": their_plan}}}
    judged = action._whole_preflight(PLAN, task_vars)
    assert judged["failed"] and judged["msg"].startswith("nothing was stopped on any host of server group glm5_a: n2: ")
    assert "PID 9 (python3 train.py)" in judged["msg"]
    task_vars["hostvars"]["n2"]["__vllm_server_lock"] = {"failed": True, "msg": "the server is locked by another run"}
    judged = action._whole_preflight(PLAN, task_vars)
    assert judged["failed"] and "n2: its lock: the server is locked by another run" in judged["msg"]
