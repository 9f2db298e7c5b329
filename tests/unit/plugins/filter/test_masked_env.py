# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The masked_env filter: the secrets' values masked, the rest as given."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter.masked_env import FilterModule, masked_env


def test_secret_values_are_masked_and_the_rest_kept():
    env = {"NCCL_PROTO": "LL", "HF_TOKEN": "hf_1", "TOKENIZERS_PARALLELISM": "false", "MY_CERT": "c", "GONE": None,
           "VLLM_API_KEY": None}
    assert masked_env(env, ["MY_CERT"]) == {"NCCL_PROTO": "LL", "HF_TOKEN": "********", "TOKENIZERS_PARALLELISM": "false",
                                            "MY_CERT": "********", "GONE": None, "VLLM_API_KEY": None}
    assert FilterModule().filters()["masked_env"] is masked_env


@pytest.mark.parametrize("env, extra", [(["HF_TOKEN=x"], None), ({"A": "1"}, "A")])
def test_bad_input_is_refused(env, extra):
    with pytest.raises(AnsibleFilterError, match="masked_env"):
        masked_env(env, extra)
