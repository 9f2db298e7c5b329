# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The API key a vLLM command line settles, for the secret_argv filter (on the controller). The rule is
module_utils/_secrets.py's (the metrics endpoint on each host asks a server with it too): this name stays for the
controller's code.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import api_key_of

__all__ = ["api_key_of"]
