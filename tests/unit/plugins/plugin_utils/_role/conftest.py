# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vllm_server role's variables as a run sees them: its defaults, read from the role, under a test's values."""

from __future__ import annotations

import os
import typing as t

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "..", "roles", "vllm_server", "defaults", "main.yml"))


def role_variables(**given: t.Any) -> t.Dict[str, t.Any]:
    with open(DEFAULTS, encoding="utf-8") as handle:
        variables = yaml.safe_load(handle)
    variables.update(given)
    if "{{" in str(variables["vllm_server_name"]):
        variables["vllm_server_name"] = "vllm-%s" % variables["vllm_server_port"]
    variables.setdefault("vllm_server_model", "org/model")
    if variables["vllm_server_model"] == "" and "vllm_server_model" not in given:
        variables["vllm_server_model"] = "org/model"
    return variables


@pytest.fixture
def variables() -> t.Callable[..., t.Dict[str, t.Any]]:
    return role_variables
