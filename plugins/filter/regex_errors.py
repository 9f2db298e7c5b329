# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: regex_errors
short_description: What is wrong with a list of process patterns, judged as the collection's modules judge them
version_added: 0.2.0
description:
  - Returns one message per pattern that the collection's modules would refuse (an empty pattern, which matches every
    process, or one that is not a valid Python regular expression); an empty list when every pattern is usable.
  - Lets a playbook or role refuse bad patterns while checking its variables, before any module runs.
author:
  - gpuops maintainers (@gpuops)
options:
  _input:
    description: The patterns.
    type: list
    elements: raw
    required: true
  name:
    description: The variable's name, used in each message.
    type: str
    default: patterns
"""

EXAMPLES = r"""
- name: Refuse patterns that would not compile
  ansible.builtin.assert:
    that: vllm_server_reclaim_match | gpuops.fleet.regex_errors | length == 0
    fail_msg: "{{ vllm_server_reclaim_match | gpuops.fleet.regex_errors('vllm_server_reclaim_match') | join('; ') }}"
"""

RETURN = r"""
_value:
  description: One message per unusable pattern, naming the variable and the pattern; empty when all are usable.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import regexes


def regex_errors(patterns, name="patterns"):
    if not isinstance(patterns, (list, tuple)):
        raise AnsibleFilterError("regex_errors: expected a list of patterns, got %s" % type(patterns).__name__)
    errors = []
    for pattern in patterns:
        try:
            regexes(name, [pattern])
        except SpecError as exc:
            errors.append(str(exc))
    return errors


class FilterModule:
    def filters(self):
        return {"regex_errors": regex_errors}
