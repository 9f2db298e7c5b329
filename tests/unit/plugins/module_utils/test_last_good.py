# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The last known-good configuration beside a server's record (module_utils/_server/record.py)."""

from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import masked_argv
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import (
    RecordError, carry_last_good, good_path, good_summary, mark_good, read_last_good,
)

CONFIG = {"argv": ["vllm", "serve", "m", "--api-key", "sk-secret"], "env": {"NCCL_PROTO": "LL", "HF_TOKEN": "hf_secret"},
          "gpus": [0, 1], "config_hash": "abc", "model": "m", "served_name": "m", "mode": "process",
          "tensor_parallel_size": 2, "port": 8000, "name": "vllm-8000"}


def test_mark_read_carry_and_summary(tmp_path):
    state = str(tmp_path / "vllm-8000.json")
    assert good_path(state) == str(tmp_path / "vllm-8000.last-good")
    assert read_last_good(state) is None and carry_last_good(state) is None
    mark_good(state, CONFIG, 1234.5)
    assert stat.S_IMODE(os.stat(good_path(state)).st_mode) == 0o600
    good = read_last_good(state)
    assert good["env"]["HF_TOKEN"] == "hf_secret" and good["since"] == 1234.5
    assert carry_last_good(state) == {"config_hash": "abc", "since": 1234.5}
    shown = good_summary(good, masked_argv)
    assert "hf_secret" not in repr(shown) and "sk-secret" not in repr(shown)
    assert shown["env_keys"] == ["HF_TOKEN", "NCCL_PROTO"] and shown["gpus"] == [0, 1]


@pytest.mark.parametrize("change, named", [
    ({"argv": []}, "argv"), ({"env": {"A": 1}}, "env"), ({"gpus": [-1]}, "gpus"), ({"config_hash": ""}, "config_hash"),
])
def test_a_configuration_that_cannot_be_launched_is_refused(tmp_path, change, named):
    with pytest.raises(RecordError) as raised:
        mark_good(str(tmp_path / "s.json"), dict(CONFIG, **change), 1.0)
    assert named in str(raised.value)
    assert not os.path.exists(tmp_path / "s.last-good")


def test_a_broken_file_is_an_error_but_not_for_the_launch(tmp_path):
    state = str(tmp_path / "s.json")
    with open(good_path(state), "w", encoding="utf-8") as handle:
        handle.write("{not json")
    with pytest.raises(RecordError):
        read_last_good(state)
    assert carry_last_good(state) is None
