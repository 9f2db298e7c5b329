#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_secured
short_description: Tell whether a new configuration would open a secured vLLM server or drop one of its secrets
version_added: 0.2.0
description:
  - Reads the process that listens on O(port) on the managed host (the kernel's socket table), whoever started it, with its
    command line and its environment (C(/proc/PID/environ)). It requires an API key when its command line has a value after
    C(--api-key) (or C(--api-key=K)), else when C(VLLM_API_KEY) in its environment is not empty.
  - Compares it with the new configuration, known by names only (O(api_key_arg), O(env_names)), so that no secret value is
    passed to the module or shown in its arguments. RV(opens) is true when the running server requires a key and the new
    configuration none, so that the new server would answer C(/v1/*) to anyone. The role C(gpuops.fleet.vllm_server) refuses such a
    run before it stops anything unless C(vllm_server_allow_open=true).
  - Every secret variable (a word of its name is KEY, TOKEN, SECRET, PASSWORD, CREDENTIAL..., or named in O(secret_env)) that
    the running server has with a value and the new configuration lacks is named in RV(dropped_secret_env) and in a warning;
    its value is never returned or shown.
  - The module changes nothing. Nothing listening on O(port) is no failure (RV(listener) is V(null)).
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: A reading, the same in check mode.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  port:
    description: The TCP port the server listens on (any address).
    type: int
    required: true
  api_key_arg:
    description: Whether the new configuration's command line has a value after C(--api-key) (or C(--api-key=K)).
    type: bool
    default: false
  env_names:
    description:
      - The names of the new configuration's environment that have a non-empty value (names only, never values).
    type: list
    elements: str
    default: []
  inherit_env:
    description:
      - Whether the new server also inherits the environment this task runs with (a detached process does, a systemd unit does
        not); its variables with a value then count as the new configuration's too.
    type: bool
    default: false
  secret_env:
    description: More names of variables whose values are secrets, beyond those recognised by their name.
    type: list
    elements: str
    default: []
requirements:
  - psutil on the managed host.
notes:
  - Run it as the server's user or root, or the server's environment cannot be read (a warning says so; only its command line
    is judged then).
seealso:
  - module: gpuops.fleet.vllm_process
"""

EXAMPLES = r"""
- name: Read the running server's key and secrets against the new configuration
  gpuops.fleet.vllm_secured:
    port: 8000
    api_key_arg: false
    env_names: [NCCL_PROTO]
  register: secured

- name: Refuse to open the server
  ansible.builtin.fail:
    msg: "PID {{ secured.listener.pid }} requires an API key ({{ secured.running_key }}) and the new configuration has none"
  when: secured.opens
"""

RETURN = r"""
listener:
  description: The process that listens on O(port), V(null) when none does.
  returned: always
  type: dict
  contains:
    pid:
      description: Its PID.
      type: int
    create_time:
      description: Its start time, seconds since the epoch.
      type: float
    cmdline:
      description: Its command line, every secret argument masked.
      type: list
      elements: str
    env_read:
      description: Whether its environment could be read.
      type: bool
running_key:
  description: How the running server requires an API key, V(--api-key) or V(VLLM_API_KEY); V(null) when it requires none.
  returned: always
  type: str
new_key:
  description: How the new configuration requires one, V(--api-key) or V(VLLM_API_KEY); V(null) when it requires none.
  returned: always
  type: str
opens:
  description: Whether the running server requires an API key and the new configuration none.
  returned: always
  type: bool
dropped_secret_env:
  description: The secret variables the running server has with a value and the new configuration lacks (names only).
  returned: always
  type: list
  elements: str
"""

import os
import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError, between
from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import ListenerError
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import masked_argv
from ansible_collections.gpuops.fleet.plugins.module_utils._server.secured import compare, dropped_warning, read_listener

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "port": {"type": "int", "required": True},
    "api_key_arg": {"type": "bool", "default": False},
    "env_names": {"type": "list", "elements": "str", "default": []},
    "inherit_env": {"type": "bool", "default": False},
    "secret_env": {"type": "list", "elements": "str", "default": [], "no_log": False},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        between("port", params["port"], 1, 65535, "")
    except SpecError as exc:
        module.fail_json(msg=str(exc))
    _deps.require(module, _deps.PSUTIL)
    names = set(params["env_names"])
    if params["inherit_env"]:
        names.update(name for name, value in os.environ.items() if value)
    try:
        listener = read_listener(_deps.PSUTIL.module, params["port"])
    except ListenerError as exc:
        module.fail_json(msg=str(exc))
    verdict = compare(listener, params["api_key_arg"], names, params["secret_env"])
    shown = None
    if listener is not None:
        shown = {"pid": listener.pid, "create_time": listener.create_time, "cmdline": masked_argv(listener.cmdline),
                 "env_read": verdict.env_known}
        if not verdict.env_known:
            module.warn("the environment of PID %d, which listens on port %d, cannot be read (run as its user or root): "
                        "whether it has VLLM_API_KEY or other secrets is not known" % (listener.pid, params["port"]))
        for name in verdict.dropped:
            module.warn(dropped_warning(listener, name))
    module.exit_json(changed=False, listener=shown, running_key=verdict.running_key, new_key=verdict.new_key,
                     opens=verdict.opens, dropped_secret_env=verdict.dropped)


if __name__ == "__main__":
    main()
