# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One GPU's facts: every field, NOT_SUPPORTED as null, a lost GPU, health off."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.device import (
    BASE_KEYS, clocks_event_reason_names, HEALTH_KEYS, performance_state_name, read_device)
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import open_nvml
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_pynvml import device, FakeNvml


def test_every_field_of_a_busy_gpu():
    with open_nvml(FakeNvml([device(0, used_mib=93029)])) as session:
        got = read_device(session, 0, health=True)
    assert got == {
        "index": 0, "uuid": "GPU-00000000-1111-2222-3333-444455556666", "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "pci_bus_id": "00000000:1B:00.0", "memory_total_mib": 97887, "memory_used_mib": 93029, "memory_reserved_mib": 512,
        "memory_free_mib": 4346, "utilization_gpu_pct": 97, "utilization_memory_pct": 45, "temperature_c": 62,
        "power_draw_w": 310.0, "power_limit_w": 600.0, "persistence_mode": True, "mig_mode": False, "ecc_mode": True,
        "ecc_uncorrected_volatile": 0, "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "retired_pages": {"single_bit": 2, "double_bit": 1, "pending": False}, "clocks_event_reasons": ["gpu_idle"],
        "performance_state": "P0", "error": None,
    }


OPTIONAL_CALLS = {
    "nvmlDeviceGetUtilizationRates": ("utilization_gpu_pct", "utilization_memory_pct"),
    "nvmlDeviceGetTemperature": ("temperature_c",),
    "nvmlDeviceGetPowerUsage": ("power_draw_w",),
    "nvmlDeviceGetPersistenceMode": ("persistence_mode",),
    "nvmlDeviceGetMigMode": ("mig_mode",),
    "nvmlDeviceGetEccMode": ("ecc_mode",),
    "nvmlDeviceGetTotalEccErrors": ("ecc_uncorrected_volatile",),
    "nvmlDeviceGetRemappedRows": ("remapped_rows",),
    "nvmlDeviceGetRetiredPages": ("retired_pages",),
    "nvmlDeviceGetCurrentClocksEventReasons": ("clocks_event_reasons",),
    "nvmlDeviceGetPerformanceState": ("performance_state",),
}


@pytest.mark.parametrize("call", sorted(OPTIONAL_CALLS))
@pytest.mark.parametrize("code", [3, 13, "mismatch", 4])
def test_unsupported_value_is_null_and_the_rest_is_read(call, code):
    lib = FakeNvml([device(0)])
    lib.fail(call, code)
    with open_nvml(lib) as session:
        got = read_device(session, 0, health=True)
    assert got["error"] is None
    for key in OPTIONAL_CALLS[call]:
        assert got[key] is None
    assert got["memory_total_mib"] == 97887
    assert sum(value is None for value in got.values()) == len(OPTIONAL_CALLS[call]) + 1  # + error


def test_power_limit_falls_back_to_management_limit_then_null():
    lib = FakeNvml([device(0)])
    lib.fail("nvmlDeviceGetEnforcedPowerLimit", 3)
    with open_nvml(lib) as session:
        assert read_device(session, 0, health=False)["power_limit_w"] == 599.0
        lib.fail("nvmlDeviceGetPowerManagementLimit", 3)
        assert read_device(session, 0, health=False)["power_limit_w"] is None


def test_retired_pages_partly_unsupported():
    lib = FakeNvml([device(0)])
    lib.fail("nvmlDeviceGetRetiredPagesPendingStatus", 3)
    with open_nvml(lib) as session:
        assert read_device(session, 0, health=True)["retired_pages"] == {"single_bit": 2, "double_bit": 1, "pending": None}


def test_lost_gpu_gets_error_and_nulls():
    with open_nvml(FakeNvml([device(0), device(1, lost=True)])) as session:
        got = read_device(session, 1, health=True)
    assert got["error"].startswith("GPU 1: GPU is lost (NVML_ERROR_GPU_IS_LOST)")
    assert got["index"] == 1
    assert set(got) == set(BASE_KEYS + HEALTH_KEYS + ("error",))
    assert all(got[key] is None for key in BASE_KEYS[1:] + HEALTH_KEYS)


def test_lost_while_reading_an_optional_value_is_a_gpu_error_not_null():
    lib = FakeNvml([device(0)])
    lib.fail("nvmlDeviceGetPerformanceState", 15)
    with open_nvml(lib) as session:
        got = read_device(session, 0, health=True)
    assert "GPU is lost" in got["error"]
    assert got["memory_total_mib"] is None


def test_health_off_leaves_health_keys_out_and_skips_their_calls():
    lib = FakeNvml([device(0)])
    with open_nvml(lib) as session:
        got = read_device(session, 0, health=False)
    assert not set(HEALTH_KEYS) & set(got)
    assert "nvmlDeviceGetRemappedRows" not in lib.calls


def test_clock_event_reason_names():
    assert clocks_event_reason_names(0) == []
    assert clocks_event_reason_names(0x1 | 0x4 | 0x40) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert clocks_event_reason_names(0x8 | 0x10000) == ["hw_slowdown", "0x10000"]


@pytest.mark.parametrize("value, name", [(0, "P0"), (8, "P8"), (15, "P15"), (32, None), (None, None)])
def test_performance_state_name(value, name):
    assert performance_state_name(value) == name
