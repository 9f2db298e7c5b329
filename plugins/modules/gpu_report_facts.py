#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_report_facts
short_description: Read one GPU host for the fleet report, with whose each GPU holder is and the role's servers
version_added: 0.2.0
description:
  - Reads what M(gpuops.fleet.gpu_facts) reads (every GPU, its health and the processes holding it, secret arguments of their
    command lines masked) and returns the same C(ansible_facts).
  - Tells whose each holder is, by the rule of M(gpuops.fleet.gpu_reclaim)'s O(gpuops.fleet.gpu_reclaim#module:orphans_only)
    (see RV(owners)) - the server the role P(gpuops.fleet.vllm_server#role) manages (its process tree or its session), an orphan
    (its launcher chain hangs from PID 1 or a subreaper, or was adopted), someone else's job, or a PID of another PID namespace.
  - Reads every record of the role in O(state_dir) and asks each running server's C(/health).
  - Changes nothing on the host. The playbook C(gpu_report.yml) runs it on every host, then M(gpuops.fleet.gpu_report) writes the
    report on the controller.
author:
  - gpuops maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.nvml
attributes:
  check_mode:
    support: full
    description: The module never changes anything; check mode returns the same result.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
  facts:
    support: full
    description: Returns C(gpus) and C(gpu_driver) in C(ansible_facts), as M(gpuops.fleet.gpu_facts) does.
options:
  state_dir:
    description:
      - The role's state folder (C(vllm_server_state_dir)); every C(NAME.json) in it is a server record.
      - A missing folder means no managed server.
    type: path
    default: /var/lib/gpuops-fleet/vllm
  health_host:
    description: Host name or address at which a running server's C(/health) is asked, on the port of its record.
    type: str
    default: 127.0.0.1
  health_timeout:
    description: Seconds to wait for each C(/health) answer (more than 0, at most 60).
    type: float
    default: 3.0
seealso:
  - module: gpuops.fleet.gpu_facts
  - module: gpuops.fleet.gpu_report
"""

EXAMPLES = r"""
- name: Read the host for the fleet report
  gpuops.fleet.gpu_report_facts:
    state_dir: "{{ vllm_server_state_dir | default('/var/lib/gpuops-fleet/vllm') }}"
  register: reading

- name: Name the orphans
  ansible.builtin.debug:
    msg: "{{ reading.owners | selectattr('kind', 'equalto', 'orphan') | map(attribute='pid') | list }}"
"""

RETURN = r"""
ansible_facts:
  description: C(gpus) and C(gpu_driver), exactly as M(gpuops.fleet.gpu_facts) returns them (see its documentation).
  returned: success
  type: dict
owners:
  description: Whose each holder listed in C(ansible_facts.gpus[].processes) is, one entry per PID.
  returned: success
  type: list
  elements: dict
  contains:
    pid:
      description: The holder's PID.
      type: int
      returned: always
    kind:
      description:
        - V(server) (the role's server, named in RV(owners[].server)), V(orphan) (its launcher is gone - no launcher-shaped
          process above it, and it hangs from PID 1, a subreaper or was adopted), V(unmanaged) (its launcher lives, detached
          under PID 1 or a subreaper, and no record of the role names it), V(other job) (it hangs from a live process that is
          none of those), V(other namespace) (a PID this namespace does not have), V(unverified) (NVML's PID may be the
          machine's) or V(gone) (it exited after the reading).
      type: str
      returned: always
      sample: orphan
    why:
      description: The reason, in words.
      type: str
      returned: always
    server:
      description: The name of the managed server when RV(owners[].kind=server), else V(null).
      type: str
      returned: always
    launcher_pid:
      description: The top of the holder's launcher chain (the server's API process for a worker); V(null) when it has none.
      type: int
      returned: always
    launcher:
      description: That launcher's command line (secret arguments masked), cut to 100 characters.
      type: str
      returned: always
servers:
  description: Every record of the role in O(state_dir), sorted by name.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: The server's name (C(vllm_server_name)).
      type: str
      returned: always
      sample: vllm-8000
    record:
      description: Path of the record.
      type: str
      returned: always
    pid:
      description: The recorded PID (V(null) for a systemd unit's record).
      type: int
      returned: always
    create_time:
      description: The recorded start time, seconds since the epoch.
      type: float
      returned: always
    running:
      description: Whether that PID still names the process started at that time; V(null) for a systemd unit's record.
      type: bool
      returned: always
    model:
      description: The model of the record.
      type: str
      returned: always
    port:
      description: The server's port.
      type: int
      returned: always
    gpus:
      description: The server's GPUs.
      type: list
      elements: int
      returned: always
    config_hash:
      description: The configuration hash the role recorded.
      type: str
      returned: always
    launched_at:
      description: When the role launched it, seconds since the epoch.
      type: float
      returned: always
    argv:
      description: The recorded command line, secret arguments masked.
      type: list
      elements: str
      returned: always
    unit:
      description: The systemd unit, for a record of the systemd launch mode; else V(null).
      type: str
      returned: always
    container:
      description:
        - For a record of the container mode, its container (C(runtime), C(id), C(name), C(image)); its runtime's C(inspect)
          gives RV(servers[].running) and RV(servers[].pid) (the container's main process, by the host's PID). Else V(null).
      type: dict
      returned: always
    health:
      description: The answer of C(/health), such as V(HTTP 200) or V(connection refused); V(null) when not asked.
      type: str
      returned: always
    healthy:
      description: Whether C(/health) answered HTTP 200; V(null) when not asked.
      type: bool
      returned: always
    error:
      description: Why the record could not be read; else V(null).
      type: str
      returned: always
"""

import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import finish
from ansible_collections.gpuops.fleet.plugins.module_utils._report.reading import DEFAULTS, run_reading

ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "gpus": {"type": "list", "elements": "str"},
    "state_dir": {"type": "path", "default": DEFAULTS["state_dir"]},
    "health_host": {"type": "str", "default": DEFAULTS["health_host"]},
    "health_timeout": {"type": "float", "default": DEFAULTS["health_timeout"]},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, warnings, failed = run_reading(module.params, *_deps.gpu_reader_hooks(module))
    finish(module, result, warnings, failed)


if __name__ == "__main__":
    main()
