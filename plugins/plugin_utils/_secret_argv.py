# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The secrets of a server's argv, on the controller: the argv masked, the API key it settles, and its systemd form in
which each secret is a ${VAR} reference (the secret_argv filter and the vllm_server role's plan share it).

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import argv_secrets, masked_argv
from ansible_collections.gpuops.fleet.plugins.plugin_utils._api_key import api_key_of
from ansible_collections.gpuops.fleet.plugins.plugin_utils._systemd_quote import systemd_quote

DEFAULT_PREFIX = "GPUOPS_SECRET_ARG_"


def argv_with_secrets(words: t.Sequence[str], env_prefix: str = DEFAULT_PREFIX) -> t.Dict[str, t.Any]:
    """masked, secrets (how many), api_key, exec_start (the systemd form) and exec_env (the references' values)."""
    words = [str(word) for word in words]
    secrets = argv_secrets(words)
    quoted = [systemd_quote(word) for word in words]  # as systemd_exec, word by word
    exec_env = {}
    for secret in secrets:
        name = "%s%d" % (env_prefix, secret.index)
        word = words[secret.index]
        exec_env[name] = word[secret.start:]
        if secret.start:
            quoted[secret.index] = systemd_quote(word[:secret.start])[:-1] + "${%s}\"" % name
        else:
            quoted[secret.index] = "${%s}" % name
    return {"masked": masked_argv(words), "secrets": len(secrets), "api_key": api_key_of(words),
            "exec_start": " ".join(quoted), "exec_env": exec_env}
