# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The free_gpus filter: gpu_facts in, GPU indices out; bad input named."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter.free_gpus import FilterModule, free_gpus


def gpu(index, used=0, processes=(), **extra):
    entry = {"index": index, "memory_used_mib": used, "processes": None if processes is None else list(processes), "error": None, "ecc_uncorrected_volatile": 0,
             "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}, "retired_pages": None}
    entry.update(extra)
    return entry


FACTS = {"gpus": [
    gpu(0),
    gpu(1, used=93029, processes=[{"pid": 10, "name": "VLLM::Worker_TP1"}]),
    gpu(2, used=2000),                                            # above 1024 MiB, no process: held by no process
    gpu(3, used=600),                                             # idle, below the threshold
    gpu(4, ecc_uncorrected_volatile=2),                           # unhealthy
    gpu(5, used=None, processes=None, error="GPU 5: NVML_ERROR_GPU_IS_LOST"),
    gpu(6, used=None),                                            # memory not read
    gpu(7, remapped_rows={"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False}),
]}


def test_free_gpus_from_facts_registered_result_or_list():
    assert free_gpus(FACTS) == [0, 3]
    assert free_gpus({"ansible_facts": FACTS, "changed": False}) == [0, 3]
    assert free_gpus(FACTS["gpus"]) == [0, 3]
    assert FilterModule().filters()["free_gpus"] is free_gpus


def test_threshold_and_healthy():
    assert free_gpus(FACTS, threshold_mib=4096) == [0, 2, 3]
    assert free_gpus(FACTS, threshold_mib=0) == [0]
    assert free_gpus(FACTS, threshold_mib="512", healthy=False) == [0, 4, 7]


@pytest.mark.parametrize("facts, options, words", [
    ("gpus", {}, "free_gpus: expected"),
    ({"no": "gpus"}, {}, "free_gpus: expected"),
    (FACTS, {"threshold_mib": -1}, "threshold_mib: -1"),
    (FACTS, {"threshold_mib": "lots"}, "threshold_mib: 'lots'"),
    (FACTS, {"threshold_mib": True}, "threshold_mib: True"),
    (FACTS, {"healthy": "yes"}, "healthy: 'yes'"),
])
def test_bad_input_is_refused_naming_the_option_and_value(facts, options, words):
    with pytest.raises(AnsibleFilterError) as info:
        free_gpus(facts, **options)
    assert words in str(info.value)
