#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: fleet_names
short_description: Settle the collection's playbook variables under their current names, warning about old names
version_added: 0.3.0
description:
  - One name per idea. The collection's playbooks call it first, naming the old variables they still read; for each one
    the host sets, it shows a deprecation warning that names the old variable, what replaces it, and the version that
    removes it (0.4.0), and it returns the setting under its current name.
  - 'Become: Ansible''s own C(become) (C(-b), or C(ansible_become=true) in the inventory) replaces C(vllm_restart_become),
    C(gpu_cleanup_become), C(vllm_benchmark_become), C(vllm_rollout_become) and C(gpuops_fleet_prepare_become). The
    playbooks set no C(become) of their own, so that C(-b) and C(ansible_become) take effect; where an old variable is set
    they set C(ansible_become) from RV(become), as the old variable did.'
  - 'Idle threshold: C(gpuops_fleet_idle_threshold_mib) (default 1024) replaces C(vllm_server_memory_threshold_mib),
    C(gpu_reclaim_memory_threshold_mib), C(gpu_report_threshold_mib) and C(gpu_facts_idle_mib); the new name wins when both
    are set.'
  - 'Force: C(vllm_server_state=restarted) replaces C(vllm_restart_force) and C(vllm_server_force_restart).'
  - Runs on the controller only; nothing is sent to the host. This module is an action plugin; it has no code that runs
    on the host.
author:
  - gpuops maintainers (@gpuops)
attributes:
  check_mode:
    support: full
    description: The same settings in check mode.
  diff_mode:
    support: none
    description: Nothing to show as a diff.
options:
  old:
    description:
      - The old variable names the play still reads; a name the collection does not know fails the task.
    type: list
    elements: str
    required: true
seealso:
  - module: gpuops.fleet.vllm_server_plan
"""

EXAMPLES = r"""
- name: Settle this play's variables (an old name still works, with a deprecation warning)
  gpuops.fleet.fleet_names:
    old: [gpu_cleanup_become, gpu_reclaim_memory_threshold_mib]
  register: gpu_cleanup_names

- name: Become as the deprecated gpu_cleanup_become says
  ansible.builtin.set_fact:
    ansible_become: "{{ gpu_cleanup_names.become }}"
  when: gpu_cleanup_names.become is not none
"""

RETURN = r"""
become:
  description: The first old become variable set, as a boolean; null when none is (Ansible's own become then applies).
  returned: when O(old) names a become variable
  type: bool
idle_threshold_mib:
  description: C(gpuops_fleet_idle_threshold_mib), else the first old name set, else 1024.
  returned: when O(old) names an idle-threshold variable
  type: int
state:
  description: C(vllm_server_state) (default V(started)); an old force variable set true turns V(started) into V(restarted).
  returned: when O(old) names a force variable
  type: str
check:
  description: C(vllm_server_check), else C(vllm_server_verify_launch), else true.
  returned: when O(old) names vllm_server_verify_launch
  type: bool
deprecated:
  description: The old names that are set for this host (each one warned about).
  returned: success
  type: list
  elements: str
"""
