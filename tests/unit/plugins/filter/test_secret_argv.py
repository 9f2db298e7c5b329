# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The secret_argv filter: masked argv, API key, and the systemd form without the secret."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter.secret_argv import FilterModule, secret_argv
from ansible_collections.gpuops.fleet.plugins.plugin_utils._systemd_quote import systemd_exec


def test_no_secret_is_systemd_exec():
    argv = ["vllm", "serve", "org/my model", "--port", "8000", "a$b", ";"]
    found = secret_argv(argv)
    assert found == {"masked": argv, "secrets": 0, "api_key": "", "exec_start": systemd_exec(argv), "exec_env": {}}


def test_secrets_become_references():
    found = secret_argv(["vllm", "serve", "m", "--api-key", "sk-1", "--hf-token=t$%\"2", "--port", 8000])
    assert found["masked"] == ["vllm", "serve", "m", "--api-key", "********", "--hf-token=********", "--port", "8000"]
    assert found["api_key"] == "sk-1" and found["secrets"] == 2
    assert found["exec_env"] == {"GPUOPS_SECRET_ARG_4": "sk-1", "GPUOPS_SECRET_ARG_5": "t$%\"2"}
    assert found["exec_start"] == ('"vllm" "serve" "m" "--api-key" ${GPUOPS_SECRET_ARG_4} "--hf-token=${GPUOPS_SECRET_ARG_5}"'
                                   ' "--port" "8000"')
    assert "sk-1" not in found["exec_start"] and "t$" not in found["exec_start"]


def test_prefix_and_bad_input():
    assert "${S_4}" in secret_argv(["v", "s", "m", "--api-key", "k"], env_prefix="S_")["exec_start"]
    for bad in ([], "vllm serve", None):
        with pytest.raises(AnsibleFilterError, match="secret_argv"):
            secret_argv(bad)
    for prefix in ("", "1X", "A-B", "A B"):
        with pytest.raises(AnsibleFilterError, match="env_prefix"):
            secret_argv(["v"], env_prefix=prefix)


def test_registered():
    assert FilterModule().filters()["secret_argv"] is secret_argv
