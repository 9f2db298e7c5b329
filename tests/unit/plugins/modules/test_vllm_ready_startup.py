# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_ready's startup: read from this launch's lines of the log only (from the record's offset, else after the last
launch line), kept beside the record per configuration, and the timeout that follows the last start-ups (a hang fails
at twice the usual time, naming the log's last phase)."""

from __future__ import annotations

import json
import os
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.modules import vllm_ready
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import LoopbackServer

psutil = pytest.importorskip("psutil")

OLD = ("==== 2026-01-01 00:00:00 launching: vllm serve m\n"
       "INFO 01-01 00:00:10 [default_loader.py:384] Loading weights took 99.00 seconds\n"
       "INFO 01-01 00:00:20 [backends.py:393] Compiling a graph for compile range (1, 8192) takes 50.00 s\n")
NEW = ("==== 2026-01-01 01:00:00 launching: vllm serve m\n"
       "INFO 01-01 01:00:02 [default_loader.py:384] Loading weights took 2.00 seconds\n"
       "INFO 01-01 01:00:02 [gpu_model_runner.py:2581] Model loading took 0.2300 GiB memory and 2.000000 seconds\n"
       "INFO 01-01 01:00:03 [backends.py:286] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 0.500 s\n"
       "INFO 01-01 01:00:03 [monitor.py:48] torch.compile took 0.50 s in total\n")


@pytest.fixture
def server():
    """A loopback server whose /health answers ``state["status"]``, nothing else asked of it."""
    state = {"status": 200}
    loop = LoopbackServer(lambda handler, body: (state["status"], b""))
    try:
        yield loop, state
    finally:
        loop.close()


def record(tmp_path, log_offset):
    me = psutil.Process(os.getpid())
    state_file = tmp_path / "vllm-8000.json"
    state_file.write_text(json.dumps({"pid": me.pid, "create_time": me.create_time(), "config_hash": "abc",
                                      "log_file": str(tmp_path / "vllm.log"), "log_offset": log_offset}))
    return state_file


@pytest.mark.usefixtures("captured")
@pytest.mark.parametrize("offset", [True, False])
def test_the_startup_of_this_launch_only_and_kept_by_configuration(server, tmp_path, offset):
    loop, _state = server
    log = tmp_path / "vllm.log"
    log.write_text(OLD + NEW)
    state_file = record(tmp_path, len(OLD) if offset else None)
    me = psutil.Process(os.getpid())
    args = {"url": loop.url, "generate_timeout": 0, "log_file": str(log), "state_file": str(state_file),
            "pid": me.pid, "create_time": me.create_time(), "since": time.time() - 5.0,
            "startup": {"config_hash": "abc", "launched": me.create_time() - 1.0}}
    result = call_main(vllm_ready, args)
    assert result["ready"] and not result["failed"], result
    startup = result["startup"]
    assert [phase["name"] for phase in startup["phases"]] == ["weights", "compile"]
    assert startup["phases"][0]["seconds"] == 2.0 and startup["phases"][1]["cache"] == "hit"
    assert 5.0 <= startup["total_s"] < 30 and startup["line"].startswith("start-up 5.")
    kept = json.loads((tmp_path / "vllm-8000.startups").read_text())
    assert [entry["total_s"] for entry in kept["abc"]] == [startup["total_s"]]

    # remember=false (a server checked again, not launched): nothing more is kept
    call_main(vllm_ready, dict(args, startup={"config_hash": "abc", "remember": False}))
    assert len(json.loads((tmp_path / "vllm-8000.startups").read_text())["abc"]) == 1

    # a server that ran before this run's launch (or no launch at all: the standalone ready entry point) is no start-up
    for launched in (me.create_time() + 3600.0, None):
        again = call_main(vllm_ready, dict(args, startup={"config_hash": "abc", "launched": launched}))
        assert again["ready"] and again["startup"]["total_s"] >= 5.0, again
        assert len(json.loads((tmp_path / "vllm-8000.startups").read_text())["abc"]) == 1


@pytest.mark.usefixtures("captured")
def test_a_hang_fails_at_twice_the_last_startup_naming_the_last_phase(server, tmp_path):
    loop, state = server
    state["status"] = 503
    log = tmp_path / "vllm.log"
    log.write_text(NEW.split("INFO 01-01 01:00:03", maxsplit=1)[0])  # the weights, then nothing
    state_file = record(tmp_path, 0)
    (tmp_path / "vllm-8000.startups").write_text(json.dumps({"abc": [{"total_s": 0.6, "at": 1.0}], "other": [{"total_s": 0.1, "at": 2.0}]}))
    me = psutil.Process(os.getpid())
    began = time.time()
    result = call_main(vllm_ready, {"url": loop.url, "generate_timeout": 0, "log_file": str(log), "state_file": str(state_file),
                                    "pid": me.pid, "create_time": me.create_time(), "timeout": 900, "since": began,
                                    "startup": {"config_hash": "abc", "factor": 2, "floor": 0.5}})
    took = time.time() - began
    assert result["failed"] and not result["ready"], result
    assert 1.2 <= took < 10 and result["timeout_s"] == 1.2
    assert "was not ready after 1.2 s (2 x the slowest of the last 1 start-up(s)" in result["msg"]
    assert "the log's last start-up phase: weights" in result["msg"]
    assert result["startup"]["last_phase"] == "weights"
    # a configuration never started keeps the whole ceiling (here: a short one, so the test ends)
    result = call_main(vllm_ready, {"url": loop.url, "generate_timeout": 0, "log_file": str(log), "state_file": str(state_file),
                                    "timeout": 0.3, "startup": {"config_hash": "new"}})
    assert result["failed"] and result["timeout_s"] == 0.3 and "was not ready after 0.3 s (last /health" in result["msg"]


@pytest.mark.usefixtures("captured")
def test_bad_startup_options_name_the_option(server):
    loop, _state = server
    result = call_main(vllm_ready, {"url": loop.url, "startup": {"config_hash": "abc", "factor": -1}})
    assert result["failed"] and "startup.factor" in result["msg"], result
