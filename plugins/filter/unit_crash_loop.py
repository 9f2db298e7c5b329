# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: unit_crash_loop
short_description: Say whether systemd restarts a unit's crashing server, from the output of systemctl show
version_added: 0.2.0
description:
  - Reads C(NRestarts), C(Result), C(ActiveState), C(SubState), C(MainPID), C(ExecMainCode) and C(ExecMainStatus) from the output
    of C(systemctl show) and returns C(crash loop - N restarts, last exit status S (Result=R)), with what systemd does next
    (starts it again after C(RestartSec=), gave up at the start limit, or runs it again as PID P); an empty string when
    systemd never restarted the unit since it was last started by hand or by the role.
  - The role P(gpuops.fleet.vllm_server#role) reports its unit with it, so a server that dies at every start is not taken
    for one that is starting; the module M(gpuops.fleet.vllm_ready) judges a unit by the same rule.
author:
  - gpuops maintainers (@gpuops)
options:
  _input:
    description: The output of C(systemctl show --property=NRestarts --property=Result ... UNIT), one C(NAME=VALUE) a line.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the unit
  ansible.builtin.command:
    argv: [systemctl, show, --property=ActiveState, --property=SubState, --property=MainPID, --property=NRestarts,
           --property=Result, --property=ExecMainCode, --property=ExecMainStatus, gpuops-vllm-8000.service]
  register: unit
  changed_when: false

- name: Say when it crash-loops
  ansible.builtin.debug:
    msg: "{{ unit.stdout | gpuops.fleet.unit_crash_loop }}"
  when: unit.stdout | gpuops.fleet.unit_crash_loop | length > 0
"""

RETURN = r"""
_value:
  description: For example C(crash loop - 3 restarts, last exit status 1 (Result=exit-code); systemd starts it again after RestartSec=); empty when none.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.module_utils._server.unit import crash_loop, parse_show


def unit_crash_loop(text):
    if not isinstance(text, str):
        raise AnsibleFilterError("unit_crash_loop: expected the output of systemctl show (a string), got %s" % type(text).__name__)
    return crash_loop(parse_show(text))


class FilterModule:
    def filters(self):
        return {"unit_crash_loop": unit_crash_loop}
