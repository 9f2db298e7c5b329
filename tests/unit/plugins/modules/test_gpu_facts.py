# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_facts as Ansible runs it (patch_module_args), over a fake pynvml."""

from __future__ import annotations

import json
import os

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.modules import gpu_facts
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.fake_pynvml import FakeNvml, device, proc
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils.test_smi import APPS_CSV, GPU_CSV

MISSING_PID = 4194305  # above the largest pid_max: no process of this namespace has it


class Exit(Exception):
    def __init__(self, result):
        super().__init__(result)
        self.result = result


def run_module(args, monkeypatch):
    warnings = []

    def exit_json(self, **result):
        raise Exit(dict(result, warnings=warnings))

    def fail_json(self, msg, **result):
        raise Exit(dict(result, failed=True, msg=msg))

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning: warnings.append(warning))
    with patch_module_args(args):
        with pytest.raises(Exit) as caught:
            gpu_facts.main()
    json.dumps(caught.value.result)  # what the module returns must be JSON
    return caught.value.result


@pytest.fixture
def nvml(monkeypatch):
    """An 8-GPU host in the incident's state: every GPU held at 93,029 MiB; GPU 2 also by an invisible PID."""
    devices = [device(i, used_mib=93029, compute=[proc(os.getpid(), 93029)]) for i in range(8)]
    devices[2]["compute"].append(proc(MISSING_PID, None))
    lib = FakeNvml(devices)
    monkeypatch.setattr(_deps.PYNVML, "module", lib)
    return lib


def test_incident_host_facts(nvml, monkeypatch):
    result = run_module({}, monkeypatch)
    assert result["changed"] is False and not result.get("failed")
    facts = result["ansible_facts"]
    assert facts["gpu_driver"] == {"driver_version": "580.95.05", "cuda_driver_version": "13.0", "nvml_version": "13.580.95.05",
                                   "count": 8, "source": "nvml"}
    assert [gpu["memory_used_mib"] for gpu in facts["gpus"]] == [93029] * 8
    holder = facts["gpus"][0]["processes"][0]
    assert holder["pid"] == os.getpid() and holder["visible"] is True and holder["used_memory_mib"] == 93029
    assert holder["cmdline"] and holder["name"]
    invisible = facts["gpus"][2]["processes"][1]
    assert invisible["pid"] == MISSING_PID and invisible["visible"] is False and invisible["used_memory_mib"] is None
    assert "gpu_topology" not in facts
    assert nvml.shutdown


def test_check_mode_returns_the_same_facts(nvml, monkeypatch):
    normal = run_module({}, monkeypatch)
    checked = run_module({"_ansible_check_mode": True}, monkeypatch)
    assert checked["changed"] is False
    for gpu in normal["ansible_facts"]["gpus"] + checked["ansible_facts"]["gpus"]:
        gpu.pop("utilization_gpu_pct")
    assert checked["ansible_facts"] == normal["ansible_facts"]


def test_selection_processes_topology_and_health_options(nvml, monkeypatch):
    for i, dev in enumerate(nvml.devices):
        dev["level"] = {j: 20 for j in range(8)}
    result = run_module({"gpus": [5, nvml.devices[1]["uuid"]], "processes": False, "topology": True, "health": False}, monkeypatch)
    facts = result["ansible_facts"]
    assert [gpu["index"] for gpu in facts["gpus"]] == [1, 5]
    assert "processes" not in facts["gpus"][0] and "remapped_rows" not in facts["gpus"][0]
    assert facts["gpu_topology"] == {"gpus": [1, 5], "matrix": [["X", "PXB"], ["PXB", "X"]]}
    assert not any("RunningProcesses" in call for call in nvml.calls)


def test_lost_gpu_reported_while_the_others_are_read(nvml, monkeypatch):
    nvml.devices[3]["lost"] = True
    gpus = run_module({}, monkeypatch)["ansible_facts"]["gpus"]
    assert "GPU is lost" in gpus[3]["error"] and gpus[3]["processes"] is None
    assert [gpu["index"] for gpu in gpus if gpu["error"] is None] == [0, 1, 2, 4, 5, 6, 7]


def test_process_list_failure_is_the_gpus_error(nvml, monkeypatch):
    nvml.fail("nvmlDeviceGetComputeRunningProcesses", 4, index=6)
    gpus = run_module({}, monkeypatch)["ansible_facts"]["gpus"]
    assert gpus[6]["error"].startswith("GPU 6: cannot list its processes: Insufficient Permissions (NVML_ERROR_NO_PERMISSION)")
    assert gpus[6]["processes"] is None and gpus[6]["memory_used_mib"] == 93029
    assert gpus[5]["error"] is None


@pytest.mark.parametrize("gpus, message", [
    (["9"], "gpus: no GPU has index 9; this host has 8 GPUs (indices 0-7)"),
    (["first"], "gpus: 'first' is neither a GPU index"),
    (["GPU-00000000-0000-0000-0000-000000000000"], "gpus: no GPU has UUID GPU-00000000-0000-0000-0000-000000000000"),
])
def test_bad_gpus_value_fails_naming_it(nvml, monkeypatch, gpus, message):
    result = run_module({"gpus": gpus}, monkeypatch)
    assert result["failed"] and result["msg"].startswith(message)
    assert not any(call.startswith("nvmlDeviceGetMemoryInfo") for call in nvml.calls)


@pytest.mark.parametrize("code, hint", [(9, "modprobe nvidia"), (12, "install the NVIDIA driver"), (4, "become: true")])
def test_nvml_that_cannot_be_opened_fails_with_the_fix(monkeypatch, code, hint):
    monkeypatch.setattr(_deps.PYNVML, "module", FakeNvml([], init_error=code))
    result = run_module({}, monkeypatch)
    assert result["failed"] and result["msg"].startswith("cannot initialise NVML: ") and hint in result["msg"]


def test_missing_nvidia_ml_py_without_nvidia_smi_names_the_package(monkeypatch):
    monkeypatch.setattr(_deps.PYNVML, "module", None)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *args, **kwargs: None)
    result = run_module({}, monkeypatch)
    assert result["failed"] and "nvidia-ml-py" in result["msg"]


def test_missing_psutil_names_the_package_unless_processes_are_off(nvml, monkeypatch):
    monkeypatch.setattr(_deps.PSUTIL, "module", None)
    result = run_module({}, monkeypatch)
    assert result["failed"] and "psutil" in result["msg"]
    assert not run_module({"processes": False}, monkeypatch).get("failed")


def test_nvidia_smi_fallback(monkeypatch):
    monkeypatch.setattr(_deps.PYNVML, "module", None)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, *args, **kwargs: "/usr/bin/" + name)
    apps = APPS_CSV.replace("4242", str(os.getpid())).replace("4300", str(MISSING_PID))

    def run_command(self, command, **kwargs):
        return 0, apps if "--query-compute-apps" in command[1] else GPU_CSV, ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    result = run_module({"topology": True}, monkeypatch)
    facts = result["ansible_facts"]
    assert facts["gpu_driver"] == {"driver_version": "580.95.05", "cuda_driver_version": None, "nvml_version": None, "count": 2, "source": "nvidia-smi"}
    assert [gpu["index"] for gpu in facts["gpus"]] == [0, 1]
    assert facts["gpus"][0]["memory_reserved_mib"] == 512 and facts["gpus"][0]["remapped_rows"] is None
    assert [(p["pid"], p["visible"]) for p in facts["gpus"][0]["processes"]] == [(os.getpid(), True), (MISSING_PID, False)]
    assert facts["gpus"][1]["processes"] == []
    assert facts["gpu_topology"] is None
    warnings = " ".join(result["warnings"])
    assert "nvidia-ml-py is not installed" in warnings and "GPU is lost" in warnings and "topology" in warnings
