#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_server_check
short_description: Prove that a freshly launched inference server is the one holding its GPUs
version_added: 0.2.0
description:
  - A check independent of the launch and of C(/health), from a fresh NVML reading joined with the server's process tree.
  - Every GPU in O(gpus) must be held by a process of the server's own tree (the process O(pid) and its descendants), not
    by a leftover of an earlier server; no other process may hold them; the tree may hold no other GPU.
  - The number of GPU-holding processes in the tree must equal O(tensor_parallel_size) (one worker per rank).
  - The server process must run with O(env) (read from C(/proc/PID/environ)). Every value is compared, but the value of a
    secret name (one with a word KEY, APIKEY, TOKEN, SECRET(S), PASSWORD, PASSWD or CREDENTIAL(S), in any case, such as
    C(HF_TOKEN), or one listed in O(secret_env)) is never shown, returned or logged; the check names it only.
  - Fails naming each check that did not hold.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: Reads only; the same checks run in check mode.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  pid:
    description: The server's main process (the API server, or a systemd unit's main PID).
    type: int
    required: true
  create_time:
    description: Start time of O(pid) (seconds since the epoch, as psutil reads it); a different process under that PID fails the check.
    type: float
  gpus:
    description:
      - Indices of the GPUs the server was given (as in C(CUDA_VISIBLE_DEVICES)).
    type: list
    elements: int
    required: true
  tensor_parallel_size:
    description: How many GPU-holding workers the server must have.
    type: int
    required: true
  env:
    description: Environment variables the server process must have, with these values (secret values never shown).
    type: dict
    default: {}
  secret_env:
    description: More names of O(env) whose values are secrets, beyond those recognised by their name.
    type: list
    elements: str
    default: []
requirements:
  - nvidia-ml-py (C(import pynvml)) and the NVIDIA driver's C(libnvidia-ml.so.1) on the managed host.
  - psutil on the managed host.
seealso:
  - module: gpuops.fleet.gpu_facts
  - module: gpuops.fleet.vllm_ready
"""

EXAMPLES = r"""
- name: Check that the new server's own workers hold GPUs 0-7
  gpuops.fleet.vllm_server_check:
    pid: "{{ launched.pid }}"
    create_time: "{{ launched.create_time }}"
    gpus: [0, 1, 2, 3, 4, 5, 6, 7]
    tensor_parallel_size: 8
    env:
      NCCL_PROTO: LL
"""

RETURN = r"""
ok:
  description: Whether every check held.
  returned: always
  type: bool
checks:
  description: Each check, in order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: V(server_running), V(gpus_readable), V(gpus_held_by_server), V(no_other_holders), V(stays_on_its_gpus),
        V(worker_count) or V(environment).
      type: str
      returned: always
    ok:
      description: Whether it held.
      type: bool
      returned: always
    detail:
      description: What was seen; for V(environment), C(NAME=value) for each variable, and only C(NAME) for a secret one.
      type: str
      returned: always
      sample: PID 4242 runs with CUDA_VISIBLE_DEVICES=0,1, HF_TOKEN (secret, as configured), NCCL_PROTO=LL
workers:
  description: The server's GPU-holding processes.
  returned: always
  type: list
  elements: dict
  contains:
    pid:
      description: PID.
      type: int
      returned: always
    name:
      description: Name (process title, such as C(VLLM::Worker_TP0)).
      type: str
      returned: always
    gpus:
      description: GPU indices it holds.
      type: list
      elements: int
      returned: always
    used_memory_mib:
      description: MiB it holds on them (0 where NVML does not say).
      type: int
      returned: always
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError, failure, finish
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import hide_only_secrets, secret_env_names
from ansible_collections.gpuops.fleet.plugins.module_utils._server.check import run_launch_check


ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "pid": {"type": "int", "required": True},
    "create_time": {"type": "float"},
    "gpus": {"type": "list", "elements": "int", "required": True},
    "tensor_parallel_size": {"type": "int", "required": True},
    "env": {"type": "dict", "default": {}, "no_log": True},
    "secret_env": {"type": "list", "elements": "str", "default": [], "no_log": False},
}


def check_params(params: t.Mapping[str, t.Any]) -> None:
    """Raises SpecError naming the option and the value when one cannot be used."""
    if not params["gpus"] or any(index < 0 for index in params["gpus"]) or len(set(params["gpus"])) != len(params["gpus"]):
        raise SpecError("gpus: expected distinct GPU indices (0 or more), got %r" % (params["gpus"],))
    if params["tensor_parallel_size"] < 1:
        raise SpecError("tensor_parallel_size: expected at least 1, got %r" % params["tensor_parallel_size"])
    if params["pid"] < 1:
        raise SpecError("pid: expected a PID, got %r" % params["pid"])


def run(module: AnsibleModule) -> t.Tuple[t.Dict[str, t.Any], t.List[str], bool]:
    """Only the secrets hidden, the options checked, then the launch check; it fails when a check does."""
    params = module.params
    secret_names = secret_env_names(params["env"], params["secret_env"])
    hide_only_secrets(module, [value for name, value in params["env"].items() if name not in secret_names],
                      [params["env"][name] for name in secret_names])
    try:
        check_params(params)
    except SpecError as exc:
        return failure(str(exc))
    _deps.require(module, _deps.PYNVML, _deps.PSUTIL)
    result = run_launch_check(_deps.PYNVML.module, _deps.PSUTIL.module, params["pid"], params["create_time"], params["gpus"],
                              params["tensor_parallel_size"], params["env"], params["secret_env"])
    return dict(result, changed=False), [], not result["ok"]


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run(module)
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
