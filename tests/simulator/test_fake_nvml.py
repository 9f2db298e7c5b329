# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake libnvidia-ml.so.1 and nvidia-smi, driven through the REAL
nvidia-ml-py in a subprocess (docs/simulator.md is the contract)."""
from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from nvml_helpers import (
    DEFAULT_NAME,
    LIB_DIR,
    MIB,
    NVML_SRC,
    PYNVML_PY,
    PynvmlSession,
    SimState,
    gpu_bus_id,
    gpu_uuid,
    kill_unreaped,
    proc_starttime,
    smi,
    unused_pid,
)
# pytest finds these fixtures by name in this module's namespace, so the import is their use.
from nvml_helpers import built, holders, nvml, session_factory, sim  # pylint: disable=unused-import

Holders = Callable[[], subprocess.Popen[bytes]]
Sessions = Callable[..., PynvmlSession]


def pynvml_symbols() -> set[str]:
    return set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', PYNVML_PY.read_text()))


def used_v1(nvml: PynvmlSession, gpu: int) -> int:
    return nvml(f"nvmlDeviceGetMemoryInfo(h({gpu})).used") // MIB


def compute_pids(nvml: PynvmlSession, gpu: int) -> list[int]:
    return [p["pid"] for p in nvml(f"nvmlDeviceGetComputeRunningProcesses(h({gpu}))")]


# ---- library surface ----

def test_every_symbol_pynvml_looks_up_resolves(nvml: PynvmlSession) -> None:
    names = sorted(pynvml_symbols())
    listed = [line for line in (NVML_SRC / "symbols.txt").read_text().splitlines()
              if line and not line.startswith("#")]
    assert set(listed) == set(names), "symbols.txt is out of date: make -C simulator/nvml symbols"
    missing = nvml(f"[n for n in {names!r} if not hasattr(nvmlLib, n)]")
    assert missing == []
    unversioned = ["nvmlInit", "nvmlInit_v2", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
                   "nvmlDeviceGetHandleByPciBusId", "nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo_v2",
                   "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses",
                   "nvmlDeviceGetMPSComputeRunningProcesses", "nvmlDeviceGetNvLinkRemotePciInfo"]
    assert nvml(f"[n for n in {unversioned!r} if not hasattr(nvmlLib, n)]") == []
    assert nvml("nvmlLib._name") == "libnvidia-ml.so.1"
    assert (LIB_DIR / "libnvidia-ml.so").resolve() == (LIB_DIR / "libnvidia-ml.so.1").resolve()


def test_unmodelled_queries_are_not_supported(sim: SimState, session_factory: Sessions) -> None:
    sim.gpus(count=2, lost=(1,))
    nvml = session_factory(sim.root)
    assert nvml.error("nvmlDeviceGetFanSpeed(h(0))") == "NVMLError_NotSupported"
    assert nvml.error("nvmlDeviceGetRetiredPages(h(0), 0)") == "NVMLError_NotSupported"
    assert nvml.error("nvmlDeviceGetRetiredPagesPendingStatus(h(0))") == "NVMLError_NotSupported"
    assert nvml.error("nvmlDeviceGetFanSpeed(h(1))") == "NVMLError_GpuIsLost"
    assert nvml.error("nvmlUnitGetCount()") == "NVMLError_NotSupported"


def test_error_strings_are_nvmls(nvml: PynvmlSession) -> None:
    expected = nvml("{k: v for k, v in NVMLError._errcode_to_string.items()}")
    assert len(expected) >= 20
    for code, text in expected.items():
        assert nvml(f"nvmlErrorString({code})") == text
    assert nvml("nvmlErrorString(25)") == "Argument version mismatch"
    assert nvml("nvmlErrorString(12345)") == "Unknown Error"


def test_init_shutdown_and_versions(sim: SimState, session_factory: Sessions) -> None:
    sim.host(driver_version="575.57.08", nvml_version="12.575.57.08", cuda_driver_version="12090")
    nvml = session_factory(sim.root, init=False)
    assert nvml.error("nvmlDeviceGetCount()") == "NVMLError_Uninitialized"
    nvml("nvmlInit()")
    nvml("nvmlInitWithFlags(0)")
    assert nvml("raw('nvmlInit_v2')") == 0
    assert nvml("raw('nvmlInit')") == 0
    assert nvml("nvmlSystemGetDriverVersion()") == "575.57.08"
    assert nvml("nvmlSystemGetNVMLVersion()") == "12.575.57.08"
    assert nvml("nvmlSystemGetCudaDriverVersion()") == 12090
    assert nvml("nvmlSystemGetCudaDriverVersion_v2()") == 12090
    assert nvml("nvmlDeviceGetCount()") == 8
    for _shutdown in range(4):
        nvml("nvmlShutdown()")
    assert nvml.error("nvmlDeviceGetCount()") == "NVMLError_Uninitialized"
    assert nvml.error("nvmlShutdown()") == "NVMLError_Uninitialized"


def test_default_versions(nvml: PynvmlSession) -> None:
    assert nvml("nvmlSystemGetDriverVersion()") == "580.95.05"
    assert nvml("nvmlSystemGetNVMLVersion()") == "13.580.95.05"
    assert nvml("nvmlSystemGetCudaDriverVersion_v2()") == 13000


def test_driver_not_loaded(sim: SimState, tmp_path: Path, session_factory: Sessions) -> None:
    sim.host(driver_loaded="0")
    for state in (sim.root, tmp_path / "no-such-dir", None):
        nvml = session_factory(state, init=False)
        assert nvml.error("nvmlInit()") == "NVMLError_DriverNotLoaded"
        assert nvml.error("nvmlInitWithFlags(0)") == "NVMLError_DriverNotLoaded"
        assert nvml("raw('nvmlInit_v2')") == 9


# ---- identity ----

def test_handles_names_and_pci(nvml: PynvmlSession) -> None:
    for i in (0, 5, 7):
        assert nvml(f"nvmlDeviceGetIndex(nvmlDeviceGetHandleByUUID({gpu_uuid(i)!r}))") == i
        assert nvml(f"nvmlDeviceGetIndex(nvmlDeviceGetHandleByPciBusId({gpu_bus_id(i)!r}))") == i
        assert nvml(f"nvmlDeviceGetIndex(nvmlDeviceGetHandleByPciBusId({gpu_bus_id(i)[4:]!r}))") == i
        assert nvml(f"nvmlDeviceGetUUID(h({i}))") == gpu_uuid(i)
        assert nvml(f"nvmlDeviceGetName(h({i}))") == DEFAULT_NAME
        assert nvml(f"nvmlDeviceGetMinorNumber(h({i}))") == i
        pci = nvml(f"nvmlDeviceGetPciInfo(h({i}))")
        assert pci["busId"] == gpu_bus_id(i)
        assert pci["busIdLegacy"] == gpu_bus_id(i)[4:]
        assert (pci["domain"], pci["bus"], pci["device"]) == (0, 0x18 + i, 0)
        assert pci["pciDeviceId"] & 0xFFFF == 0x10DE
    assert nvml.error("nvmlDeviceGetHandleByUUID('GPU-nope')") == "NVMLError_NotFound"
    assert nvml.error("nvmlDeviceGetHandleByIndex(8)") == "NVMLError_InvalidArgument"
    assert nvml.error("nvmlDeviceGetName(ctypes.c_void_p(1234))") == "NVMLError_InvalidArgument"


def test_state_is_reread_on_every_call(sim: SimState, nvml: PynvmlSession) -> None:
    assert nvml("nvmlDeviceGetCount()") == 8
    sim.gpus(count=64)
    assert nvml("nvmlDeviceGetCount()") == 64
    assert nvml("nvmlDeviceGetUUID(h(63))") == gpu_uuid(63)


# ---- memory and liveness ----

def test_memory_follows_a_live_holder(sim: SimState, nvml: PynvmlSession, holders: Holders) -> None:
    holder = holders()
    sim.alloc(holder.pid, 0, 93029)
    assert used_v1(nvml, 0) == 512 + 93029
    v1 = nvml("nvmlDeviceGetMemoryInfo(h(0))")
    assert v1["total"] == 97887 * MIB and v1["free"] == v1["total"] - v1["used"]
    v2 = nvml("nvmlDeviceGetMemoryInfo(h(0), version=nvmlMemory_v2)")
    assert (v2["reserved"], v2["used"]) == (512 * MIB, 93029 * MIB)
    assert v2["free"] == v2["total"] - v2["reserved"] - v2["used"]
    procs = nvml("nvmlDeviceGetComputeRunningProcesses(h(0))")
    assert [(p["pid"], p["usedGpuMemory"]) for p in procs] == [(holder.pid, 93029 * MIB)]
    assert nvml(f"nvmlSystemGetProcessName({holder.pid})") == "sleep"
    assert used_v1(nvml, 1) == 512
    holder.kill()
    holder.wait()
    assert used_v1(nvml, 0) == 512
    assert compute_pids(nvml, 0) == []


def test_zombie_counts_only_when_sticky(sim: SimState, nvml: PynvmlSession, holders: Holders) -> None:
    plain, sticky = holders(), holders()
    sim.alloc(plain.pid, 0, 1000)
    sim.alloc(sticky.pid, 0, 2000, flags="sticky")
    kill_unreaped(plain)
    kill_unreaped(sticky)
    assert used_v1(nvml, 0) == 512 + 2000
    assert compute_pids(nvml, 0) == [sticky.pid]
    assert nvml(f"nvmlSystemGetProcessName({sticky.pid})") == "sleep"  # comm: cmdline is empty
    sticky.wait()
    assert used_v1(nvml, 0) == 512
    assert nvml.error(f"nvmlSystemGetProcessName({sticky.pid})") == "NVMLError_NotFound"


def test_reused_pid_inherits_nothing(sim: SimState, nvml: PynvmlSession, holders: Holders) -> None:
    holder = holders()
    sim.alloc(holder.pid, 0, 4096, starttime=proc_starttime(holder.pid) + 1)
    assert used_v1(nvml, 0) == 512
    assert compute_pids(nvml, 0) == []


def test_foreign_na_orphan_and_graphics(sim: SimState, nvml: PynvmlSession, holders: Holders) -> None:
    foreign = unused_pid()
    graphics, na = holders(), holders()
    sim.gpus(orphan={2: 700})
    sim.alloc(foreign, 2, 3000, flags="foreign")
    sim.alloc(na.pid, 2, 500, flags="na")
    sim.alloc(graphics.pid, 2, 100, kind="G")
    sim.write("allocs/999-2.tmp.1", "999 1 2 50000 C foreign\n")  # a writer's temporary file
    assert used_v1(nvml, 2) == 512 + 3000 + 500 + 100 + 700
    compute = {p["pid"]: p["usedGpuMemory"] for p in nvml("nvmlDeviceGetComputeRunningProcesses(h(2))")}
    assert compute == {foreign: 3000 * MIB, na.pid: None}
    assert compute_pids(nvml, 2) == sorted(compute)
    graphics_list = nvml("nvmlDeviceGetGraphicsRunningProcesses(h(2))")
    assert [(p["pid"], p["usedGpuMemory"]) for p in graphics_list] == [(graphics.pid, 100 * MIB)]
    assert nvml("nvmlDeviceGetMPSComputeRunningProcesses(h(2))") == []
    assert nvml.error(f"nvmlSystemGetProcessName({foreign})") == "NVMLError_NotFound"


def test_lost_gpu_only_on_that_device(sim: SimState, nvml: PynvmlSession) -> None:
    sim.gpus(lost=(3,))
    assert nvml("bool(h(3))") is True  # the handle is still given
    for query in ("nvmlDeviceGetMemoryInfo(h(3))", "nvmlDeviceGetName(h(3))",
                  "nvmlDeviceGetComputeRunningProcesses(h(3))", "nvmlDeviceGetUtilizationRates(h(3))",
                  "nvmlDeviceGetTopologyCommonAncestor(h(0), h(3))",
                  f"nvmlDeviceGetHandleByUUID({gpu_uuid(3)!r})"):
        assert nvml.error(query) == "NVMLError_GpuIsLost", query
    assert nvml("nvmlDeviceGetCount()") == 8
    assert used_v1(nvml, 2) == 512
    assert nvml("nvmlDeviceGetName(h(4))") == DEFAULT_NAME


def test_process_list_size_protocol(sim: SimState, nvml: PynvmlSession, holders: Holders) -> None:
    children = [holders() for _child in range(3)]
    for child in children:
        sim.alloc(child.pid, 0, 1000)
    pids = sorted(child.pid for child in children)
    symbol = "'nvmlDeviceGetComputeRunningProcesses_v3'"
    assert nvml(f"raw_procs({symbol}, 0, 0, null_buffer=True)") == [7, 3, []]
    assert nvml(f"raw_procs({symbol}, 0, 5, null_buffer=True)") == [7, 3, []]
    assert nvml(f"raw_procs({symbol}, 0, 2)") == [7, 3, []]
    assert nvml(f"raw_procs({symbol}, 0, 3)") == [0, 3, [[p, 1000 * MIB] for p in pids]]
    assert nvml(f"raw_procs({symbol}, 0, 8)")[:2] == [0, 3]
    assert nvml(f"raw_procs({symbol}, 1, 0, null_buffer=True)") == [0, 0, []]
    v1 = "'nvmlDeviceGetComputeRunningProcesses', 0, 3, struct=ProcessInfoV1"
    assert nvml(f"raw_procs({v1})") == [0, 3, [[p, 1000 * MIB] for p in pids]]
    assert nvml("raw_procs('nvmlDeviceGetComputeRunningProcesses_v2', 0, 1)") == [7, 3, []]
    assert nvml("raw_procs('nvmlDeviceGetMPSComputeRunningProcesses_v3', 0, 0, null_buffer=True)") == [0, 0, []]
    assert nvml("raw('nvmlDeviceGetComputeRunningProcesses_v3', h(0), None, None)") == 2


def test_memory_v2_version_is_checked(nvml: PynvmlSession) -> None:
    assert nvml("memory_v2_raw(0, nvmlMemory_v2)") == 0
    assert nvml("memory_v2_raw(0, 0x01000028)") == 25
    assert nvml("memory_v2_raw(0, 0)") == 25


# ---- health ----

def test_busy_and_idle_models(sim: SimState, nvml: PynvmlSession, holders: Holders) -> None:
    sim.alloc(holders().pid, 0, 10)
    busy = ("97 45", 62, 310000, 0, 0)
    idle = ("0 0", 34, 85000, 8, 1)
    for gpu, (util, temp, power, pstate, reasons) in ((0, busy), (1, idle)):
        rates = nvml(f"nvmlDeviceGetUtilizationRates(h({gpu}))")
        assert f"{rates['gpu']} {rates['memory']}" == util
        assert nvml(f"nvmlDeviceGetTemperature(h({gpu}), NVML_TEMPERATURE_GPU)") == temp
        assert nvml(f"nvmlDeviceGetPowerUsage(h({gpu}))") == power
        assert nvml(f"nvmlDeviceGetEnforcedPowerLimit(h({gpu}))") == 600000
        assert nvml(f"nvmlDeviceGetPerformanceState(h({gpu}))") == pstate
        assert nvml(f"nvmlDeviceGetCurrentClocksEventReasons(h({gpu}))") == reasons
        assert nvml(f"nvmlDeviceGetCurrentClocksThrottleReasons(h({gpu}))") == reasons


def test_health_defaults_and_overrides(sim: SimState, nvml: PynvmlSession) -> None:
    assert nvml("nvmlDeviceGetPersistenceMode(h(0))") == 1
    assert nvml("nvmlDeviceGetEccMode(h(0))") == [1, 1]
    assert nvml("nvmlDeviceGetTotalEccErrors(h(0), 1, 0)") == 0
    assert nvml("nvmlDeviceGetRemappedRows(h(0))") == [0, 0, 0, 0]
    assert nvml.error("nvmlDeviceGetMigMode(h(0))") == "NVMLError_NotSupported"
    sim.host(mig_supported="1")
    assert nvml("nvmlDeviceGetMigMode(h(0))") == [0, 0]
    sim.conf(5, temperature_c=91, power_mw=123456, power_limit_mw=450000, ecc_uncorrected_volatile=2,
             ecc_uncorrected_aggregate=7, remapped_correctable=1, remapped_uncorrectable=3,
             remapped_pending=1, remapped_failure=1, clocks_event_reasons=0x48)
    assert nvml("nvmlDeviceGetTemperature(h(5), 0)") == 91
    assert nvml("nvmlDeviceGetPowerUsage(h(5))") == 123456
    assert nvml("nvmlDeviceGetEnforcedPowerLimit(h(5))") == 450000
    assert nvml("nvmlDeviceGetTotalEccErrors(h(5), NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)") == 2
    assert nvml("nvmlDeviceGetTotalEccErrors(h(5), NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC)") == 7
    assert nvml("nvmlDeviceGetTotalEccErrors(h(5), NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC)") == 0
    assert nvml("nvmlDeviceGetRemappedRows(h(5))") == [1, 3, 1, 1]
    assert nvml("nvmlDeviceGetCurrentClocksEventReasons(h(5))") == 0x48
    assert nvml("nvmlDeviceGetTemperature(h(4), 0)") == 34


# ---- topology ----

def test_topology_pcie(nvml: PynvmlSession) -> None:
    levels = {(0, 0): 0, (0, 1): 20, (2, 3): 20, (0, 3): 40, (4, 7): 40, (3, 4): 50, (0, 7): 50}
    for (i, j), level in levels.items():
        assert nvml(f"nvmlDeviceGetTopologyCommonAncestor(h({i}), h({j}))") == level
        assert nvml(f"nvmlDeviceGetTopologyCommonAncestor(h({j}), h({i}))") == level
    assert nvml.error("nvmlDeviceGetNvLinkState(h(0), 0)") == "NVMLError_NotSupported"
    assert nvml.error("nvmlDeviceGetNvLinkRemotePciInfo(h(0), 0)") == "NVMLError_NotSupported"


def test_topology_nvlink(sim: SimState, nvml: PynvmlSession) -> None:
    sim.host(topology="nvlink")
    states = nvml("[nvmlDeviceGetNvLinkState(h(2), k) for k in range(18)]")
    assert states == [1] * 7 + [0] * 11
    assert nvml.error("nvmlDeviceGetNvLinkState(h(2), 18)") == "NVMLError_InvalidArgument"
    remote = nvml("[nvmlDeviceGetNvLinkRemotePciInfo(h(2), k).busId for k in range(7)]")
    assert remote == [gpu_bus_id(g) for g in (0, 1, 3, 4, 5, 6, 7)]
    assert nvml("nvmlDeviceGetTopologyCommonAncestor(h(0), h(1))") == 20


def test_topology_nvswitch(sim: SimState, nvml: PynvmlSession) -> None:
    """HGX: each GPU's 18 links are active and go to one of 4 NVSwitches (remote type switch, the switch's PCI info)."""
    sim.host(topology="nvswitch")
    assert nvml("[nvmlDeviceGetNvLinkState(h(5), k) for k in range(18)]") == [1] * 18
    assert nvml("[nvmlDeviceGetNvLinkRemoteDeviceType(h(5), k) for k in range(18)]") == [2] * 18  # ..._TYPE_SWITCH
    remote = nvml("[nvmlDeviceGetNvLinkRemotePciInfo(h(5), k).busId for k in range(18)]")
    switches = sorted(set(remote))
    assert switches == [f"00000000:{bus:02X}:00.0" for bus in (4, 5, 6, 7)]
    assert not set(switches) & {gpu_bus_id(g) for g in range(8)}, "a switch is no GPU"
    assert nvml("[nvmlDeviceGetNvLinkRemotePciInfo(h(0), k).busId for k in range(18)]") == remote, "one fabric"
    assert nvml("nvmlDeviceGetNvLinkRemotePciInfo(h(5), 0).pciDeviceId") == 0x22A310DE
    assert nvml.error("nvmlDeviceGetNvLinkState(h(5), 18)") == "NVMLError_InvalidArgument"
    assert nvml("nvmlDeviceGetTopologyCommonAncestor(h(0), h(7))") == 50  # PCIe is still there


def test_nvlink_remote_type_is_a_gpu(sim: SimState, nvml: PynvmlSession) -> None:
    sim.host(topology="nvlink")
    assert nvml("[nvmlDeviceGetNvLinkRemoteDeviceType(h(2), k) for k in range(7)]") == [0] * 7
    assert nvml.error("nvmlDeviceGetNvLinkRemoteDeviceType(h(2), 7)") == "NVMLError_NotSupported"


# ---- scale ----

def test_scale_64_gpus_512_processes(sim: SimState, nvml: PynvmlSession, holders: Holders) -> None:
    sim.gpus(count=64)
    children = [holders() for _child in range(8)]
    for gpu in range(64):
        for child in children:
            sim.alloc(child.pid, gpu, 100)
    assert nvml("nvmlDeviceGetCount()") == 64
    assert nvml("[len(nvmlDeviceGetComputeRunningProcesses(h(g))) for g in range(64)]") == [8] * 64
    assert nvml("sum(nvmlDeviceGetMemoryInfo(h(g)).used for g in range(64))") == 64 * (512 + 800) * MIB


# ---- nvidia-smi ----

def smi_rows(out: str) -> list[list[str]]:
    return [line.split(", ") for line in out.splitlines()]


def test_smi_query_gpu_matches_pynvml(sim: SimState, nvml: PynvmlSession, holders: Holders) -> None:
    sim.gpus(orphan={1: 300})
    sim.alloc(holders().pid, 0, 93029)
    fields = ("index,uuid,name,pci.bus_id,memory.total,memory.used,memory.free,memory.reserved,"
              "utilization.gpu,temperature.gpu,power.draw,persistence_mode,pstate")
    result = smi(sim.root, f"--query-gpu={fields}", "--format=csv")
    assert result.returncode == 0, result.stderr
    header, *rows = smi_rows(result.stdout)
    assert header == ["index", "uuid", "name", "pci.bus_id", "memory.total [MiB]", "memory.used [MiB]",
                      "memory.free [MiB]", "memory.reserved [MiB]", "utilization.gpu [%]",
                      "temperature.gpu", "power.draw [W]", "persistence_mode", "pstate"]
    assert len(rows) == 8
    for i, row in enumerate(rows):
        mem = nvml(f"nvmlDeviceGetMemoryInfo(h({i}), version=nvmlMemory_v2)")
        rates = nvml(f"nvmlDeviceGetUtilizationRates(h({i}))")
        power = nvml(f"nvmlDeviceGetPowerUsage(h({i}))")
        assert row == [str(i), gpu_uuid(i), DEFAULT_NAME, gpu_bus_id(i), f"{mem['total'] // MIB} MiB",
                       f"{mem['used'] // MIB} MiB", f"{mem['free'] // MIB} MiB",
                       f"{mem['reserved'] // MIB} MiB", f"{rates['gpu']} %",
                       str(nvml(f"nvmlDeviceGetTemperature(h({i}), 0)")), f"{power / 1000:.2f} W",
                       "Enabled", f"P{nvml(f'nvmlDeviceGetPerformanceState(h({i}))')}"]
    assert rows[0][5] == "93029 MiB" and rows[1][5] == "300 MiB"
    quiet = smi(sim.root, "--query-gpu=memory.used,power.draw", "--format=csv,noheader,nounits", "-i", "0,1")
    assert smi_rows(quiet.stdout) == [["93029", "310.00"], ["300", "85.00"]]


def test_smi_query_compute_apps(sim: SimState, holders: Holders) -> None:
    holder, foreign = holders(), unused_pid()
    sim.alloc(holder.pid, 0, 93029)
    sim.alloc(foreign, 3, 2048, flags="foreign,na")
    result = smi(sim.root, "--query-compute-apps=pid,process_name,gpu_uuid,gpu_bus_id,used_memory",
                 "--format=csv")
    assert result.returncode == 0, result.stderr
    assert smi_rows(result.stdout) == [
        ["pid", "process_name", "gpu_uuid", "gpu_bus_id", "used_gpu_memory [MiB]"],
        [str(holder.pid), "sleep", gpu_uuid(0), gpu_bus_id(0), "93029 MiB"],
        [str(foreign), "[Not Found]", gpu_uuid(3), gpu_bus_id(3), "[N/A]"],
    ]
    only_3 = smi(sim.root, "--query-compute-apps=pid,used_gpu_memory", "--format=csv,noheader", "-i", "3")
    assert smi_rows(only_3.stdout) == [[str(foreign), "[N/A]"]]


def test_smi_list_table_and_bad_input(sim: SimState, holders: Holders) -> None:
    holder = holders()
    sim.alloc(holder.pid, 6, 93029)
    listing = smi(sim.root, "-L").stdout.splitlines()
    assert listing[7] == f"GPU 7: {DEFAULT_NAME} (UUID: {gpu_uuid(7)})" and len(listing) == 8
    assert smi(sim.root, "-L", "-i", gpu_uuid(2)).stdout.startswith("GPU 2: ")
    table = smi(sim.root)
    assert table.returncode == 0
    assert "Driver Version: 580.95.05" in table.stdout and "CUDA Version: 13.0" in table.stdout
    assert re.search(rf"\|\s+6\s+N/A\s+N/A\s+{holder.pid}\s+C\s+sleep\s+93029MiB \|", table.stdout)
    assert {len(line) for line in table.stdout.splitlines() if line} == {91}
    bad_field = smi(sim.root, "--query-gpu=index,bogus", "--format=csv")
    assert bad_field.returncode == 2 and 'Field "bogus" is not a valid field to query.' in bad_field.stderr
    missing = smi(sim.root, "-L", "-i", "9")
    assert missing.returncode == 6 and "No devices were found" in missing.stdout


def topo_cells(out: str) -> dict[str, list[str]]:
    lines = out.split("\n\nLegend:")[0].splitlines()
    header = lines[0].split("\t")
    assert header[0] == "" and header[-3:] == ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"], header
    gpus = header[1:-3]
    return {row.split("\t")[0]: [cell.strip() for cell in row.split("\t")[1:len(gpus) + 1]] for row in lines[1:]}


def test_smi_topo_matrix(sim: SimState) -> None:
    """`nvidia-smi topo -m`: NV18 between every pair of an HGX host, NV1 with direct links, the PCIe level without."""
    for topology, cell in (("nvswitch", lambda i, j: "NV18"), ("nvlink", lambda i, j: "NV1"),
                           ("pcie", lambda i, j: "PXB" if i // 2 == j // 2 else "NODE" if (i < 4) == (j < 4) else "SYS")):
        sim.host(topology=topology)
        result = smi(sim.root, "topo", "-m")
        assert result.returncode == 0, result.stderr
        assert "NV#  = Connection traversing a bonded set of # NVLinks" in result.stdout
        cells = topo_cells(result.stdout)
        assert cells == {f"GPU{i}": ["X" if i == j else cell(i, j) for j in range(8)] for i in range(8)}, topology
    assert smi(sim.root, "topo", "-p2p", "r").returncode != 0


def test_smi_driver_not_loaded(sim: SimState) -> None:
    sim.host(driver_loaded="0")
    result = smi(sim.root, "--query-gpu=index", "--format=csv")
    assert result.returncode == 9
    assert result.stdout.startswith(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    assert smi(None, "-L").returncode == 9


def test_smi_lost_gpu(sim: SimState) -> None:
    sim.gpus(lost=(2,))
    result = smi(sim.root, "--query-gpu=index,memory.used", "--format=csv,noheader")
    assert result.returncode == 15
    assert [row[0] for row in smi_rows(result.stdout)] == ["0", "1", "3", "4", "5", "6", "7"]
    assert result.stderr.strip() == ("Unable to determine the device handle for GPU2: GPU is lost.  "
                                     "Reboot the system to recover this GPU")
    assert smi(sim.root, "-L").returncode == 15
