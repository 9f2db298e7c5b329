# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_server_check as Ansible runs it: bad input fails naming the option, before anything is read; what it prints
hides secret values only."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.modules import vllm_server_check
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main, run_printed

TOKEN = "hf_secret123"


@pytest.mark.usefixtures("captured")
@pytest.mark.parametrize("args, needle", [
    ({"pid": 1, "gpus": [], "tensor_parallel_size": 1}, "gpus"),
    ({"pid": 1, "gpus": [0, 0], "tensor_parallel_size": 2}, "gpus"),
    ({"pid": 1, "gpus": [-1], "tensor_parallel_size": 1}, "gpus"),
    ({"pid": 1, "gpus": [0], "tensor_parallel_size": 0}, "tensor_parallel_size"),
    ({"pid": 0, "gpus": [0], "tensor_parallel_size": 1}, "pid"),
    ({"pid": 1, "gpus": ["zero"], "tensor_parallel_size": 1}, "gpus"),
])
def test_bad_input_names_the_option(args, needle):
    result = call_main(vllm_server_check, args)
    assert result["failed"] and needle in result["msg"], result


def test_check_module_hides_secret_values_only(capsys):
    result, text = run_printed(vllm_server_check, {"pid": 0, "gpus": [0], "tensor_parallel_size": 1,
                                                   "env": {"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL"}}, capsys)
    assert result["failed"] and "pid" in result["msg"]
    assert TOKEN not in text and result["invocation"]["module_args"]["env"]["NCCL_PROTO"] == "LL"
