# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_reclaim's deciding reading comes from an NVML session of its own: the module's is shut down, a new one opened."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.test_gpu_reclaim import (  # pylint: disable=unused-import
    FAST,
    Host,
    host_pid_namespace,
    run_module,
)
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.fake_psutil import vllm_server
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.fake_pynvml import FakeNvml

MEMORY = "nvmlDeviceGetMemoryInfo_v2"


class SessionNvml(FakeNvml):
    """Records init and shutdown among the calls; ``late_mib`` is added to GPU 0's used memory in every session after the first
    (a reading that only a new session shows)."""

    def __init__(self, devices, late_mib=0):
        super().__init__(devices)
        self.sessions = 0
        self.late_mib = late_mib

    def nvmlInit(self):
        super().nvmlInit()
        self.sessions += 1
        self.calls.append("nvmlInit")

    def nvmlShutdown(self):
        super().nvmlShutdown()
        self.calls.append("nvmlShutdown")

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        info = super().nvmlDeviceGetMemoryInfo(handle, version)
        if handle == 0 and self.sessions > 1:
            info.used += self.late_mib * 1024 * 1024
        return info


def host_with(late_mib=0):
    rows, held = vllm_server(1000, range(8))
    host = Host(rows, held)
    host.lib = SessionNvml(host.lib.devices, late_mib)
    return host


def test_the_last_reading_is_taken_after_a_shutdown_and_a_new_init(monkeypatch):
    host = host_with()
    result = run_module(monkeypatch, host, dict(FAST, timeout=5))
    assert result["verified"] is True, result["msg"]
    calls = host.lib.calls
    assert calls.count("nvmlInit") == 2 and calls.count("nvmlShutdown") == 2, "one re-init, and every init shut down"
    second = calls.index("nvmlInit", calls.index("nvmlInit") + 1)
    assert calls[second - 1] == "nvmlShutdown", "the module's session is shut down before the new one is opened"
    assert calls[-1] == "nvmlShutdown"
    fresh = calls[second:-1]
    assert fresh.count(MEMORY) >= 8 and fresh.count("nvmlDeviceGetUUID") == 8, "every GPU read again, its UUID included"
    assert "nvmlDeviceGetComputeRunningProcesses" in fresh
    assert MEMORY not in calls[calls.index("nvmlShutdown"):second], "no reading between the shutdown and the new init"
    assert result["reading_after"]["fresh_session"] is True
    assert 0 <= result["reading_after"]["session_opened_s"] <= result["elapsed_s"]


def test_a_new_session_that_cannot_be_opened_fails_the_verification(monkeypatch):
    host = host_with()
    real_init = host.lib.nvmlInit

    def init_once():
        if host.lib.sessions:
            raise host.lib.NVMLError(9)  # driver not loaded
        real_init()

    host.lib.nvmlInit = init_once
    result = run_module(monkeypatch, host, dict(FAST, timeout=5))
    assert result["verified"] is False and result.get("failed")
    assert "cannot initialise NVML again" in result["msg"]
    assert result["reading_after"] == {"fresh_session": False, "session_opened_s": None}


def test_the_new_sessions_reading_is_the_one_judged(monkeypatch):
    host = host_with(late_mib=5000)  # the first session reads GPU 0 free; a new session sees 5000 MiB held by no process
    result = run_module(monkeypatch, host, dict(FAST, timeout=0.5))
    assert result["verified"] is False and result.get("failed")
    gpu0 = result["gpus"][0]
    assert gpu0["memory_used_mib_after"] == 5000 and not gpu0["verified"]
    assert all(g["verified"] for g in result["gpus"][1:])
    assert "GPU 0: 5000 MiB used with no process holding it" in result["msg"]
    assert result["reading_after"]["fresh_session"] is True
