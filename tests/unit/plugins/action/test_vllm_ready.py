# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_ready's action plugin: the wait that the launch's module run made (vllm_process's waited), judged without a
module run when it ended, waited on from its start when it did not."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ansible_collections.gpuops.fleet.plugins.action import vllm_ready as vllm_ready_action
from ansible_collections.gpuops.fleet.plugins.modules import vllm_process


def test_the_launchs_wait_polls_as_long_as_one_step_of_the_ready_action():
    assert vllm_process.WAIT_FOR_S == vllm_ready_action.PROGRESS_EVERY_S


def _action(args, replies):
    """vllm_ready's action plugin with ``args``, its module runs answered from ``replies`` (each run's arguments kept)."""
    action = vllm_ready_action.ActionModule.__new__(vllm_ready_action.ActionModule)
    action._task = SimpleNamespace(args=args, async_val=0, check_mode=False, action="gpuops.fleet.vllm_ready")
    action._play_context = SimpleNamespace(check_mode=False)
    action._connection = SimpleNamespace(_shell=SimpleNamespace(tmpdir="/nonexistent"))
    runs = []

    def execute_module(module_name, module_args, task_vars):
        runs.append((module_name, module_args))
        return replies.pop(0)
    action._execute_module = execute_module
    return action, runs


@pytest.mark.parametrize("waited", [
    {"ready": True, "since": 5.0, "pid": 7, "failed": False, "warnings": []},
    {"ready": False, "since": 5.0, "failed": True, "msg": "the server process 7 exited while starting", "warnings": []},
])
def test_the_ready_action_judges_a_launchs_wait_that_ended_without_a_module_run(waited):
    action, runs = _action({"url": "http://127.0.0.1:9", "state_file": "/s.json", "waited": waited}, [])
    result = action.run(task_vars={"inventory_hostname": "n1"})
    assert runs == [] and result["ready"] is waited["ready"] and result["failed"] is waited["failed"], result
    assert result.get("msg") == waited.get("msg") and "warnings" not in result


def test_the_ready_action_waits_on_from_a_launchs_wait_that_did_not_end():
    waited = {"ready": False, "since": 5.0, "status": "connection refused", "failed": False, "warnings": []}
    action, runs = _action({"url": "http://127.0.0.1:9", "state_file": "/s.json", "timeout": 60, "waited": waited},
                           [{"ready": True, "since": 5.0, "pid": 8}])
    result = action.run(task_vars={"inventory_hostname": "n1"})
    assert result["ready"] and result["pid"] == 8
    ((module, args),) = runs
    assert module == vllm_ready_action.THROUGH and args["ready"]["since"] == 5.0 and "waited" not in args["ready"], args


@pytest.mark.parametrize("launched", [1234.5, None])
def test_the_launch_s_time_goes_on_to_the_wait_so_that_its_start_up_is_kept(launched):
    waited = {"ready": False, "since": 5.0, "status": "connection refused", "failed": False, "warnings": [], "launched_at": launched}
    action, runs = _action({"url": "http://127.0.0.1:9", "state_file": "/s.json", "timeout": 60, "waited": waited,
                            "startup": {"config_hash": "h1"}}, [{"ready": True, "since": 5.0, "pid": 8}])
    result = action.run(task_vars={"inventory_hostname": "n1"})
    assert result["ready"] and "launched_at" not in result
    ((_module, args),) = runs
    assert args["ready"]["startup"] == ({"config_hash": "h1", "launched": launched} if launched else {"config_hash": "h1"}), args
