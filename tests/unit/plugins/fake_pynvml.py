# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small stand-in for nvidia-ml-py's ``pynvml``: same call names, signatures and exception shapes.

Each device is a dict of values; ``fail(name, code, index)`` makes one call raise an NVML error.
A ``lost`` device raises GPU_IS_LOST on every call except nvmlDeviceGetHandleByIndex, like the real driver.
"""

from __future__ import annotations

import types
import typing as t

MIB = 1024 * 1024
_TEXT = {3: "Not Supported", 4: "Insufficient Permissions", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found",
         13: "Function Not Found", 15: "GPU is lost", 18: "RM has detected an NVML/RM version mismatch.", 2: "Invalid Argument"}


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _TEXT.get(self.value, "Unknown Error")


class NVMLLibraryMismatchError(Exception):
    pass


def proc(pid: int, mib: t.Optional[int]) -> types.SimpleNamespace:
    """A process-list entry as pynvml returns it (usedGpuMemory None for N/A)."""
    return types.SimpleNamespace(pid=pid, usedGpuMemory=None if mib is None else mib * MIB)


def device(index: int, used_mib: int = 0, **extra: t.Any) -> t.Dict[str, t.Any]:
    """A healthy busy-or-idle GPU like the simulator's."""
    dev = {
        "uuid": "GPU-%08x-1111-2222-3333-444455556666" % index,
        "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "bus": "00000000:%02X:00.0" % (0x1B + index),
        "total": 97887, "reserved": 512, "used": used_mib,
        "util": (97, 45), "temp": 62, "power": 310000, "limit": 600000,
        "persistence": 1, "mig": (0, 0), "ecc": (1, 1), "ecc_errors": 0,
        "remapped": (0, 0, 0, 0), "retired": ([1, 2], [3], 0), "reasons": 0x1, "pstate": 0,
        "compute": [], "graphics": [], "mps": [], "level": {}, "nvlinks": [],
        "lost": False,
    }
    dev.update(extra)
    return dev


class FakeNvml:
    """Plays the ``pynvml`` module: pass an instance where the code expects the module."""

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    nvmlMemory_v2 = 0x02000028
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, devices: t.List[t.Dict[str, t.Any]], init_error: t.Optional[int] = None) -> None:
        self.devices = devices
        self.init_error = init_error
        self.failures: t.Dict[t.Tuple[str, t.Optional[int]], t.Union[int, str]] = {}
        self.calls: t.List[str] = []
        self.shutdown = False

    def fail(self, name: str, code: t.Union[int, str], index: t.Optional[int] = None) -> None:
        """Make call ``name`` fail with NVML ``code`` (or "mismatch": NVMLLibraryMismatchError), on one device or all."""
        self.failures[(name, index)] = code

    def _dev(self, name: str, handle: t.Optional[int]) -> t.Dict[str, t.Any]:
        self.calls.append(name)
        code = self.failures.get((name, handle), self.failures.get((name, None)))
        if code == "mismatch":
            raise NVMLLibraryMismatchError("Unversioned function called and the pyNVML version does not match the NVML lib version.")
        if code is not None:
            raise NVMLError(code)
        if handle is None:
            return {}
        dev = self.devices[handle]
        if dev["lost"]:
            raise NVMLError(15)
        return dev

    # --- system
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        self._dev("nvmlDeviceGetCount", None)
        return len(self.devices)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._dev("nvmlSystemGetDriverVersion", None)
        return "580.95.05"

    def nvmlSystemGetNVMLVersion(self) -> bytes:
        self._dev("nvmlSystemGetNVMLVersion", None)
        return b"13.580.95.05"  # older nvidia-ml-py returns bytes

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._dev("nvmlSystemGetCudaDriverVersion_v2", None)
        return 13000

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._dev("nvmlSystemGetCudaDriverVersion", None)
        return 12080

    # --- device identity and memory
    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self.calls.append("nvmlDeviceGetHandleByIndex")
        if index >= len(self.devices):
            raise NVMLError(2)
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._dev("nvmlDeviceGetUUID", handle)["uuid"]

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._dev("nvmlDeviceGetName", handle)["name"]

    def nvmlDeviceGetPciInfo(self, handle: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(busId=self._dev("nvmlDeviceGetPciInfo", handle)["bus"])

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: t.Optional[int] = None) -> types.SimpleNamespace:
        dev = self._dev("nvmlDeviceGetMemoryInfo" + ("_v2" if version else ""), handle)
        total, reserved, used = dev["total"] * MIB, dev["reserved"] * MIB, dev["used"] * MIB
        if version:
            return types.SimpleNamespace(total=total, reserved=reserved, used=used, free=total - reserved - used)
        return types.SimpleNamespace(total=total, used=used + reserved, free=total - reserved - used)

    # --- optional values
    def nvmlDeviceGetUtilizationRates(self, handle: int) -> types.SimpleNamespace:
        gpu, memory = self._dev("nvmlDeviceGetUtilizationRates", handle)["util"]
        return types.SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == 0
        return self._dev("nvmlDeviceGetTemperature", handle)["temp"]

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._dev("nvmlDeviceGetPowerUsage", handle)["power"]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return self._dev("nvmlDeviceGetEnforcedPowerLimit", handle)["limit"]

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
        return self._dev("nvmlDeviceGetPowerManagementLimit", handle)["limit"] - 1000

    def nvmlDeviceGetPersistenceMode(self, handle: int) -> int:
        return self._dev("nvmlDeviceGetPersistenceMode", handle)["persistence"]

    def nvmlDeviceGetMigMode(self, handle: int) -> t.List[int]:
        return list(self._dev("nvmlDeviceGetMigMode", handle)["mig"])

    def nvmlDeviceGetEccMode(self, handle: int) -> t.List[int]:
        return list(self._dev("nvmlDeviceGetEccMode", handle)["ecc"])

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter_type: int) -> int:
        assert (error_type, counter_type) == (1, 0)
        return self._dev("nvmlDeviceGetTotalEccErrors", handle)["ecc_errors"]

    def nvmlDeviceGetRemappedRows(self, handle: int) -> t.Tuple[int, int, int, int]:
        return self._dev("nvmlDeviceGetRemappedRows", handle)["remapped"]

    def nvmlDeviceGetRetiredPages(self, handle: int, cause: int) -> t.List[int]:
        return self._dev("nvmlDeviceGetRetiredPages", handle)["retired"][cause]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        return self._dev("nvmlDeviceGetRetiredPagesPendingStatus", handle)["retired"][2]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return self._dev("nvmlDeviceGetCurrentClocksEventReasons", handle)["reasons"]

    def nvmlDeviceGetPerformanceState(self, handle: int) -> int:
        return self._dev("nvmlDeviceGetPerformanceState", handle)["pstate"]

    # --- processes
    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> t.List[types.SimpleNamespace]:
        return list(self._dev("nvmlDeviceGetComputeRunningProcesses", handle)["compute"])

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: int) -> t.List[types.SimpleNamespace]:
        return list(self._dev("nvmlDeviceGetComputeRunningProcesses_v2", handle)["compute"])

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> t.List[types.SimpleNamespace]:
        return list(self._dev("nvmlDeviceGetGraphicsRunningProcesses", handle)["graphics"])

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: int) -> t.List[types.SimpleNamespace]:
        return list(self._dev("nvmlDeviceGetGraphicsRunningProcesses_v2", handle)["graphics"])

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: int) -> t.List[types.SimpleNamespace]:
        return list(self._dev("nvmlDeviceGetMPSComputeRunningProcesses", handle)["mps"])

    # --- topology
    def nvmlDeviceGetTopologyCommonAncestor(self, first: int, second: int) -> int:
        self._dev("nvmlDeviceGetTopologyCommonAncestor", first)
        self._dev("nvmlDeviceGetTopologyCommonAncestor", second)
        return self.devices[first]["level"].get(second, 50)

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        links = self._dev("nvmlDeviceGetNvLinkState", handle)["nvlinks"]
        if link >= self.NVML_NVLINK_MAX_LINKS:
            raise NVMLError(2)
        if not links:
            raise NVMLError(3)
        return int(link < len(links) and links[link] is not None)

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> types.SimpleNamespace:
        peer = self._dev("nvmlDeviceGetNvLinkRemotePciInfo", handle)["nvlinks"][link]
        if isinstance(peer, str):  # "switch:<n>": a link to NVSwitch n (an HGX baseboard)
            return types.SimpleNamespace(busId="00000000:%02X:00.0" % (4 + int(peer.split(":")[1])))
        return types.SimpleNamespace(busId=self.devices[peer]["bus"])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:
        peer = self._dev("nvmlDeviceGetNvLinkRemoteDeviceType", handle)["nvlinks"][link]
        return 2 if isinstance(peer, str) else 0  # NVML_NVLINK_DEVICE_TYPE_SWITCH / _GPU
