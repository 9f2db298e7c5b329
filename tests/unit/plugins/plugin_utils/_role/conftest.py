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
    """The role's defaults under ``given``, on a host whose inventory sets the model and a one-GPU server (the role has no
    default for either: a test that needs them unset passes None)."""
    with open(DEFAULTS, encoding="utf-8") as handle:
        variables = yaml.safe_load(handle)
    # this inventory's size, unless the test gives GPUs (their number is the size) or a size
    if "vllm_server_tensor_parallel_size" not in given and "vllm_server_gpus" not in given:
        variables["vllm_server_tensor_parallel_size"] = 1
    variables.update(given)
    if "{{" in str(variables["vllm_server_name"]):
        variables["vllm_server_name"] = "vllm-%s" % variables["vllm_server_port"]
    variables.setdefault("vllm_server_model", "org/model")
    return {name: value for name, value in variables.items() if value is not None}


@pytest.fixture
def variables() -> t.Callable[..., t.Dict[str, t.Any]]:
    return role_variables
