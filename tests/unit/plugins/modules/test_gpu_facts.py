# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_facts as Ansible runs it (patch_module_args), over a fake pynvml."""

from __future__ import annotations

import json
import os

import pytest

from ansible.module_utils import basic

from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._host import pid_trust as _pid_trust
from ansible_collections.gpuops.fleet.plugins.module_utils._host import procfs
from ansible_collections.gpuops.fleet.plugins.doc_fragments import nvml as nvml_fragment
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.facts import run_facts
from ansible_collections.gpuops.fleet.plugins.modules import gpu_facts
from ansible_collections.gpuops.fleet.plugins.modules.gpu_facts import ARGUMENT_SPEC
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import (
    assert_documented_as_specified, documented_options, run_module as harness_run,
)
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_pynvml import FakeNvml, device, proc
from ansible_collections.gpuops.fleet.tests.unit.plugins.module_utils._gpu.test_smi import APPS_CSV, GPU_CSV

MISSING_PID = 4194305  # above the largest pid_max: no process of this namespace has it


def run_module(args, monkeypatch):
    return harness_run(gpu_facts, args, monkeypatch)


@pytest.fixture(autouse=True)
def host_pid_namespace(monkeypatch):
    """These fake hosts run in the host PID namespace, whatever namespace pytest itself runs in."""
    monkeypatch.setattr(_pid_trust, "nested_pid_namespace", lambda status_path=None: False)


@pytest.fixture
def device_file(tmp_path, monkeypatch):
    """This test process holds an NVIDIA device file open, as a CUDA process does (in a device directory of its own,
    named by GPUOPS_NVIDIA_DEVICE_DIR): the evidence that it uses a GPU."""
    dev = tmp_path / "dev"
    dev.mkdir()
    monkeypatch.setenv("GPUOPS_NVIDIA_DEVICE_DIR", str(dev))
    with open(dev / "nvidia0", "w", encoding="utf-8") as handle:
        yield handle


@pytest.fixture
def nvml(monkeypatch, device_file):
    """An 8-GPU host in the incident's state: every GPU held at 93,029 MiB (by this test process, which has a device
    file open); GPU 2 also by an invisible PID."""
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


class Untouchable:
    """Stands for pynvml or psutil where nothing may be read: any use fails the test."""

    def __getattr__(self, name):
        raise AssertionError("bad input must fail before %s is used" % name)


@pytest.mark.parametrize("gpus", [
    ["\u00b2"], ["\u0663"], ["\uff13"], ["3.0"], ["-0"], ["+1"], ["0 1"], ["0,1"], ["1e0"], ["GPU-xyz"],
    ["GPU-0000abc3-1111-2222-3333-00000000000"], ["9" * 5000], [""], [],
])
def test_bad_gpus_fail_before_nvml_is_touched(monkeypatch, gpus):
    monkeypatch.setattr(_deps.PYNVML, "module", Untouchable())
    monkeypatch.setattr(_deps.PSUTIL, "module", Untouchable())
    result = run_module({"gpus": gpus}, monkeypatch)
    assert result["failed"] is True and result["msg"].startswith("gpus: ")
    assert "empty" in result["msg"] or repr(gpus[0])[:40] in result["msg"]


def test_documented_options_are_the_argument_spec():
    assert_documented_as_specified(documented_options(gpu_facts.DOCUMENTATION, nvml_fragment.ModuleDocFragment.DOCUMENTATION),
                                   ARGUMENT_SPEC)


def test_denied_read_is_named_not_a_silent_null(nvml, monkeypatch):
    nvml.fail("nvmlDeviceGetPowerUsage", 4, index=1)
    result = run_module({}, monkeypatch)
    assert result["ansible_facts"]["gpus"][1]["power_draw_w"] is None
    assert [w for w in result["warnings"] if "NVML_ERROR_NO_PERMISSION" in w and "nvmlDeviceGetPowerUsage on GPU 1" in w]


def test_pid_that_exits_during_the_reading_is_not_called_foreign(nvml, monkeypatch):
    listed = nvml.devices[2]["compute"]
    calls = []

    def compute(handle):
        calls.append(handle)
        first = calls.count(handle) == 1
        return list(listed) if first or handle != 2 else [p for p in listed if p.pid != MISSING_PID]

    monkeypatch.setattr(nvml, "nvmlDeviceGetComputeRunningProcesses", compute)
    gpus = run_module({}, monkeypatch)["ansible_facts"]["gpus"]
    assert [p["pid"] for p in gpus[2]["processes"]] == [os.getpid()], "it exited: not a process of another namespace"
    assert calls.count(2) == 2, "the GPU with an unknown PID is read a second time"


def test_mps_clients_are_holders(nvml, monkeypatch):
    nvml.devices[4]["mps"] = [proc(MISSING_PID + 1, 800)]
    gpus = run_module({"gpus": ["4"]}, monkeypatch)["ansible_facts"]["gpus"]
    assert [(p["pid"], p["type"], p["used_memory_mib"]) for p in gpus[0]["processes"]] == [
        (os.getpid(), "compute", 93029), (MISSING_PID + 1, "mps", 800)]


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


def test_nvidia_smi_fallback(monkeypatch, device_file):
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


def test_local_pid_without_device_files_is_not_named_when_nvml_lists_missing_pids(nvml, monkeypatch, device_file):
    """NVML lists a PID this namespace does not have, so its PIDs may be the machine's: this process, with no device
    file open, may only share a number with the real holder, and is not named as it."""
    device_file.close()
    gpus = run_module({}, monkeypatch)["ansible_facts"]["gpus"]
    holder = gpus[0]["processes"][0]
    assert holder["pid"] == os.getpid() and holder["unverified"] is True and holder["visible"] is False
    assert holder["used_memory_mib"] == 93029 and holder["type"] == "compute"
    assert [holder[key] for key in ("name", "cmdline", "username", "state", "ppid", "create_time")] == [None] * 6
    assert gpus[2]["processes"][1]["pid"] == MISSING_PID and gpus[2]["processes"][1]["unverified"] is False


def test_holder_with_a_device_file_open_is_named_when_pids_are_not_trusted(nvml, monkeypatch):
    gpus = run_module({}, monkeypatch)["ansible_facts"]["gpus"]
    holder = gpus[0]["processes"][0]
    assert holder["unverified"] is False and holder["visible"] is True and holder["name"] and holder["create_time"]


def test_nested_pid_namespace_needs_the_evidence_too(monkeypatch, device_file):
    lib = FakeNvml([device(0, used_mib=4000, compute=[proc(os.getpid(), 4000)])])
    monkeypatch.setattr(_deps.PYNVML, "module", lib)
    monkeypatch.setattr(_pid_trust, "nested_pid_namespace", lambda status_path=None: True)
    assert run_module({}, monkeypatch)["ansible_facts"]["gpus"][0]["processes"][0]["unverified"] is False
    device_file.close()
    unverified = run_module({}, monkeypatch)["ansible_facts"]["gpus"][0]["processes"][0]
    assert unverified["unverified"] is True and unverified["name"] is None
    monkeypatch.setattr(_pid_trust, "nested_pid_namespace", lambda status_path=None: False)
    trusted = run_module({}, monkeypatch)["ansible_facts"]["gpus"][0]["processes"][0]
    assert trusted["unverified"] is False and trusted["name"], "in the host namespace with every PID here, NVML's word is enough"


def test_run_facts_is_the_module_without_ansible(nvml, monkeypatch):
    """bench/ and tests/gpu/ call module_utils' run_facts: the same steps, defaults and facts as the module."""
    missing = []
    result, warnings, failed = run_facts({"gpus": ["²"]}, None, None, missing.append)
    assert failed is True and "gpus" in result["msg"] and missing == [] and warnings == []
    psutil = pytest.importorskip("psutil")
    result, warnings, failed = run_facts({}, nvml, psutil, missing.append)
    module = run_module({}, monkeypatch)
    assert failed is False and warnings == [] and missing == []
    assert result["ansible_facts"]["gpus"] == module["ansible_facts"]["gpus"] and result["changed"] is False
    result, warnings, failed = run_facts({"processes": False}, None, None, missing.append)
    assert missing == ["pynvml"], "without nvidia-ml-py nor nvidia-smi, the caller is told which library is missing"
    assert failed is True and "nvidia-ml-py" in result["msg"]


CONTAINER_ID = "1e030a3033f4c66d3f8c1ab292f8490c5dff37766b14782381b20143b1d85617"
POD_UID = "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"


@pytest.fixture
def podman(tmp_path, monkeypatch):
    """A podman on the PATH (a script) that knows the container CONTAINER_ID, as `podman inspect` prints it; each of its
    runs is a line of the returned file."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "podman-calls"
    answer = tmp_path / "inspect.json"
    answer.write_text(json.dumps([{"Id": CONTAINER_ID, "Name": "vllm-llama", "ImageName": "localhost/gpuops-sim:test",
                                   "Config": {"Image": "localhost/gpuops-sim:test"}}]))
    script = bin_dir / "podman"
    script.write_text('#!/bin/sh\necho "$*" >> %s\n[ "$6" = "%s" ] && exec cat %s\nexit 125\n' % (calls, CONTAINER_ID, answer))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
    calls.write_text("")
    return calls


@pytest.mark.parametrize("cgroup, container", [
    ("/machine.slice/libpod-%s.scope/container" % CONTAINER_ID,
     {"runtime": "podman", "id": CONTAINER_ID, "name": "vllm-llama", "image": "localhost/gpuops-sim:test"}),
    ("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope" % (POD_UID.replace("-", "_"), CONTAINER_ID),
     {"runtime": "kubernetes", "id": CONTAINER_ID, "name": None, "image": None, "pod_uid": POD_UID}),
    ("/machine.slice/libpod-conmon-%s.scope" % CONTAINER_ID, None),
    ("/system.slice/vllm-llama.service", None),
])
def test_each_holder_names_its_container(nvml, monkeypatch, podman, cgroup, container):
    """NVML reports the host's PID (this test process, which holds every GPU); its cgroup, faked here, names the
    container, whose runtime's command line (podman on the PATH) is asked once for its name and image."""
    seen = []

    def cgroup_paths(pid, proc=procfs.PROC):
        seen.append(pid)
        return [cgroup] if pid == os.getpid() else None

    monkeypatch.setattr(procfs, "cgroup_paths", cgroup_paths)
    gpus = run_module({}, monkeypatch)["ansible_facts"]["gpus"]
    holders = [process for gpu in gpus for process in gpu["processes"] if process["pid"] == os.getpid()]
    assert len(holders) == 8 and all(holder["container"] == container for holder in holders)
    assert holders[0]["visible"] is True and holders[0]["name"], "the PID is the host's, described as it is"
    invisible = gpus[2]["processes"][1]
    assert invisible["pid"] == MISSING_PID and invisible["container"] is None and MISSING_PID not in seen
    assert seen == [os.getpid()], "a PID on several GPUs is read once"
    asked = podman.read_text().splitlines()
    assert asked == (["inspect --type container --format json %s" % CONTAINER_ID] if container and container["runtime"] == "podman" else [])


def test_an_unverified_holder_has_no_container(nvml, monkeypatch, device_file, podman):
    """A local process that may only share NVML's number with the real holder: its cgroup is not read as the holder's."""
    device_file.close()
    monkeypatch.setattr(procfs, "cgroup_paths", lambda pid, proc=procfs.PROC: ["/machine.slice/libpod-%s.scope" % CONTAINER_ID])
    holder = run_module({}, monkeypatch)["ansible_facts"]["gpus"][0]["processes"][0]
    assert holder["unverified"] is True and holder["container"] is None
    assert podman.read_text() == ""


def test_run_facts_asks_the_runtime_found_by_find_cli(nvml, monkeypatch, podman):
    monkeypatch.setattr(procfs, "cgroup_paths", lambda pid, proc=procfs.PROC: ["/libpod_parent/libpod-%s" % CONTAINER_ID])
    psutil = pytest.importorskip("psutil")
    looked_up = []

    def find_cli(name):
        looked_up.append(name)

    result, _warnings, failed = run_facts({"gpus": ["0"]}, nvml, psutil, lambda name: None, find_cli=find_cli)
    holder = result["ansible_facts"]["gpus"][0]["processes"][0]
    assert failed is False and looked_up == ["podman"] and podman.read_text() == ""
    assert holder["container"] == {"runtime": "podman", "id": CONTAINER_ID, "name": None, "image": None}
    result, _warnings, failed = run_facts({"gpus": ["0"]}, nvml, psutil, lambda name: None)
    assert result["ansible_facts"]["gpus"][0]["processes"][0]["container"]["name"] == "vllm-llama", "the PATH's podman by default"
