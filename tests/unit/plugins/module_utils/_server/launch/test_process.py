# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The process launch backend on real processes: status, launch, stop by record, the stop of a server taken over
(drained first), check mode; each outcome judged by psutil and the files, not by the backend's result alone."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import process
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.process import LaunchSpec, ServerError, Target
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.fake_systemctl import FakeModule
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.loopback_http import LoopbackServer

psutil = pytest.importorskip("psutil")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def target(tmp_path):
    made = Target(str(tmp_path / "s.json"), None, "h1")
    yield made
    record = process.read_record(made.state_file) if os.path.exists(made.state_file) else None
    if record and not gone(record["pid"]):
        os.kill(record["pid"], 9)


def spec(tmp_path, argv=None):
    argv = argv or SLEEPER
    return LaunchSpec(argv=argv, env={"X": 1}, shown_argv=list(argv), log_file=str(tmp_path / "s.log"), metadata={"port": 1})


def test_launch_status_stop(target, tmp_path):
    preview = process.launch(FakeModule(check_mode=True), psutil, target, spec(tmp_path))
    assert preview["changed"] and preview["msg"].startswith("would launch ") and not os.path.exists(target.state_file)
    launched = process.launch(FakeModule(), psutil, target, spec(tmp_path))
    pid = launched["pid"]
    assert launched["launched"] and psutil.Process(pid).create_time() == launched["create_time"]
    assert stat.S_IMODE(os.stat(target.state_file).st_mode) == 0o600
    with open(target.state_file, encoding="utf-8") as handle:
        assert json.load(handle)["pid"] == pid
    reading = process.status(FakeModule(), psutil, target)
    assert (reading["mode"], reading["running"], reading["pid"], reading["config_matches"], reading["crash_loop"]) == (
        "process", True, pid, True, "")
    with pytest.raises(ServerError) as caught:
        process.launch(FakeModule(), psutil, target._replace(config_hash="h2"), spec(tmp_path))
    assert "another configuration" in str(caught.value) and caught.value.result["pid"] == pid
    preview = process.stop(FakeModule(check_mode=True), psutil, target)
    assert preview["changed"] and preview["msg"] == "would stop PID %d" % pid and not gone(pid)
    stopped = process.stop(FakeModule(), psutil, target, stop_timeout=5)
    assert [entry["pid"] for entry in stopped["stopped"]] == [pid] and gone(pid) and not os.path.exists(target.state_file)
    assert stopped["msg"] == "stopped PID %d and 0 process(es) of its tree" % pid


def test_a_server_taken_over_is_drained_then_stopped_and_another_start_time_is_left_alone():
    metrics = [b"vllm:num_requests_running 1\n", b"vllm:num_requests_running 0\n"]
    server = LoopbackServer(lambda handler, body: (200, metrics.pop(0) if len(metrics) > 1 else metrics[0]))
    child = subprocess.Popen(SLEEPER)
    try:
        created = psutil.Process(child.pid).create_time()
        wrong = process.stop_taken_over(FakeModule(), psutil, child.pid, created - 100)
        assert not wrong["changed"] and wrong["stopped"] == [] and not gone(child.pid)
        done = process.stop_taken_over(FakeModule(), psutil, child.pid, created, drain_url=server.url, drain_timeout=10, stop_timeout=5)
        assert done["drained"]["drained"] and done["drained"]["running_at_start"] == 1
        assert [entry["pid"] for entry in done["stopped"]] == [child.pid] and child.wait(5) is not None
    finally:
        server.close()
        if child.poll() is None:
            child.kill()
            child.wait()
