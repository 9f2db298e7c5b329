# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: fleet_names
short_description: Settle the collection's playbook variables under their current names, warning about old names
version_added: 0.3.0
description:
  - One name per idea. The collection's playbooks read their settings through it, naming the old variables they still
    read; for each one the host sets, it shows a deprecation warning that names the old variable, what replaces it, and
    the version that removes it (0.3.0), and it returns the setting under its current name.
  - 'Become: Ansible''s own C(become) (C(-b), or C(ansible_become=true) in the inventory) replaces C(vllm_restart_become),
    C(gpu_cleanup_become), C(vllm_benchmark_become), C(vllm_rollout_become) and C(gpuops_fleet_prepare_become). RV(_raw[].become)
    is the old variable where one is set, else the run''s own become (C(-b), or the C(become) setting of C(ansible.cfg)), so
    that a play keyword set from it never overrides C(-b); C(ansible_become) in the inventory wins over any play keyword.'
  - 'Idle threshold: C(gpuops_fleet_idle_threshold_mib) (default 1024) replaces C(vllm_server_memory_threshold_mib),
    C(gpu_reclaim_memory_threshold_mib), C(gpu_report_threshold_mib) and C(gpu_facts_idle_mib); the new name wins when both
    are set.'
  - 'Force: C(vllm_server_state=restarted) replaces C(vllm_restart_force) and C(vllm_server_force_restart).'
  - A lookup, so that a playbook settles its names without a task of its own (a play's task count and output stay as they
    were).
author:
  - gpuops maintainers (@gpuops)
options:
  _terms:
    description: The old variable names the play still reads; a name the collection does not know fails.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: A play whose become is Ansible's own, or the deprecated gpu_cleanup_become where it is set
  hosts: vllm_servers
  become: "{{ query('gpuops.fleet.fleet_names', 'gpu_cleanup_become')[0].become }}"
  vars:
    gpu_cleanup_names: "{{ query('gpuops.fleet.fleet_names', 'gpu_cleanup_become', 'gpu_reclaim_memory_threshold_mib')[0] }}"
  tasks:
    - name: Reclaim with the one idle threshold
      gpuops.fleet.gpu_reclaim:
        idle_threshold_mib: "{{ gpu_cleanup_names.idle_threshold_mib }}"
"""

RETURN = r"""
_raw:
  description: One dict of settings.
  type: list
  elements: dict
  contains:
    become:
      description: The first old become variable set, as a boolean, else the run's own become (C(-b) or C(ansible.cfg)).
      returned: when the terms name a become variable
      type: bool
    idle_threshold_mib:
      description: C(gpuops_fleet_idle_threshold_mib), else the first old name set, else 1024.
      returned: when the terms name an idle-threshold variable
      type: int
    state:
      description: C(vllm_server_state) (default V(started)); an old force variable set true turns V(started) into V(restarted).
      returned: when the terms name a force variable
      type: str
"""

from ansible import context
from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible.utils.display import Display

from ansible_collections.gpuops.fleet.plugins.plugin_utils._names import COLLECTION, IDLE_THRESHOLD, OLD, REMOVED_IN, STATE, settle

display = Display()


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        old = [str(term) for term in terms]
        unknown = [name for name in old if name not in OLD]
        if unknown:
            raise AnsibleLookupError("fleet_names: %s is no deprecated name of gpuops.fleet (known: %s)"
                                     % (", ".join(unknown), ", ".join(sorted(OLD))))
        variables = variables or {}
        # only what the asked settings read: a play variable set from this lookup (vllm_server_state in a role's vars) is
        # never read back by it
        settings = set(OLD[name].setting for name in old)
        wanted = set(old) | ({IDLE_THRESHOLD} if "idle_threshold_mib" in settings else set()) | ({STATE} if "state" in settings else set())
        given = {name: self._templar.template(variables[name]) for name in wanted if name in variables}
        settled, deprecations = settle(given, old)
        for message in deprecations:
            display.deprecated(message, version=REMOVED_IN, collection_name=COLLECTION)
        if "become" in settled and settled["become"] is None:
            # the run's own: -b, else the become setting of ansible.cfg (what the play keyword's default is)
            settled["become"] = bool(context.CLIARGS.get("become", False))
        return [settled]
