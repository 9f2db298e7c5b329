# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""An environment as the controller shows it (the masked_env filter and the vllm_server role's plan); which names are
secrets is module_utils/_secrets.py's.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import MASK, secret_env_names


def masked_env(env: t.Mapping[str, t.Any], extra: t.Iterable[str] = ()) -> t.Dict[str, t.Any]:
    """The environment with each secret value (one that is set) replaced by MASK, other values as they are."""
    secret = set(secret_env_names(env, extra))
    return {name: (MASK if name in secret and value is not None else value) for name, value in env.items()}
