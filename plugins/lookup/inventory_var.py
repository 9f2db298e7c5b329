# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: inventory_var
short_description: Read a variable of a group's first host from the inventory, where host variables are not available
version_added: 0.2.0
description:
  - Play keywords such as C(serial) and C(max_fail_percentage) are templated before any host is chosen, so they cannot see
    inventory variables (C(group_vars), C(host_vars)). This lookup reads the inventory sources again and returns the
    variables of the first host of O(group), so a rolling playbook can take its batch size from inventory.
  - Returns the raw value of each term (not templated further), or O(default) where the host does not define it.
author:
  - gpuops maintainers (@gpuops)
options:
  _terms:
    description: Names of the variables.
    type: list
    elements: str
    required: true
  group:
    description: The group (or host) whose first host is read.
    type: str
    default: all
  sources:
    description: Inventory sources; default the ones this run uses (C(ansible_inventory_sources)).
    type: list
    elements: str
  default:
    description: The value for a variable the host does not define.
    type: raw
"""

EXAMPLES = r"""
- name: A rolling play whose batch size comes from the group_vars of vllm_servers
  hosts: vllm_servers
  serial: "{{ lookup('gpuops.fleet.inventory_var', 'vllm_restart_serial', group='vllm_servers', default='100%') }}"
  tasks: []
"""

RETURN = r"""
_raw:
  description: One value per term.
  type: list
  elements: raw
"""

from ansible.errors import AnsibleLookupError
from ansible.inventory.manager import InventoryManager
from ansible.plugins.lookup import LookupBase
from ansible.vars.manager import VariableManager


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        sources = self.get_option("sources") or (variables or {}).get("ansible_inventory_sources")
        if not sources:
            raise AnsibleLookupError("inventory_var: no inventory sources (pass sources=...)")
        default = self.get_option("default")
        inventory = InventoryManager(loader=self._loader, sources=list(sources))
        hosts = inventory.get_hosts(self.get_option("group"))
        if not hosts:
            return [default for _term in terms]
        host_vars = VariableManager(loader=self._loader, inventory=inventory).get_vars(host=hosts[0], include_hostvars=False)
        return [host_vars.get(term, default) for term in terms]
