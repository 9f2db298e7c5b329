# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Server records: atomic JSON, refused when malformed, trusted only with the process's start time."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil
import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.record import (
    RecordError, read_record, recorded_process, remove_record, same_process, write_record,
)


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
