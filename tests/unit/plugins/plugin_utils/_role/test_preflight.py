# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight's verdict (nothing stops unless the run can go on), and what the stop and the reclaim are given."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.preflight import (
    own_containers, reclaim_args, reclaim_owner, secured_args)
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.preflight import refusal, takeover_stop

PLAN = {"state": "started", "port": 8000, "gpus": [0, 1], "gpu_words": ["0", "1"], "allow_open": False, "api_key_arg": False,
        "env_names": ["NCCL_PROTO"], "secret_env": [],
        "given": {"vllm_server_gpus": [], "vllm_server_tensor_parallel_size": 2, "vllm_server_reclaim_grace": "ten"},
        "reclaim": {"match": ["^VLLM::"], "orphans_only": True, "grace": 10.0, "timeout": 60.0, "memory_threshold_mib": 1024}}
OPEN = {"opens": True, "running_key": "VLLM_API_KEY", "listener": {"pid": 77}}


@pytest.mark.parametrize("plan, reading, words", [
    (PLAN, {"would_fail": []}, ""),
    (PLAN, {"msg": "gpus: GPU 7 does not exist (the host has 2)"},
     "could not check the server's GPUs: vllm_server_gpus=[0, 1] (from vllm_server_tensor_parallel_size=2): gpus: GPU 7"),
    (PLAN, {"msg": "grace: 'ten' is not a number"}, 'vllm_server_reclaim_grace="ten": grace:'),
    (PLAN, {"msg": "no NVIDIA driver"}, "could not check the server's GPUs: no NVIDIA driver"),
    (PLAN, {"would_fail": ["GPU 1: pid 5 (python) holds 4000 MiB"]},
     "would not free the server's GPUs: GPU 1: pid 5 (python) holds 4000 MiB. Set vllm_server_reclaim_all_holders=true"),
    (dict(PLAN, state="stopped"), {"would_fail": ["GPU 1: pid 5 (python)"], "secured": OPEN}, ""),
    (PLAN, {"would_fail": ["GPU 0: a container"], "containers_refused": [
        {"runtime": "podman", "name": "other", "id": "c" * 64, "gpus": [0]},
        {"runtime": "docker", "name": "", "id": "d" * 64, "gpus": [1], "pod_uid": "p-1"}]},
     "(podman container other on GPU 0; docker container dddddddddddd, pod p-1 on GPU 1): stop it through its runtime first"),
    (PLAN, {"would_fail": [], "secured": OPEN},
     "the server that listens on port 8000 (PID 77) requires an API key (VLLM_API_KEY in its environment)"),
    (dict(PLAN, allow_open=True), {"would_fail": [], "secured": OPEN}, ""),
    (dict(PLAN, allow_open=True), {"would_fail": [], "secured": {"error": "cannot read PID 9"}},
     "cannot tell which server listens on port 8000, so whether it requires an API key: cannot read PID 9."),
])
def test_refusals(plan, reading, words):
    said = refusal(plan, reading)
    assert (words in said and said.startswith("vllm_server: nothing was stopped: ")) if words else said == ""


def test_what_the_stop_and_the_reclaim_are_given():
    box = {"runtime": "podman", "id": "a" * 64, "name": "old", "image": "x"}
    status = {"mode": "process", "container_id": "b" * 64, "running": True, "pid": 10, "create_time": 1.5,
              "takeover": {"pid": 20, "create_time": 2.5, "how": "container", "unit": None, "command": "vllm serve", "container": box}}
    assert takeover_stop(status) == {"pid": 20, "create_time": 2.5, "how": "container", "unit": None,
                                     "container": {"runtime": "podman", "id": "a" * 64, "name": "old"}}
    assert own_containers(status) == ["b" * 64, "a" * 64]
    assert reclaim_owner(status) == {"pid": 20, "create_time": 2.5}, "the server taken over owns the workers"
    assert reclaim_owner({"running": True, "pid": 10, "create_time": 1.5}) == {"pid": 10, "create_time": 1.5}
    assert reclaim_owner({"running": False, "pid": 10}) is None and takeover_stop({}) is None
    args = reclaim_args(PLAN, {"running": True, "pid": 10, "create_time": 1.5})
    assert args["owner"] == {"pid": 10, "create_time": 1.5} and args["match"] == ["^VLLM::"] and args["containers"] == "refuse"
    every = reclaim_args(dict(PLAN, reclaim=dict(PLAN["reclaim"], match=None, orphans_only=False)), {})
    assert "match" not in every and "owner" not in every and every["orphans_only"] is False


def test_a_detached_process_inherits_the_task_s_environment_a_unit_does_not():
    assert secured_args(PLAN, {"mode": "process"})["inherit_env"] is True
    assert secured_args(PLAN, {"mode": "systemd"})["inherit_env"] is False
    assert secured_args(dict(PLAN, state="stopped"), {}) is None
