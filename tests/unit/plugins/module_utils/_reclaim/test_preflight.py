# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the role's preflight and its reclaim after the stop give gpu_reclaim (the same options, made on the host by
vllm_lock and on the controller by the verdict)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.preflight import (
    cache_reading, own_containers, reading_args, reclaim_args, reclaim_owner, replaced_pid, secured_args)

PLAN = {"state": "started", "port": 8000, "gpu_words": ["0", "1"], "api_key_arg": False, "env_names": ["NCCL_PROTO"],
        "secret_env": [], "reclaim": {"match": ["^VLLM::"], "orphans_only": True, "grace": 10.0, "timeout": 60.0,
                                      "memory_threshold_mib": 1024}}


def test_what_the_reclaim_is_given():
    box = {"runtime": "podman", "id": "a" * 64, "name": "old", "image": "x"}
    status = {"mode": "process", "container_id": "b" * 64, "running": True, "pid": 10, "create_time": 1.5,
              "takeover": {"pid": 20, "create_time": 2.5, "how": "container", "unit": None, "command": "vllm serve", "container": box}}
    assert own_containers(status) == ["b" * 64, "a" * 64]
    assert reclaim_owner(status) == {"pid": 20, "create_time": 2.5}, "the server taken over owns the workers"
    assert reclaim_owner({"running": True, "pid": 10, "create_time": 1.5}) == {"pid": 10, "create_time": 1.5}
    assert reclaim_owner({"running": False, "pid": 10}) is None
    args = reclaim_args(PLAN, {"running": True, "pid": 10, "create_time": 1.5})
    assert args["owner"] == {"pid": 10, "create_time": 1.5} and args["match"] == ["^VLLM::"] and args["containers"] == "refuse"
    every = reclaim_args(dict(PLAN, reclaim=dict(PLAN["reclaim"], match=None, orphans_only=False)), {})
    assert "match" not in every and "owner" not in every and every["orphans_only"] is False


def test_a_detached_process_inherits_the_task_s_environment_a_unit_does_not():
    assert secured_args(PLAN, {"mode": "process"})["inherit_env"] is True
    assert secured_args(PLAN, {"mode": "systemd"})["inherit_env"] is False
    assert secured_args(dict(PLAN, state="stopped"), {}) is None


def test_the_preflight_s_reading_is_the_reclaim_s_options_with_the_stop_s_containers_and_secured():
    status = {"mode": "systemd", "container_id": "b" * 64, "running": True, "pid": 10, "create_time": 1.5}
    reading = reading_args(PLAN, status)
    assert {key: value for key, value in reading.items() if key not in ("managed_containers", "secured")} == reclaim_args(PLAN, status)
    assert reading["managed_containers"] == ["b" * 64]
    assert reading["secured"] == {"port": 8000, "api_key_arg": False, "env_names": ["NCCL_PROTO"], "inherit_env": False, "secret_env": []}
    assert "secured" not in reading_args(dict(PLAN, state="stopped"), status)


@pytest.mark.parametrize("status, pid", [
    ({"takeover": {"pid": 7, "create_time": 1.0}, "running": True, "pid": 9}, 7),
    ({"takeover": {"pid": 7, "container": {"id": "c"}}}, None),
    ({"running": True, "pid": 9}, 9),
    ({"running": False, "pid": None}, None),
])
def test_the_server_whose_caches_the_new_one_keeps(status, pid):
    assert replaced_pid(status) == pid


def test_the_cache_reading_carries_the_mode_and_the_takeover():
    plan = {"state": "started", "caches": {"user": "", "container_user": "", "default": {"HF_HOME": "/tmp"}}}
    found = cache_reading(plan, {"mode": "process", "running": False})
    assert found["old"] is None and found["mode"] == "process" and found["taken"] is False and found["in_container"] is False
    assert cache_reading(dict(plan, state="stopped"), {}) is None and cache_reading({"state": "started"}, {}) is None
