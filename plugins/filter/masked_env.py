# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: masked_env
short_description: An environment as it may be shown or written down, the values of its secrets masked
version_added: 0.2.0
description:
  - Returns the mapping with the value of every secret name replaced by C(********). A name is secret when one of its words
    (split at anything but letters and digits) is KEY, APIKEY, TOKEN, SECRET(S), PASSWORD, PASSWD or CREDENTIAL(S), in any
    case, or when O(extra) lists it; this is the rule of the role P(gpuops.fleet.vllm_server#role) and its modules.
  - A value of V(null) stays V(null) (in a benchmark configuration it removes a variable).
author:
  - gpuops maintainers (@gpuops)
options:
  _input:
    description: The environment, name to value.
    type: dict
    required: true
  extra:
    description: More names to treat as secret (the role's C(vllm_server_secret_env)).
    type: list
    elements: str
    default: []
seealso:
  - plugin: gpuops.fleet.secret_argv
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Show the server's environment without its token
  ansible.builtin.debug:
    msg: "{{ {'NCCL_PROTO': 'LL', 'HF_TOKEN': vault_token} | gpuops.fleet.masked_env }}"
"""

RETURN = r"""
_value:
  description: The same names; each secret's value is C(********), the others as given.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.plugin_utils._masked_env import masked_env as masked


def masked_env(env, extra=None):
    if not isinstance(env, dict):
        raise AnsibleFilterError("masked_env: expected a mapping of names to values, got %s" % type(env).__name__)
    if extra is not None and not isinstance(extra, (list, tuple)):
        raise AnsibleFilterError("masked_env: extra must be a list of names, got %s" % type(extra).__name__)
    return masked(env, [str(name) for name in extra or []])


class FilterModule:
    def filters(self):
        return {"masked_env": masked_env}
