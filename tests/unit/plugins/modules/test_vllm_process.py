# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_process in the systemd mode, as Ansible runs it (a fake systemctl on PATH): status with the decision, the
launch, the stop that disables; the same result keys as the process mode; the options each mode needs."""

from __future__ import annotations

import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import systemd
from ansible_collections.gpuops.fleet.plugins.modules import vllm_process
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main, capture
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.fake_systemctl import FakeSystemctl

psutil = pytest.importorskip("psutil")

UNIT = "gpuops-vllm-8000.service"
KEYS = {"mode", "running", "pid", "create_time", "config_hash", "config_matches", "healthy", "health", "generates", "generation",
        "crash_loop", "record", "launched", "stopped", "log_file", "env_keys", "secret_env_keys"}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    capture(monkeypatch)
    found = FakeSystemctl(str(tmp_path / "systemctl"), str(tmp_path / "units"))
    monkeypatch.setenv("PATH", found.bin + os.pathsep + os.environ["PATH"])
    monkeypatch.setattr(systemd, "UNIT_DIR", found.unit_dir)
    try:
        yield found
    finally:
        found.end_all()


def test_systemd_mode_status_launch_status_stop(fake, tmp_path):
    base = {"mode": "systemd", "unit": UNIT, "state_file": str(tmp_path / "s.json"), "config_hash": "h1"}
    before = call_main(vllm_process, dict(base, state="status", decide={"state": "started"}))
    assert KEYS <= set(before) and before["mode"] == "systemd" and before["running"] is False
    assert before["reason"] == "no managed server ran" and not before["failed"]

    launch = dict(base, state="running", argv=["vllm", "serve", "m", "--api-key", "sk-1"], env={"NCCL_PROTO": "LL"},
                  systemd={"content": "[Service]\nExecStart=/bin/true\n", "env_file": str(tmp_path / "s.env"),
                           "exec_env": {"GPUOPS_SECRET_ARG_4": "sk-1"}})
    launched = call_main(vllm_process, launch)
    main = int(fake.units()[UNIT]["MainPID"])
    assert launched["launched"] and launched["pid"] == main and launched["unit_changed"] and KEYS <= set(launched), launched
    assert "sk-1" not in str(launched)

    after = call_main(vllm_process, dict(base, state="status", decide={"state": "started"}))
    # no /health asked: the running unit with this configuration is judged by it
    assert after["running"] and after["pid"] == main and after["config_matches"]
    assert after["reason"] == "it does not answer /health (no answer)"
    forced = call_main(vllm_process, dict(base, state="status", decide={"state": "restarted"}))
    assert forced["reason"] == "a restart was forced"

    stopped = call_main(vllm_process, dict(base, state="stopped", systemd={"disable": True}))
    assert [entry["pid"] for entry in stopped["stopped"]] == [main] and stopped["changed"]
    assert fake.units()[UNIT]["ActiveState"] == "inactive" and fake.units()[UNIT]["UnitFileState"] == "disabled"
    assert fake.verbs()[-2:] == ["stop %s" % UNIT, "disable %s" % UNIT]


@pytest.mark.parametrize("args, needle", [
    ({"mode": "systemd", "state": "status"}, "unit"),
    ({"mode": "systemd", "unit": UNIT, "state": "running", "argv": ["vllm"]}, "systemd.content"),
    ({"mode": "systemd", "unit": UNIT, "state": "running", "argv": ["vllm"], "systemd": {"content": "x"}}, "systemd.env_file"),
    ({"mode": "process", "state": "running", "argv": ["vllm"]}, "log_file"),
    ({"state": "status", "listener": {"port": 0}}, "listener.port"),
    ({"state": "status", "decide": {"state": "on"}}, "decide"),
])
def test_each_mode_names_the_option_it_lacks(fake, tmp_path, args, needle):
    result = call_main(vllm_process, dict(args, state_file=str(tmp_path / "s.json")))
    assert result["failed"] and needle in result["msg"], result
    assert fake.calls() == []
