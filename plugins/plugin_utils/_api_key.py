# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The API key a vLLM command line settles, for the secret_argv filter (on the controller); which words are secrets
is module_utils/_secrets.py's.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import API_KEY_ENV, API_KEY_OPTION, argv_secrets


def api_key_of(argv: t.Sequence[t.Any], env: t.Optional[t.Mapping[str, t.Any]] = None) -> str:
    """The key a client must send, as vLLM settles it: the first value of the last --api-key, else VLLM_API_KEY."""
    key = ""
    for secret in argv_secrets(argv):
        if secret.option == API_KEY_OPTION[2:]:
            word = str(argv[secret.index])
            if secret.start or str(argv[secret.index - 1]) == API_KEY_OPTION:
                key = word[secret.start:]
    if not key and env:
        key = str(env.get(API_KEY_ENV) or "")
    return key
