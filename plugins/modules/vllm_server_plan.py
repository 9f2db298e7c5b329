#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_server_plan
short_description: Plan a run of the vllm_server role from its variables, on the controller
version_added: 0.2.0
description:
  - Reads the C(vllm_server_*) variables of the host (the role's defaults under the inventory and extra vars) and
    returns the plan of a run of the role C(gpuops.fleet.vllm_server) there - the server's GPUs, command line,
    environment and configuration hash, its files, its URL, and what each step's module is given.
  - Every check of the variables that needs no host is made here, before anything is touched; a failure names each
    variable that breaks a rule and its value, all of them at once.
  - An old variable name (C(vllm_server_force_restart), C(vllm_server_verify_launch), C(vllm_server_memory_threshold_mib))
    is still read, with a deprecation warning naming its successor; they are removed in 0.3.0.
  - The role registers the result as C(vllm_server_plan) (its C(plan) entry point); playbooks read the plan from there,
    never from the role's internal names.
  - Runs on the controller only; nothing is sent to the host. The result holds the server's environment and API key, so
    it is never shown (as with C(no_log)), except for a failure's message.
  - This module is an action plugin; it has no code that runs on the host.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: The same plan; in check mode the launch check and the last known-good mark are planned off.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  good:
    description:
      - For a rollback, the result of M(gpuops.fleet.vllm_last_good) with O(gpuops.fleet.vllm_last_good#module:include_values=true);
        the command line, environment, GPUs, served name, model and container then come from its C(config), never from
        the variables.
      - Refused (nothing is stopped) when none is kept, or when it would move the server (another launch mode, GPU count or
        port than the variables').
    type: dict
seealso:
  - module: gpuops.fleet.vllm_server_verdict
  - module: gpuops.fleet.vllm_last_good
"""

EXAMPLES = r"""
- name: Plan the run (the role's plan entry point does this)
  gpuops.fleet.vllm_server_plan:
  register: vllm_server_plan

- name: Show the configuration hash and the environment as shown (secrets masked)
  ansible.builtin.debug:
    msg: "{{ vllm_server_plan.config_hash }} {{ vllm_server_plan.env_shown | join(' ') }}"
"""

RETURN = r"""
name:
  description: The server's name (C(vllm_server_name)).
  returned: success
  type: str
state:
  description:
    - C(vllm_server_state); the deprecated C(vllm_server_force_restart=true) turns V(started) into V(restarted).
  returned: success
  type: str
force:
  description: Whether the restart is forced (O(gpuops.fleet.vllm_server#role:main:vllm_server_state=restarted)).
  returned: success
  type: bool
mode:
  description: C(vllm_server_launch_mode) as given (V(auto) is resolved on the host by the first reading).
  returned: success
  type: str
port:
  description: The server's port.
  returned: success
  type: int
url:
  description: The server's base URL, as the role reaches it from the host.
  returned: success
  type: str
gpus:
  description: The server's GPUs (host indices), from C(vllm_server_gpus) or the first C(vllm_server_tensor_parallel_size) ones.
  returned: success
  type: list
  elements: int
gpu_words:
  description: RV(gpus) as strings, as M(gpuops.fleet.gpu_reclaim) and M(gpuops.fleet.gpu_facts) take them.
  returned: success
  type: list
  elements: str
tensor_parallel_size:
  description: C(vllm_server_tensor_parallel_size), else (unset) the number of GPUs in C(vllm_server_gpus).
  returned: success
  type: int
model:
  description: The model the server serves.
  returned: success
  type: str
served_name:
  description: The name the server lists its model under (C(vllm_server_served_model_name), else the model).
  returned: success
  type: str
argv:
  description: The server's command line, word by word (secrets included).
  returned: success
  type: list
  elements: str
argv_masked:
  description: RV(argv) with every secret value masked.
  returned: success
  type: list
  elements: str
exec_start:
  description: The systemd form of RV(argv), each secret a C(${VAR}) reference.
  returned: success
  type: str
exec_env:
  description: The values of the references of RV(exec_start).
  returned: success
  type: dict
env:
  description: The server's environment (C(vllm_server_host_env), C(vllm_server_env), C(vllm_server_env_overrides), C(CUDA_VISIBLE_DEVICES)).
  returned: success
  type: dict
env_shown:
  description: C(NAME=value) of each variable of the operator's environment, secrets masked, sorted by name.
  returned: success
  type: list
  elements: str
check_env:
  description: The environment the launch check expects in the server's C(/proc).
  returned: success
  type: dict
env_names:
  description: The names of RV(env) with a value.
  returned: success
  type: list
  elements: str
secret_env:
  description: C(vllm_server_secret_env).
  returned: success
  type: list
  elements: str
api_key:
  description: The API key the role sends to C(/v1/*) ('' when none).
  returned: success
  type: str
api_key_arg:
  description: Whether RV(argv) has C(--api-key).
  returned: success
  type: bool
config_hash:
  description: The configuration hash (sha256 of the command line, environment, GPUs and, in the container mode, how the container runs).
  returned: success
  type: str
container:
  description: In the container mode, the container's whole spec as M(gpuops.fleet.vllm_process)'s O(gpuops.fleet.vllm_process#module:container); else null.
  returned: success
  type: dict
files:
  description: The server's files on the host - C(state) (its record), C(lock), C(log), C(env) (the environment file), C(unit) (the systemd unit's name).
  returned: success
  type: dict
state_file:
  description: The server's record (C(files.state)).
  returned: success
  type: str
rollback:
  description: Whether the plan launches the last known-good configuration (O(good)).
  returned: success
  type: bool
generate:
  description: The short completion asked of a server that may be left alone; null with a stop, a forced restart or no generation check.
  returned: success
  type: dict
status:
  description: The options of the reading of what runs (M(gpuops.fleet.vllm_process)'s C(state=status), M(gpuops.fleet.vllm_lock)'s C(status)).
  returned: success
  type: dict
reclaim:
  description: M(gpuops.fleet.gpu_reclaim)'s settings - C(match) (null - every holder), C(orphans_only), C(grace), C(timeout), C(memory_threshold_mib).
  returned: success
  type: dict
memory_threshold_mib:
  description: The most MiB a free GPU may have in use (C(gpuops_fleet_idle_threshold_mib), default 1024).
  returned: success
  type: int
given:
  description: The variables a preflight refusal may name (the GPUs, the size, the reclaim's settings), as given.
  returned: success
  type: dict
drain:
  description: Whether the server is drained before its stop.
  returned: success
  type: bool
keep_failed:
  description: C(vllm_server_keep_failed_server).
  returned: success
  type: bool
allow_open:
  description: C(vllm_server_allow_open).
  returned: success
  type: bool
check:
  description: Whether the launch is checked (C(vllm_server_check), never in check mode).
  returned: success
  type: bool
mark_good:
  description: Whether a launch that passed ready and the check is kept as the last known-good configuration (RV(check) and C(vllm_server_mark_good)).
  returned: success
  type: bool
good_config:
  description: The configuration kept as the last known-good one.
  returned: success
  type: dict
lora_adapters:
  description: The LoRA adapters the server serves (C(vllm_server_lora_adapters), or the good configuration's), each C(name) and C(path).
  returned: success
  type: list
  elements: dict
lora_managed:
  description:
    - Whether they change at run time without a restart (C(--enable-lora) and C(VLLM_ALLOW_RUNTIME_LORA_UPDATING) on a server of
      one host; then RV(config_hash) leaves them out and C(status.adapters) has the reading compare them). See docs/adapters.md.
  returned: success
  type: bool
problems:
  description: On a failure, one message per broken rule.
  returned: failure
  type: list
  elements: str
"""
