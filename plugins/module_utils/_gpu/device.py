# -*- coding: utf-8 -*-
# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One GPU's facts (identity, memory, modes, health) read through an NvmlSession.

Package rule (_gpu): the GPUs as NVML and nvidia-smi show them. It imports the flat files of module_utils
(_deps, _argspec, _secrets), _host and its own files: never _reclaim, _bench, _server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import NvmlSession, text
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.errors import NvmlError

# nvmlClocksEventReason* bits (nvml.h)
CLOCKS_EVENT_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

BASE_KEYS = (
    "index", "uuid", "name", "pci_bus_id",
    "memory_total_mib", "memory_used_mib", "memory_reserved_mib", "memory_free_mib",
    "utilization_gpu_pct", "utilization_memory_pct", "temperature_c", "power_draw_w", "power_limit_w",
    "persistence_mode", "mig_mode", "ecc_mode",
)
HEALTH_KEYS = ("ecc_uncorrected_volatile", "remapped_rows", "retired_pages", "clocks_event_reasons", "performance_state")

# nvml.h constants
_TEMPERATURE_GPU = 0
_MEMORY_ERROR_UNCORRECTED = 1
_VOLATILE_ECC = 0
_RETIRED_SINGLE_BIT = 0
_RETIRED_DOUBLE_BIT = 1


def clocks_event_reason_names(mask: int) -> t.List[str]:
    """Names of the bits set in an nvmlClocksEventReason mask; unknown bits as hex."""
    names = [name for bit, name in CLOCKS_EVENT_REASONS if mask & bit]
    rest = mask & ~sum(bit for bit, dummy in CLOCKS_EVENT_REASONS)
    if rest:
        names.append("0x%x" % rest)
    return names


def performance_state_name(value: t.Optional[int]) -> t.Optional[str]:
    return "P%d" % value if value is not None and 0 <= value <= 15 else None


def empty_device(index: int, health: bool, error: t.Optional[str]) -> t.Dict[str, t.Any]:
    """A device dict with every key null: the shape of a GPU that did not answer."""
    device: t.Dict[str, t.Any] = dict.fromkeys(BASE_KEYS + (HEALTH_KEYS if health else ()))
    device["index"] = index
    device["error"] = error
    return device


def read_device(session: NvmlSession, index: int, health: bool) -> t.Dict[str, t.Any]:
    """All facts of GPU ``index`` but its processes; a GPU that fails (e.g. lost) gets nulls and ``error``."""
    try:
        return _read(session, index, health)
    except NvmlError as exc:
        return empty_device(index, health, "GPU %d: %s" % (index, exc))


def _read(session: NvmlSession, index: int, health: bool) -> t.Dict[str, t.Any]:
    handle = session.handle(index)
    optional = session.optional
    memory = session.memory(index)
    util = optional("nvmlDeviceGetUtilizationRates", handle)
    power = optional("nvmlDeviceGetPowerUsage", handle)
    limit = optional("nvmlDeviceGetEnforcedPowerLimit", handle)
    if limit is None:
        limit = optional("nvmlDeviceGetPowerManagementLimit", handle)
    persistence = optional("nvmlDeviceGetPersistenceMode", handle)
    mig = optional("nvmlDeviceGetMigMode", handle)
    ecc = optional("nvmlDeviceGetEccMode", handle)
    device: t.Dict[str, t.Any] = {
        "index": index,
        "uuid": session.uuid(index),
        "name": text(session.call("nvmlDeviceGetName", handle)),
        "pci_bus_id": text(session.call("nvmlDeviceGetPciInfo", handle).busId),
        "memory_total_mib": memory.total_mib,
        "memory_used_mib": memory.used_mib,
        "memory_reserved_mib": memory.reserved_mib,
        "memory_free_mib": memory.free_mib,
        "utilization_gpu_pct": None if util is None else util.gpu,
        "utilization_memory_pct": None if util is None else util.memory,
        "temperature_c": optional("nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU),
        "power_draw_w": None if power is None else power / 1000.0,
        "power_limit_w": None if limit is None else limit / 1000.0,
        "persistence_mode": None if persistence is None else bool(persistence),
        "mig_mode": None if mig is None else bool(mig[0]),
        "ecc_mode": None if ecc is None else bool(ecc[0]),
        "error": None,
    }
    if health:
        device.update(_read_health(session, handle))
    return device


def _read_health(session: NvmlSession, handle: t.Any) -> t.Dict[str, t.Any]:
    optional = session.optional
    remapped = optional("nvmlDeviceGetRemappedRows", handle)
    single_bit = optional("nvmlDeviceGetRetiredPages", handle, _RETIRED_SINGLE_BIT)
    retired = None
    if single_bit is not None:
        double_bit = optional("nvmlDeviceGetRetiredPages", handle, _RETIRED_DOUBLE_BIT)
        pending = optional("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        retired = {
            "single_bit": len(single_bit),
            "double_bit": None if double_bit is None else len(double_bit),
            "pending": None if pending is None else bool(pending),
        }
    reasons = optional("nvmlDeviceGetCurrentClocksEventReasons", handle)
    return {
        "ecc_uncorrected_volatile": optional("nvmlDeviceGetTotalEccErrors", handle, _MEMORY_ERROR_UNCORRECTED, _VOLATILE_ECC),
        "remapped_rows": None if remapped is None else {
            "correctable": remapped[0],
            "uncorrectable": remapped[1],
            "pending": bool(remapped[2]),
            "failure": bool(remapped[3]),
        },
        "retired_pages": retired,
        "clocks_event_reasons": None if reasons is None else clocks_event_reason_names(reasons),
        "performance_state": performance_state_name(optional("nvmlDeviceGetPerformanceState", handle)),
    }
