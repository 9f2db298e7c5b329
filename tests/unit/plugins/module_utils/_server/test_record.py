# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Server records (_server/record): atomic JSON, refused when malformed, trusted only with the process's start time; the last
known-good configuration beside a record."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import psutil
import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import masked_argv
from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import (
    carry_last_good, good_config, good_path, good_summary, mark_good, read_last_good, read_record, recorded_process, RecordError, remove_record, same_process,
    write_record)


def test_write_then_read_round_trip(tmp_path):
    path = str(tmp_path / "d" / "vllm-8000.json")
    write_record(path, {"pid": 12, "create_time": 3.5, "config_hash": "abc"})
    assert read_record(path) == {"pid": 12, "create_time": 3.5, "config_hash": "abc"}
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["vllm-8000.json"]  # no temporary left behind
    assert remove_record(path) and not remove_record(path)


def test_missing_record_is_none(tmp_path):
    assert read_record(str(tmp_path / "nope.json")) is None


@pytest.mark.parametrize("content", ["{", "[]", json.dumps({"pid": "12", "create_time": 1.0}), json.dumps({"pid": 12})])
def test_malformed_record_is_refused(tmp_path, content):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(RecordError, match=str(path)):
        read_record(str(path))


def test_same_process_needs_the_same_start_time():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        created = psutil.Process(child.pid).create_time()
        assert same_process(psutil, child.pid, created) is not None
        assert same_process(psutil, child.pid, created - 5) is None  # a reused PID: another process
        assert recorded_process(psutil, {"pid": child.pid, "create_time": created}).pid == child.pid
    finally:
        child.kill()
        child.wait()
    assert same_process(psutil, child.pid, created) is None
    assert recorded_process(psutil, None) is None


def test_a_zombie_is_not_the_server():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    created = psutil.Process(child.pid).create_time()
    for _attempt in range(200):
        if psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE:
            break
        time.sleep(0.05)
    assert same_process(psutil, child.pid, created) is None
    child.wait()


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


def test_a_container_configuration_is_kept_and_its_run_options_masked_in_the_summary(tmp_path):
    state = str(tmp_path / "vllm-8000.json")
    box = {"name": "gpuops-vllm-8000", "runtime": "podman", "image": "vllm/vllm-openai:v0.10.2", "volumes": ["/models:/models:ro"],
           "run_options": ["--api-key", "sk-in-options"], "restart": "unless-stopped"}
    mark_good(state, dict(CONFIG, mode="container", container=box), 1.0)
    assert read_last_good(state)["container"] == box
    shown = good_summary(read_last_good(state), masked_argv)
    assert shown["container"]["image"] == "vllm/vllm-openai:v0.10.2" and "sk-in-options" not in repr(shown)
    assert good_config(dict(CONFIG, container=box), "config")["container"] == box
    with pytest.raises(RecordError) as raised:
        good_config(dict(CONFIG, container="vllm/vllm-openai"), "config")
    assert "config: container must be a dict" in str(raised.value)


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


def test_marking_the_kept_configuration_again_leaves_the_file_as_it_is(tmp_path):
    state_file = str(tmp_path / "vllm-8000.json")
    config = {"argv": ["vllm", "serve", "m"], "env": {"NCCL_PROTO": "LL"}, "gpus": [0, 1], "config_hash": "abc", "mode": "systemd",
              "tensor_parallel_size": 2, "port": 8000, "name": "vllm-8000", "model": "m", "served_name": "m"}
    first = mark_good(state_file, config, 100.0)
    before = os.stat(good_path(state_file))
    again = mark_good(state_file, config, 200.0)
    after = os.stat(good_path(state_file))
    assert again["since"] == first["since"] == 100.0
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    # another configuration is kept anew, since its own time
    changed = mark_good(state_file, dict(config, env={"NCCL_PROTO": "LL128"}), 300.0)
    assert changed["since"] == 300.0 and read_last_good(state_file)["env"] == {"NCCL_PROTO": "LL128"}
