# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_ready with a systemd unit (a fake systemctl on PATH): the launch check, the last known-good mark and the lock's
release run on the unit's main PID read once it is ready, and the task returns the PID it judged."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from ansible_collections.gpuops.fleet.plugins.modules import vllm_ready
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main, capture
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.fake_systemctl import FakeSystemctl
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.loopback_http import LoopbackServer

psutil = pytest.importorskip("psutil")

UNIT = "gpuops-vllm-8000.service"


@pytest.fixture
def unit_running(tmp_path, monkeypatch):
    """A unit the fake systemctl started (a real `sleep` as its main process) and a server that answers /health."""
    capture(monkeypatch)
    fake = FakeSystemctl(str(tmp_path / "systemctl"), str(tmp_path / "units"))
    monkeypatch.setenv("PATH", fake.bin + os.pathsep + os.environ["PATH"])
    fake.set_unit(UNIT)
    subprocess.run([os.path.join(fake.bin, "systemctl"), "start", UNIT], check=True)
    server = LoopbackServer(lambda handler, body: (200, b""))
    try:
        yield fake, server
    finally:
        server.close()
        fake.end_all()


def test_the_check_mark_and_release_run_on_the_units_main_pid(unit_running, tmp_path, monkeypatch):
    fake, server = unit_running
    main = int(fake.units()[UNIT]["MainPID"])
    judged = []

    def launch_check(pynvml, psutil_, pid, create_time, gpus, size, env, secret_env=()):
        judged.append((pid, create_time))
        return {"ok": True, "checks": [], "workers": [], "msg": "PID %d: held" % pid}
    monkeypatch.setattr(vllm_ready, "run_launch_check", launch_check)
    monkeypatch.setattr(vllm_ready, "_deps", type("Deps", (), {
        "PSUTIL": type("D", (), {"module": psutil})(), "PYNVML": type("D", (), {"module": object()})(),
        "require": staticmethod(lambda module, *deps: None)}))
    lock = tmp_path / "s.lock"
    lock.write_text(json.dumps({"token": "t1"}))
    config = {"argv": ["vllm", "serve", "m"], "env": {}, "gpus": [0], "config_hash": "abc", "model": "m", "served_name": "m",
              "mode": "systemd", "tensor_parallel_size": 1, "port": 8000, "name": "vllm-8000"}
    result = call_main(vllm_ready, {"url": server.url, "unit": UNIT, "generate_timeout": 0,
                                    "check": {"gpus": [0], "tensor_parallel_size": 1},
                                    "mark_good": {"state_file": str(tmp_path / "s.json"), "config": config},
                                    "release_lock": {"path": str(lock), "token": "t1"}})
    assert result["ready"] and not result["failed"], result
    assert judged == [(main, psutil.Process(main).create_time())]
    assert result["pid"] == main and result["create_time"] == psutil.Process(main).create_time()
    assert result["check"]["ok"] and result["marked_good"] and (tmp_path / "s.last-good").exists()
    assert result["released"] and not lock.exists()


def test_a_ready_unit_without_a_main_pid_cannot_be_checked(unit_running, monkeypatch):
    fake, server = unit_running
    fake.end_all()
    fake.set_unit(UNIT, ActiveState="active", MainPID=0)
    result = call_main(vllm_ready, {"url": server.url, "unit": UNIT, "generate_timeout": 0,
                                    "check": {"gpus": [0], "tensor_parallel_size": 1}})
    assert result["failed"] and result["msg"].startswith("check: needs the server's process") and result["pid"] is None
