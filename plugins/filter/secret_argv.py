# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: secret_argv
short_description: Find the secrets of a server's argv, to show it masked and to start it without a secret in its unit
version_added: 0.2.0
description:
  - A secret is the value of an option whose name has a word KEY, APIKEY, TOKEN, SECRET(S), PASSWORD, PASSWD or
    CREDENTIAL(S) (any case, words split at C(-) and C(_)), such as C(--api-key K), C(--api-key=K) or C(--hf-token K);
    the word after the option and the next ones up to a word that starts with C(--), or the part after C(=).
  - Returns the argv with each secret masked (to show or record), the API key the server will ask for, and the systemd
    form of the argv, in which each secret is a C(${VAR}) reference to a variable that the unit's C(EnvironmentFile=)
    sets, so that the unit file holds no secret.
author:
  - gpuops maintainers (@gpuops)
options:
  _input:
    description: The command, one word per element.
    type: list
    elements: str
    required: true
  env_prefix:
    description: The start of the name of each variable that carries a secret argument (the argument's position is added).
    type: str
    default: GPUOPS_SECRET_ARG_
seealso:
  - plugin: gpuops.fleet.systemd_exec
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Show the command without its API key
  ansible.builtin.debug:
    msg: "{{ (['vllm', 'serve', 'org/model', '--api-key', vault_key] | gpuops.fleet.secret_argv).masked | join(' ') }}"
"""

RETURN = r"""
_value:
  description: What was found.
  type: dict
  contains:
    masked:
      description: The argv with every secret value replaced by C(********).
      type: list
      elements: str
    secrets:
      description: How many secret values the argv holds.
      type: int
    api_key:
      description: The first value of the last C(--api-key) (what vLLM asks clients for), or an empty string.
      type: str
    exec_start:
      description: The argv quoted for C(ExecStart=) (as P(gpuops.fleet.systemd_exec#filter)), each secret a C(${VAR}) reference.
      type: str
    exec_env:
      description: The variables those references name, with the secret values, for the unit's C(EnvironmentFile=).
      type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.plugin_utils._secret_argv import argv_with_secrets


def secret_argv(argv, env_prefix="GPUOPS_SECRET_ARG_"):
    if not isinstance(argv, (list, tuple)) or not argv:
        raise AnsibleFilterError("secret_argv: expected a non-empty list of words, got %r" % (type(argv).__name__,))
    if not env_prefix or not str(env_prefix).replace("_", "A").isalnum() or str(env_prefix)[0].isdigit():
        raise AnsibleFilterError("secret_argv: env_prefix must be a variable name's start (letters, digits, _), got %r" % (env_prefix,))
    return argv_with_secrets([str(word) for word in argv], str(env_prefix))


class FilterModule:
    def filters(self):
        return {"secret_argv": secret_argv}
