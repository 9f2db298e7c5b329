# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NvmlSession and open_nvml: opening NVML, error messages, memory, holders."""

from __future__ import annotations

import ctypes
import inspect
import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu import nvml
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.errors import NvmlError
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import Holder, Memory, open_nvml
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_pynvml import device, FakeNvml, proc


@pytest.mark.parametrize("code, expected", [
    (9, "cannot initialise NVML: Driver Not Loaded (NVML_ERROR_DRIVER_NOT_LOADED): the NVIDIA kernel driver is not loaded"),
    (12, "NVML Shared Library Not Found (NVML_ERROR_LIBRARY_NOT_FOUND): libnvidia-ml.so.1 was not found by the dynamic loader: install the NVIDIA driver"),
    (4, "Insufficient Permissions (NVML_ERROR_NO_PERMISSION): this user may not access the GPU: run the task with become: true"),
    (18, "(NVML_ERROR_LIB_RM_VERSION_MISMATCH): the NVML library and the loaded kernel module are different versions"),
    (999, "cannot initialise NVML: Unknown Error (NVML_ERROR_UNKNOWN)"),
])
def test_open_failure_says_what_is_wrong_and_how_to_fix_it(code, expected):
    with pytest.raises(NvmlError) as caught:
        with open_nvml(FakeNvml([device(0)], init_error=code)):
            pytest.fail("the session must not open")
    assert expected in str(caught.value)
    assert caught.value.code == code


def test_open_yields_a_session_and_shuts_down():
    lib = FakeNvml([device(0), device(1)])
    with open_nvml(lib) as session:
        assert session.count == 2
        assert not lib.shutdown
    assert lib.shutdown


def test_library_mismatch_error_is_translated_and_falls_back_to_v2_list():
    lib = FakeNvml([device(0, compute=[proc(10, 100)])])
    lib.fail("nvmlDeviceGetComputeRunningProcesses", "mismatch")
    with open_nvml(lib) as session:
        assert session.holders(0) == [Holder(10, 100, "compute")]
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in lib.calls


def test_missing_binding_function_is_function_not_found():
    with open_nvml(FakeNvml([device(0)])) as session:
        with pytest.raises(NvmlError) as caught:
            session.call("nvmlDeviceGetNoSuchThing", 0)
    assert caught.value.code == 13
    assert "older than nvidia-ml-py expects" in str(caught.value)


def test_optional_is_none_for_unsupported_but_raises_for_lost():
    lib = FakeNvml([device(0), device(1, lost=True)])
    lib.fail("nvmlDeviceGetTemperature", 3, index=0)
    with open_nvml(lib) as session:
        assert session.optional("nvmlDeviceGetTemperature", 0, 0) is None
        with pytest.raises(NvmlError) as caught:
            session.optional("nvmlDeviceGetTemperature", 1, 0)
    assert caught.value.code == 15 and "Xid" in str(caught.value)


def test_memory_v2_leaves_the_reservation_out():
    with open_nvml(FakeNvml([device(0, used_mib=93029)])) as session:
        assert session.memory(0) == Memory(97887, 93029, 512, 97887 - 512 - 93029)


def test_memory_falls_back_to_v1_once_when_v2_is_not_supported():
    lib = FakeNvml([device(0, used_mib=1000), device(1)])
    lib.fail("nvmlDeviceGetMemoryInfo_v2", 3)
    with open_nvml(lib) as session:
        assert session.memory(0) == Memory(97887, 1512, None, 97887 - 1512)
        session.memory(1)
    assert lib.calls.count("nvmlDeviceGetMemoryInfo_v2") == 1
    assert lib.calls.count("nvmlDeviceGetMemoryInfo") == 2


def test_holders_merge_compute_and_graphics_lists_without_adding_up():
    lib = FakeNvml([device(0, compute=[proc(30, 500), proc(10, None)], graphics=[proc(30, 500), proc(20, 64)])])
    with open_nvml(lib) as session:
        assert session.holders(0) == [Holder(10, None, "compute"), Holder(20, 64, "graphics"), Holder(30, 500, "compute+graphics")]


def test_holders_graphics_not_supported_is_empty_but_permission_error_raises():
    lib = FakeNvml([device(0, compute=[proc(10, 5)]), device(1)])
    lib.fail("nvmlDeviceGetGraphicsRunningProcesses", 3)
    lib.fail("nvmlDeviceGetComputeRunningProcesses", 4, index=1)
    with open_nvml(lib) as session:
        assert session.holders(0) == [Holder(10, 5, "compute")]
        with pytest.raises(NvmlError, match="NO_PERMISSION"):
            session.holders(1)


def test_driver_versions_and_cuda_fallback():
    lib = FakeNvml([device(0)])
    with open_nvml(lib) as session:
        assert session.driver() == {"driver_version": "580.95.05", "cuda_driver_version": "13.0", "nvml_version": "13.580.95.05", "count": 1}
        lib.fail("nvmlSystemGetCudaDriverVersion_v2", 13)
        lib.fail("nvmlSystemGetNVMLVersion", 3)
        assert session.driver()["cuda_driver_version"] == "12.8"
        assert session.driver()["nvml_version"] is None


def test_inventory_marks_unreadable_uuid():
    with open_nvml(FakeNvml([device(0), device(1, lost=True)])) as session:
        assert session.inventory() == [(0, "GPU-00000000-1111-2222-3333-444455556666"), (1, None)]


def test_fake_matches_the_real_binding():
    """Every call the fake offers exists in nvidia-ml-py with a compatible signature, so the fake cannot drift."""
    real = pytest.importorskip("pynvml")
    for name, member in inspect.getmembers(FakeNvml, inspect.isfunction):
        if not name.startswith("nvml"):
            continue
        fake_params = list(inspect.signature(member).parameters.values())[1:]
        real_params = list(inspect.signature(getattr(real, name)).parameters.values())
        assert len(fake_params) == len(real_params), name
    assert FakeNvml.nvmlMemory_v2 == real.nvmlMemory_v2


def test_release_without_library_mismatch_error_still_maps_nvml_errors(monkeypatch):
    """Older nvidia-ml-py releases have no NVMLLibraryMismatchError: an NVML error must not turn into an AttributeError."""
    monkeypatch.delattr(FakeNvml, "NVMLLibraryMismatchError")
    with open_nvml(FakeNvml([device(0, lost=True)])) as session:
        with pytest.raises(NvmlError) as caught:
            session.uuid(0)
    assert caught.value.code == 15


def test_use_environment_sets_the_variables_and_loads_the_library_from_the_first_folder_that_has_one(tmp_path, monkeypatch):
    """A task's environment given once a process runs: its variables from now on; NVML's library from LD_LIBRARY_PATH's
    folders (the loader read that variable only at the start), skipping a folder without one and a file it cannot load."""
    loaded = []

    def cdll(path, mode=0):
        if open(path).read() == "not a library":
            raise OSError("%s: invalid ELF header" % path)
        loaded.append((path, mode))
    monkeypatch.setattr(nvml.ctypes, "CDLL", cdll)
    empty, broken, good, later = (tmp_path / name for name in ("empty", "broken", "good", "later"))
    for folder in (empty, broken, good, later):
        folder.mkdir()
    (broken / nvml.LIBRARY).write_text("not a library")
    (good / nvml.LIBRARY).write_text("lib")
    (later / nvml.LIBRARY).write_text("lib")
    monkeypatch.delenv("GPUOPS_TEST_LATE", raising=False)
    monkeypatch.setenv("LD_LIBRARY_PATH", os.environ.get("LD_LIBRARY_PATH", ""))  # restored after the test
    path = nvml.use_environment({"GPUOPS_TEST_LATE": 1, "LD_LIBRARY_PATH": ":".join(map(str, ("", empty, broken, good, later)))})
    assert path == str(good / nvml.LIBRARY) and loaded == [(path, ctypes.RTLD_GLOBAL)]
    assert os.environ["GPUOPS_TEST_LATE"] == "1"
    assert nvml.use_environment({"GPUOPS_TEST_LATE": "2"}) is None and len(loaded) == 1 and os.environ["GPUOPS_TEST_LATE"] == "2"
