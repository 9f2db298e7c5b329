# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia-smi CSV fallback parser, fed output in nvidia-smi's own format."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import Holder
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.smi import (
    apps_command, gpu_command, GPU_FIELDS, parse_apps, parse_gpus, query_gpus, run_csv, SmiError)

# nvidia-smi --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits on an 8 x RTX PRO 6000 host, GPU 1 without MIG support
NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
GPU_CSV = "\n".join([
    ", ".join(["0", "GPU-5a1c7e0f-3b2d-4c11-9e8f-0123456789ab", NAME, "00000000:1B:00.0", "97887", "93029", "4346", "580.95.05",
               "512", "97", "45", "62", "310.42", "600.00", "Enabled", "Disabled", "Enabled", "0", "P0"]),
    ", ".join(["1", "GPU-5a1c7e0f-3b2d-4c11-9e8f-0123456789ac", NAME, "00000000:2B:00.0", "97887", "0", "97375", "580.95.05",
               "512", "0", "0", "34", "85.10", "600.00", "Disabled", "[N/A]", "Disabled", "[N/A]", "P8"]),
    "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU",
]) + "\n"

APPS_CSV = """\
GPU-5a1c7e0f-3b2d-4c11-9e8f-0123456789ab, 4242, 93029
GPU-5a1c7e0f-3b2d-4c11-9e8f-0123456789ab, 4300, [N/A]
"""


def test_gpu_rows_typed_and_placeholders_null():
    rows, other = parse_gpus(GPU_CSV)
    assert rows[0] == {
        "index": 0, "uuid": "GPU-5a1c7e0f-3b2d-4c11-9e8f-0123456789ab", "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        "pci_bus_id": "00000000:1B:00.0", "memory_total_mib": 97887, "memory_used_mib": 93029, "memory_free_mib": 4346,
        "memory_reserved_mib": 512,
        "utilization_gpu_pct": 97, "utilization_memory_pct": 45, "temperature_c": 62, "power_draw_w": 310.42, "power_limit_w": 600.0,
        "persistence_mode": True, "mig_mode": False, "ecc_mode": True, "ecc_uncorrected_volatile": 0, "performance_state": "P0",
        "driver_version": "580.95.05",
    }
    assert rows[1]["mig_mode"] is None and rows[1]["ecc_uncorrected_volatile"] is None
    assert rows[1]["ecc_mode"] is False and rows[1]["persistence_mode"] is False
    assert other == ["Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU"]


@pytest.mark.parametrize("word", ["[Not Supported]", "N/A", "[Unknown Error]", "", "garbage"])
def test_placeholders_and_garbage_are_null(word):
    line = GPU_CSV.splitlines()[0].replace(", 62, ", ", %s, " % word)
    rows, dummy = parse_gpus(line)
    assert rows[0]["temperature_c"] is None


def test_apps_rows_with_not_available_memory():
    assert parse_apps(APPS_CSV) == [
        ("GPU-5a1c7e0f-3b2d-4c11-9e8f-0123456789ab", Holder(4242, 93029, "compute")),
        ("GPU-5a1c7e0f-3b2d-4c11-9e8f-0123456789ab", Holder(4300, None, "compute")),
    ]
    assert parse_apps("") == []


def test_commands_ask_for_csv_without_units():
    assert gpu_command("/usr/bin/nvidia-smi")[1].startswith("--query-gpu=index,uuid,name,pci.bus_id,")
    assert gpu_command("/usr/bin/nvidia-smi")[2] == "--format=csv,noheader,nounits"
    assert apps_command("nvidia-smi") == ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"]


def test_failing_nvidia_smi_raises_with_its_output():
    def run(command):
        return 9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", ""

    with pytest.raises(SmiError) as caught:
        run_csv(run, ["nvidia-smi", "-L"])
    assert str(caught.value) == "nvidia-smi -L failed (rc=9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."


def test_optional_fields_this_nvidia_smi_rejects_are_dropped():
    asked = []

    def run(command):
        asked.append(command[1])
        for rejected in ("mig.mode.current", "ecc.errors.uncorrected.volatile.total"):
            if rejected in command[1]:
                return 2, 'Field "%s" is not a valid field to query.\n\nInvalid field list.\n' % rejected, ""
        kept = [field for field in GPU_FIELDS if field.query not in ("mig.mode.current", "ecc.errors.uncorrected.volatile.total")]
        return 0, ", ".join("7" if field.key == "index" else "1" for field in kept) + "\n", ""

    rows, other = query_gpus(run, "nvidia-smi")
    assert len(asked) == 3 and other == []
    assert rows[0]["index"] == 7 and "mig_mode" not in rows[0] and "ecc_uncorrected_volatile" not in rows[0]


def test_required_field_rejected_fails():
    def run(command):
        return 2, 'Field "memory.used" is not a valid field to query.\n', ""

    with pytest.raises(SmiError, match="memory.used"):
        query_gpus(run, "nvidia-smi")
