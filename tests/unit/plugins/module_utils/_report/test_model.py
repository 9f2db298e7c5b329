# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet report's data (_report/model) on hand-made results: numbers, problems and order; bad results never crash."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._report import model, render

EVIL = "<script>alert(1)</script>"


def proc(pid, name, mib, visible=True, cmdline=None):
    return {"pid": pid, "name": name if visible else None, "cmdline": (cmdline or [name]) if visible else None, "username": "vllm" if visible else None,
            "used_memory_mib": mib, "visible": visible, "unverified": False}


def gpu(index, used, procs, **extra):
    entry = {"index": index, "uuid": "GPU-%d" % index, "name": "NVIDIA X", "memory_used_mib": used, "memory_total_mib": 97887,
             "utilization_gpu_pct": 50, "temperature_c": 60, "power_draw_w": 300.0, "power_limit_w": 600.0, "ecc_uncorrected_volatile": 0,
             "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}, "retired_pages": None,
             "clocks_event_reasons": [], "processes": procs, "error": None}
    entry.update(extra)
    return entry


def results():
    ok = {"changed": False, "ansible_facts": {"gpu_driver": {"driver_version": "580", "cuda_driver_version": "13.0", "source": "nvml"}, "gpus": [
        gpu(0, 93029, [proc(11, "VLLM::Worker_TP0", 93029)]),
        gpu(1, 93029, [proc(12, "VLLM::Worker_TP1", 93029)]),
        gpu(2, 5000, []),
        gpu(3, 0, [], ecc_uncorrected_volatile=1, clocks_event_reasons=["hw_slowdown"]),
        gpu(4, None, None, error="GPU 4: lost"),
        gpu(5, 20000, [proc(4242, None, 20000, visible=False)]),
        gpu(6, 3000, [proc(77, EVIL, 3000, cmdline=["python3", "x.py", EVIL, "--api-key", "sekrit"])]),
        gpu(7, 0, []),
    ]}, "owners": [
        {"pid": 11, "kind": "server", "server": "vllm-8000", "launcher_pid": 10, "launcher": "vllm serve m", "why": "the owner"},
        {"pid": 12, "kind": "orphan", "server": None, "launcher_pid": None, "launcher": None, "why": "its launcher chain hangs from PID 1 (init)"},
        {"pid": 4242, "kind": "other namespace", "why": "a container's?"},
        {"pid": 77, "kind": "other job", "why": "belongs to live PID 5"},
    ], "servers": [{"name": "vllm-8000", "pid": 10, "create_time": 1764470000.0, "running": True, "model": "m", "port": 8000,
                    "gpus": [0, 1], "config_hash": "abcdef0123456789", "health": "HTTP 200", "healthy": True, "error": None},
                   {"name": "vllm-8001", "pid": 20, "create_time": 1764470000.0, "running": False, "model": "m2", "port": 8001,
                    "gpus": [2], "config_hash": "x", "health": None, "healthy": None, "error": None}]}
    return [("b-host", ok), ("a-down", {"unreachable": True, "msg": "ssh: connection refused"}), ("c-fail", {"failed": True, "msg": "no driver"})]


def test_numbers_problems_and_order():
    report = model.build_report(results(), 1024, 1764470000.0)
    s = report["summary"]
    assert (s["hosts"], s["hosts_answered"], s["hosts_unreachable"], s["hosts_failed"]) == (3, 1, 1, 1)
    assert (s["gpus"], s["gpus_free"], s["gpus_held"], s["gpus_unhealthy"], s["gpus_lost"]) == (8, 1, 5, 2, 1)
    assert s["holders"] == 4 and s["orphans"] == 1 and s["memory_used_mib"] == 93029 * 2 + 5000 + 20000 + 3000
    assert [p["kind"] for p in report["problems"]] == ["unreachable", "failed", "lost", "unhealthy", "orphan", "unaccounted", "server"]
    assert [h["name"] for h in report["hosts"]] == ["a-down", "b-host", "c-fail"]
    host = report["hosts"][1]
    assert host["free_gpus"] == [7]
    assert [g["state"] for g in host["gpus"]] == ["held", "held", "held", "unhealthy", "lost", "held", "held", "free"]
    assert host["gpus"][3]["throttle"] == ["throttled: hw_slowdown"]
    assert host["gpus"][6]["holders"][0]["cmdline"] == "python3 x.py " + EVIL + " --api-key ********"
    assert report["generated_at"] == "2025-11-30T02:33:20Z"


@pytest.mark.parametrize("raw", [None, {}, {"skipped": True}, {"ansible_facts": {"gpus": "x"}}, {"ansible_facts": {"gpus": [None, 3, {}]}},
                                 {"ansible_facts": {"gpus": [{"index": "0", "memory_used_mib": "N/A", "processes": "?", "remapped_rows": []}]},
                                  "owners": [1], "servers": ["x", {"argv": "x", "gpus": "x"}]}])
def test_bad_results_never_crash(raw):
    report = model.build_report([("h", raw)], 1024, None)
    files = render.render_all(report)
    assert 'data-host="h"' in files["index.html"]


@pytest.mark.parametrize("raw, expected", [
    (None, None), ("podman", None), ({}, None), ({"name": "vllm", "image": "img"}, None),
    ({"runtime": "podman", "id": "ab" * 32, "name": "vllm", "image": "img"},
     {"runtime": "podman", "id": "ab" * 32, "name": "vllm", "image": "img", "pod_uid": None}),
    ({"runtime": "kubernetes", "id": 7, "name": None, "image": None, "pod_uid": "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"},
     {"runtime": "kubernetes", "id": "7", "name": None, "image": None, "pod_uid": "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"}),
])
def test_holder_container_is_kept_as_text_or_none(raw, expected):
    found = results()
    found[0][1]["ansible_facts"]["gpus"][0]["processes"][0]["container"] = raw
    report = model.build_report(found, 1024, 0)
    host = next(h for h in report["hosts"] if h["name"] == "b-host")
    assert host["gpus"][0]["holders"][0]["container"] == expected
    assert all(h["container"] is None for gpu in host["gpus"][1:] for h in gpu["holders"])
