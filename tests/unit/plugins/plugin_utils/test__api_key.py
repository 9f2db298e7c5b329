# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API key a vLLM command line settles."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils._api_key import api_key_of


@pytest.mark.parametrize("argv, env, key", [
    (["vllm", "serve", "m", "--api-key", "k1"], {}, "k1"),
    (["vllm", "serve", "m", "--api-key=k2"], {"VLLM_API_KEY": "e"}, "k2"),
    (["vllm", "serve", "m", "--api-key", "a", "b", "--api-key", "c", "d"], {}, "c"),
    (["vllm", "serve", "m"], {"VLLM_API_KEY": "e"}, "e"),
    (["vllm", "serve", "m", "--hf-token", "t"], {}, ""),
    (["vllm", "serve", "m"], None, ""),
])
def test_api_key_as_vllm_settles_it(argv, env, key):
    assert api_key_of(argv, env) == key
