# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight's verdict (nothing stops unless the run can go on), what the stop is given, and what vllm_lock's
preflight carries to the host."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.preflight import plan_inputs, refusal, takeover_stop

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


def test_what_the_stop_is_given_and_what_the_lock_carries_to_the_host():
    box = {"runtime": "podman", "id": "a" * 64, "name": "old", "image": "x"}
    status = {"mode": "process", "container_id": "b" * 64, "running": True, "pid": 10, "create_time": 1.5,
              "takeover": {"pid": 20, "create_time": 2.5, "how": "container", "unit": None, "command": "vllm serve", "container": box}}
    assert takeover_stop(status) == {"pid": 20, "create_time": 2.5, "how": "container", "unit": None,
                                     "container": {"runtime": "podman", "id": "a" * 64, "name": "old"}}
    assert takeover_stop({}) is None
    # vllm_lock's preflight: the keys the reading uses, never the plan's secrets (its API key, its environment's values)
    carried = plan_inputs(dict(PLAN, api_key="sk-secret", env={"HF_TOKEN": "hf_secret"}))
    assert set(carried) == {"state", "gpu_words", "reclaim", "port", "api_key_arg", "env_names", "secret_env"}
    assert "sk-secret" not in repr(carried) and "hf_secret" not in repr(carried)


# the server on the port is another user's process: its environment could not be read
UNREAD = {"opens": False, "running_key": None, "new_key": None, "listener": {"pid": 4242, "env_read": False}}


@pytest.mark.parametrize("plan, secured, refused", [
    (PLAN, UNREAD, True),
    # vllm_server_allow_open says a server without a key is fine
    (dict(PLAN, allow_open=True), UNREAD, False),
    # its command line says it requires a key and the new configuration has none: the open-server refusal names it
    (PLAN, dict(UNREAD, running_key="--api-key", opens=True), True),
    # the new configuration requires a key: nothing is opened whatever the old one had
    (PLAN, dict(UNREAD, new_key="VLLM_API_KEY"), False),
    # its environment was read, and it has no key
    (PLAN, dict(UNREAD, listener={"pid": 4242, "env_read": True}), False),
    # nothing listens
    (PLAN, dict(UNREAD, listener=None), False),
    # a stop opens nothing
    (dict(PLAN, state="stopped"), UNREAD, False),
])
def test_an_unreadable_environment_fails_closed(plan, secured, refused):
    said = refusal(plan, {"would_fail": [], "secured": secured})
    assert bool(said) is refused, said


def test_the_fail_closed_refusal_names_the_pid_the_port_and_the_way_out():
    said = refusal(PLAN, {"would_fail": [], "secured": UNREAD})
    assert said.startswith("vllm_server: nothing was stopped: the environment of the server that listens on port 8000 (PID 4242)"
                           " cannot be read")
    assert "Run with become (-b, or ansible_become=true in the inventory)" in said
    assert "or set vllm_server_allow_open=true" in said
