# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: free_gpus
short_description: The indices of a host's free GPUs, from gpu_facts
version_added: 0.2.0
description:
  - Returns, in index order, the GPUs that nothing holds - they answered, NVML lists no process on them and they use at most
    O(threshold_mib) MiB - and, unless O(healthy=false), that nothing is known to be wrong with (no uncorrected ECC error,
    no pending or failed row remapping, no pending page retirement, not lost).
  - A GPU whose memory or processes were not read (V(null)) is not free.
  - The same rule decides "free" in the fleet report of M(gpuops.fleet.gpu_report).
author:
  - gpuops maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.gpu_facts_input
options:
  threshold_mib:
    description: The most memory in MiB a GPU with no process may use and still be free (an idle GPU is not at zero).
    type: int
    default: 1024
  healthy:
    description: Leave out GPUs that are unhealthy.
    type: bool
    default: true
seealso:
  - plugin: gpuops.fleet.unhealthy_gpus
    plugin_type: filter
  - module: gpuops.fleet.gpu_facts
"""

EXAMPLES = r"""
- name: Read the GPUs
  gpuops.fleet.gpu_facts:

- name: Group hosts by their number of free GPUs (gpus_free_0 .. gpus_free_8)
  ansible.builtin.group_by:
    key: "gpus_free_{{ ansible_facts | gpuops.fleet.free_gpus(threshold_mib=2048) | length }}"

- name: Start the job on the free GPUs
  ansible.builtin.debug:
    msg: "CUDA_VISIBLE_DEVICES={{ ansible_facts | gpuops.fleet.free_gpus | join(',') }}"
"""

RETURN = r"""
_value:
  description: The free GPUs' indices, ascending.
  type: list
  elements: int
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu import state as gpu_state


def free_gpus(facts, threshold_mib=gpu_state.DEFAULT_THRESHOLD_MIB, healthy=True):
    gpus = gpu_state.gpu_list(facts)
    if gpus is None:
        raise AnsibleFilterError("free_gpus: expected gpu_facts' ansible_facts, a registered result or a list of GPUs, got %s %r"
                                 % (type(facts).__name__, str(facts)[:80]))
    try:
        threshold = gpu_state.check_threshold(threshold_mib)
    except ValueError as exc:
        raise AnsibleFilterError("free_gpus: %s" % exc) from None
    if not isinstance(healthy, bool):
        raise AnsibleFilterError("free_gpus: healthy: %r is not true or false" % (healthy,))
    return sorted(gpu["index"] for gpu in gpus if isinstance(gpu.get("index"), int) and gpu_state.is_free(gpu, threshold, healthy))


class FilterModule:
    def filters(self):
        return {"free_gpus": free_gpus}
