# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each rule of the role's variables: a value it refuses (naming the variable and the value) and one it lets pass."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.plan import server_gpus, settled
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.rules import broken


def problems(variables, **given):
    """The rules as the plan judges them: on the variables under their current names, the size derived."""
    values, _warnings = settled(variables(**given))
    return broken(values, server_gpus(values, None))


def test_the_defaults_with_a_model_pass(variables):
    assert problems(variables) == []


@pytest.mark.parametrize("given, words", [
    ({"vllm_server_name": "../x"}, 'vllm_server_name="../x" must be letters'),
    ({"vllm_server_port": 0}, "vllm_server_port=0 must be 1-65535"),
    ({"vllm_server_port": "http"}, 'vllm_server_port="http" must be 1-65535'),
    ({"vllm_server_tensor_parallel_size": 0}, "vllm_server_tensor_parallel_size=0 must be at least 1"),
    ({"vllm_server_gpus": [0, 0], "vllm_server_tensor_parallel_size": 2}, "names a GPU twice"),
    ({"vllm_server_gpus": [-1]}, "holds a negative index"),
    ({"vllm_server_gpus": [0, 1, 2], "vllm_server_tensor_parallel_size": 2},
     "lists 3 GPU(s) but vllm_server_tensor_parallel_size=2: vLLM would use only the first 2"),
    ({"vllm_server_command": []}, "vllm_server_command=[] must not be empty"),
    ({"vllm_server_model": ""}, 'vllm_server_model is required to start a server (got "")'),
    ({"vllm_server_model": None}, "vllm_server_model is required to start a server (got null): set it to the model to serve"),
    ({"vllm_server_tensor_parallel_size": None, "vllm_server_gpus": []},
     "vllm_server_tensor_parallel_size and vllm_server_gpus are both unset: set vllm_server_gpus"),
    ({"vllm_server_args": ["a\x00b"]}, "holds a NUL byte, which no program can receive"),
    ({"vllm_server_args": ["--distributed-executor-backend", "ray"]}, "vllm_server_args: --distributed-executor-backend ray runs"),
    ({"vllm_server_args": ["--distributed-executor-backend=ray"]}, "never signals Ray's processes"),
    ({"vllm_server_args": ["--nnodes", "2", "--node-rank", "0"]},
     "vllm_server_args: --nnodes 2, --node-rank 0 are the role's own flags of a server across hosts"),
    ({"vllm_server_args": ["--headless"]}, "vllm_server_args: --headless are the role's own flags"),
    ({"vllm_server_env": {"A=B": "1"}}, 'the name(s) ["A=B"] cannot be environment variables'),
    ({"vllm_server_env_overrides": {"A": "x\x00"}}, 'the value of ["A"] holds a NUL byte'),
    ({"vllm_server_ready_timeout": 0}, "vllm_server_ready_timeout=0 must be positive"),
    ({"vllm_server_ready_generate_timeout": "soon"}, 'vllm_server_ready_generate_timeout="soon" must be 0 (no generation check) to 3600'),
    ({"vllm_server_ready_generate_timeout": 4000}, "vllm_server_ready_generate_timeout=4000 must be 0"),
    ({"vllm_server_drain_timeout": -1}, "vllm_server_drain_timeout=-1 must be 0 or more seconds"),
    ({"vllm_server_stop_timeout": 4000}, "vllm_server_stop_timeout=4000 must be 0 to 3600 seconds"),
    ({"vllm_server_reclaim_grace": 0}, "vllm_server_reclaim_grace=0 must be more than 0 and at most 600 seconds"),
    ({"vllm_server_reclaim_timeout": 4000}, "vllm_server_reclaim_timeout=4000 must be more than 0"),
    ({"gpuops_fleet_idle_threshold_mib": -5}, "gpuops_fleet_idle_threshold_mib=-5 must be 0 to 1048576 MiB"),
    # the deprecated name is judged as the new one
    ({"vllm_server_memory_threshold_mib": -5}, "gpuops_fleet_idle_threshold_mib=-5 must be 0 to 1048576 MiB"),
    ({"vllm_server_reclaim_match": ["("]}, "vllm_server_reclaim_match"),
    ({"vllm_server_lock_stale_after": 0}, "vllm_server_lock_stale_after=0 must be positive"),
    ({"vllm_server_health_host": "a host"}, 'vllm_server_health_host="a host" must be a host name or an address'),
    ({"vllm_server_systemd_user": "Root"}, 'vllm_server_systemd_user="Root" must be a user name'),
    ({"vllm_server_systemd_restart_sec": 0}, "vllm_server_systemd_restart_sec=0 must be 1 to 86400 seconds"),
    ({"vllm_server_systemd_start_limit_burst": 0}, "vllm_server_systemd_start_limit_burst=0 must be 1 to 1000 starts"),
    ({"vllm_server_systemd_start_limit_interval_sec": 100}, "vllm_server_systemd_start_limit_interval_sec=100 must be 0 (no start limit"),
    ({"vllm_server_state_dir": "relative"}, 'vllm_server_state_dir="relative" must be an absolute path'),
    ({"vllm_server_log_dir": "logs"}, 'vllm_server_log_dir="logs" must be empty (the state directory) or an absolute path'),
    ({"vllm_server_launch_mode": "container"}, 'vllm_server_container_image="" must name an image'),
    ({"vllm_server_container_name": "-x"}, 'vllm_server_container_name="-x" must be letters'),
    ({"vllm_server_container_cdi_kind": "gpu"}, 'vllm_server_container_cdi_kind="gpu" must be a CDI kind'),
    ({"vllm_server_container_network": "a b"}, 'vllm_server_container_network="a b" must be host or a network'),
])
def test_each_rule_names_the_variable_and_its_value(variables, given, words):
    found = problems(variables, **given)
    assert len(found) == 1 and words in found[0], found


@pytest.mark.parametrize("given", [
    {"vllm_server_state": "stopped", "vllm_server_model": ""},
    {"vllm_server_state": "stopped", "vllm_server_launch_mode": "container"},
    {"vllm_server_systemd_start_limit_interval_sec": 0},
    {"vllm_server_ready_generate_timeout": "30"},
    {"vllm_server_port": "8001", "vllm_server_tensor_parallel_size": "2"},
    # no size: the list's length
    {"vllm_server_gpus": [4, 5, 6, 7]},
    {"vllm_server_gpus": [4, 5], "vllm_server_tensor_parallel_size": ""},
    {"vllm_server_args": ["--distributed-executor-backend", "mp", "--served-model-name", "ray"]},
])
def test_values_the_rules_let_pass(variables, given):
    assert problems(variables, **given) == []
