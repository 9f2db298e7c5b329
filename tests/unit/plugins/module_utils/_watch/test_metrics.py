# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The endpoint's text: each holder in its class, every class a series, evidence in the labels, the format's escapes."""

from __future__ import annotations

import math

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._http.prometheus import parse
from ansible_collections.gpuops.fleet.plugins.module_utils._watch import metrics


def holder(pid, owner, mib, name="python3", container=None):
    return {"pid": pid, "name": name, "owner": owner, "used_memory_mib": mib, "container": container}


GPU = {"index": 2, "uuid": "GPU-2", "state": "held", "unhealthy": False, "memory_used_mib": 80000, "memory_total_mib": 97887,
       "unaccounted_mib": None, "holders": [
           holder(10, "server", 40000, "VLLM::Worker_TP0"), holder(11, "orphan", 20000, "VLLM::Worker_TP1"),
           holder(12, "other job", 9000, "python3"), holder(13, "unmanaged", 1000, "vllm"),
           holder(14, "other job", 5000, "python3", container={"runtime": "podman", "id": "abc"}),
           holder(15, "other namespace", 3000, None), holder(16, "gone", 2000), holder(17, "unverified", None)]}


@pytest.mark.parametrize("owner, container, expected", [
    ("server", None, "server"), ("server", {"runtime": "podman"}, "server"), ("orphan", None, "orphan"),
    ("orphan", {"runtime": "docker"}, "orphan"), ("other job", None, "foreign"), ("unmanaged", None, "foreign"),
    ("unverified", None, "foreign"), (None, None, "foreign"), ("other job", {"runtime": "podman"}, "container"),
    ("other namespace", None, "container"), ("gone", None, None),
])
def test_holder_classes(owner, container, expected):
    assert metrics.holder_class({"owner": owner, "container": container}) == expected


def families(samples):
    return parse(metrics.exposition(samples))


def test_a_gpus_memory_by_class_and_its_holders_with_their_evidence():
    found = families(metrics.gpu_samples("n1", [GPU]))
    by_class = {labels["class"]: value for labels, value in found["gpuops_gpu_memory_by_class_mib"]}
    assert by_class == {"server": 40000, "orphan": 20000, "foreign": 10000, "container": 8000, "none": 0}
    counts = {labels["class"]: value for labels, value in found["gpuops_gpu_holders"]}
    assert counts == {"server": 1, "orphan": 1, "foreign": 3, "container": 2}
    holders = {int(labels["pid"]): (labels["class"], labels["name"], value) for labels, value in found["gpuops_gpu_holder_memory_mib"]}
    assert set(holders) == {11, 12, 13, 14, 15, 17}  # not the server's own, not the one that exited
    assert holders[11] == ("orphan", "VLLM::Worker_TP1", 20000) and holders[15] == ("container", "?", 3000)
    assert math.isnan(holders[17][2])  # the driver did not say: NaN, not 0
    for labels, _value in found["gpuops_gpu_holder_memory_mib"]:
        assert labels["host"] == "n1" and labels["gpu"] == "2" and labels["uuid"] == "GPU-2"
    assert found["gpuops_gpus"] == [({"host": "n1"}, 1.0)]


def test_memory_of_no_process_and_a_lost_gpu():
    lost = {"index": 7, "uuid": None, "state": "lost", "memory_used_mib": None, "memory_total_mib": None, "holders": []}
    none = {"index": 6, "uuid": "GPU-6", "state": "held", "memory_used_mib": 4096, "memory_total_mib": 97887, "unaccounted_mib": 4096,
            "holders": []}
    found = families(metrics.gpu_samples("n1", [none, lost]))
    assert ({"host": "n1", "gpu": "6", "uuid": "GPU-6", "class": "none"}, 4096.0) in found["gpuops_gpu_memory_by_class_mib"]
    assert [(labels["gpu"], value) for labels, value in found["gpuops_gpu_lost"]] == [("6", 0.0), ("7", 1.0)]
    used = dict((labels["gpu"], value) for labels, value in found["gpuops_gpu_memory_used_mib"])
    assert used["6"] == 4096 and math.isnan(used["7"])


def test_servers():
    up = metrics.ServerState("vllm-8000", "org/m", 8000, "process", 40, True, True, False, 2.0, 1.7e9, 3, None)
    down = metrics.ServerState("vllm-9000", None, None, "systemd", None, False, False, None, None, None, 0, 4)
    found = families(metrics.server_samples("n1", [up, down]))
    assert {labels["server"]: value for labels, value in found["gpuops_server_generates"]} == {"vllm-8000": 0, "vllm-9000": 0}
    assert {labels["server"]: value for labels, value in found["gpuops_server_up"]} == {"vllm-8000": 1, "vllm-9000": 0}
    assert found["gpuops_server_restarts"] == [({"host": "n1", "server": "vllm-9000"}, 4.0)]
    assert found["gpuops_server_start_time_seconds"] == [({"host": "n1", "server": "vllm-8000"}, 1.7e9)]
    (info, _one), (other, _also_one) = found["gpuops_server_info"]
    assert info == {"host": "n1", "server": "vllm-8000", "model": "org/m", "port": "8000", "mode": "process", "pid": "40"}
    assert "model" not in other and other["mode"] == "systemd"


def test_the_text_format():
    text = metrics.exposition(metrics.reading_samples("n1", False, 'NVML: "driver"\nnot loaded\\', 0.25, 1.5)
                              + metrics.gpu_samples("a\"b", []))
    assert '# TYPE gpuops_server_startups_total counter' in text and "# HELP gpuops_gpus " in text
    assert 'gpuops_watch_reading_error{host="n1",error="NVML: \\"driver\\" not loaded\\\\"} 1' in text
    assert 'gpuops_gpus{host="a\\"b"} 0' in text and text.endswith("\n")
    assert parse(text)["gpuops_watch_reading_ok"] == [({"host": "n1"}, 0.0)]
    assert metrics.number_text(float("nan")) == "NaN" and metrics.number_text(0.25) == "0.25" and metrics.number_text(3.0) == "3"
    with pytest.raises(ValueError):
        metrics.sample("gpuops_nothing", 1)
