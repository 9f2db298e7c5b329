# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: server_batches
short_description: A rolling play's batch sizes that never split a server across hosts
version_added: 0.2.0
description:
  - A server across hosts (the role C(gpuops.fleet.vllm_server)'s C(vllm_server_nodes_group)) is changed whole or not at
    all, so a rolling play must hold each such group in one batch. This lookup reads the inventory (as play keywords cannot
    see host variables) and returns the batch sizes for the play's C(serial) - Ansible's sizes from O(serial) for the hosts
    of O(hosts) (after C(--limit)), each batch grown until it ends at the end of a server group.
  - Returns O(serial) unchanged when no host is in a server group, so a fleet of one-host servers rolls as before.
  - Fails, naming the group, when the hosts of a server group are not next to each other in the inventory's order.
author:
  - gpuops maintainers (@gpuops)
options:
  hosts:
    description: The play's host pattern.
    type: str
    default: vllm_servers
  serial:
    description: The batch size as the play's C(serial) takes it - a number, a percentage, or a list of those.
    type: raw
    default: 0
  sources:
    description: Inventory sources; default the ones this run uses (C(ansible_inventory_sources)).
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: A rolling play whose batches hold each server across hosts whole
  hosts: vllm_servers
  serial: "{{ lookup('gpuops.fleet.server_batches', hosts='vllm_servers', serial=[1, '25%']) }}"
  tasks: []
"""

RETURN = r"""
_raw:
  description: The batch sizes (a list of numbers), or O(serial) as given when no host is in a server group.
  type: raw
"""

from ansible.errors import AnsibleLookupError
from ansible.inventory.manager import InventoryManager
from ansible.plugins.lookup import LookupBase
from ansible.vars.manager import VariableManager

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.batches import BatchError, whole_groups
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.group import GROUP


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        variables = variables or {}
        sources = self.get_option("sources") or variables.get("ansible_inventory_sources")
        if not sources:
            raise AnsibleLookupError("server_batches: no inventory sources (pass sources=...)")
        inventory = InventoryManager(loader=self._loader, sources=list(sources))
        limit = variables.get("ansible_limit")
        if limit:
            inventory.subset(limit)
        hosts = inventory.get_hosts(self.get_option("hosts"))
        manager = VariableManager(loader=self._loader, inventory=inventory)
        group_of = {}
        for host in hosts:
            value = manager.get_vars(host=host, include_hostvars=False).get(GROUP)
            group_of[host.name] = str(self._templar.template(value) if value else "").strip()
        try:
            return [whole_groups([host.name for host in hosts], group_of, self.get_option("serial"))]
        except BatchError as exc:
            raise AnsibleLookupError("server_batches: %s" % exc) from None
