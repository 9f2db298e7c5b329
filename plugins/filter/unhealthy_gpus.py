# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: unhealthy_gpus
short_description: The indices of a host's unhealthy GPUs, from gpu_facts
version_added: 0.2.0
description:
  - Returns, in index order, the GPUs that are lost (they did not answer) or report uncorrected ECC errors since the driver
    loaded, a failed or pending row remapping, rows remapped for uncorrectable errors, pending page retirements or pages
    retired for double-bit errors.
  - Clock slowdowns are not counted (the fleet report shows them).
author:
  - gpuops maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.fleet.gpu_facts_input
seealso:
  - plugin: gpuops.fleet.free_gpus
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Group the hosts that have an unhealthy GPU
  ansible.builtin.group_by:
    key: gpus_unhealthy
  when: ansible_facts | gpuops.fleet.unhealthy_gpus | length > 0
"""

RETURN = r"""
_value:
  description: The unhealthy GPUs' indices, ascending.
  type: list
  elements: int
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu import state as gpu_state


def unhealthy_gpus(facts):
    gpus = gpu_state.gpu_list(facts)
    if gpus is None:
        raise AnsibleFilterError("unhealthy_gpus: expected gpu_facts' ansible_facts, a registered result or a list of GPUs, got %s %r"
                                 % (type(facts).__name__, str(facts)[:80]))
    return sorted(gpu["index"] for gpu in gpus if isinstance(gpu.get("index"), int) and gpu_state.is_unhealthy(gpu))


class FilterModule:
    def filters(self):
        return {"unhealthy_gpus": unhealthy_gpus}
