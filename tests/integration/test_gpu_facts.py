# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpuops.fleet.gpu_facts through real ansible-playbook runs on simulated GPU hosts."""

from __future__ import annotations

import json
import subprocess

import pytest

from ansible_run import REPO, run_module, run_playbook

INCIDENT_MIB = 93029


def facts(result):
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    return result["ansible_facts"]


def test_incident_host_names_every_worker(make_host, inventory, tmp_path):
    host = make_host("gpu-node-01")
    tree = host.gpusim_json("vllm", "--tp", "8", "--mib", str(INCIDENT_MIB))
    result = run_module("gpu_facts", inventory(host), tmp_path / "out")["gpu-node-01"]
    got = facts(result)
    gpus = got["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert got["gpu_driver"]["count"] == 8
    for i, gpu in enumerate(gpus):
        assert gpu["memory_used_mib"] == INCIDENT_MIB
        assert gpu["memory_total_mib"] == 97887
        assert gpu["error"] is None
        holders = [(p["pid"], p["name"], p["visible"]) for p in gpu["processes"]]
        assert holders == [(tree["workers"][i], "VLLM::Worker_TP%d" % i, True)]
        assert gpu["processes"][0]["used_memory_mib"] == INCIDENT_MIB
        assert gpu["processes"][0]["type"] == "compute"


def test_incident_after_broken_cleanup(make_host, inventory, tmp_path):
    """What head -1 left behind: 7 GPUs still at 93,029 MiB, held by reparented workers."""
    host = make_host("gpu-node-01")
    tree = host.gpusim_json("vllm", "--tp", "8", "--mib", str(INCIDENT_MIB))
    host.gpusim("incident")
    gpus = facts(run_module("gpu_facts", inventory(host), tmp_path / "out")["gpu-node-01"])["gpus"]
    assert gpus[0]["memory_used_mib"] == 0 and gpus[0]["processes"] == []
    for i in range(1, 8):
        assert gpus[i]["memory_used_mib"] == INCIDENT_MIB
        assert [p["pid"] for p in gpus[i]["processes"]] == [tree["workers"][i]]


def test_idle_host(make_host, inventory, tmp_path):
    host = make_host("gpu-node-01")
    gpus = facts(run_module("gpu_facts", inventory(host), tmp_path / "out")["gpu-node-01"])["gpus"]
    assert len(gpus) == 8
    assert all(g["processes"] == [] and g["memory_used_mib"] == 0 for g in gpus)
    assert all(g["memory_reserved_mib"] == 512 for g in gpus)
    assert all(g["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition" for g in gpus)
    assert len({g["uuid"] for g in gpus}) == 8


def test_lost_gpu_is_reported_while_others_are_read(make_host, inventory, tmp_path):
    host = make_host("gpu-node-01")
    host.gpusim_json("vllm", "--tp", "8", "--mib", str(INCIDENT_MIB))
    host.gpusim("lose-gpu", "--gpu", "3")
    gpus = facts(run_module("gpu_facts", inventory(host), tmp_path / "out")["gpu-node-01"])["gpus"]
    assert len(gpus) == 8
    assert "lost" in gpus[3]["error"].lower()
    assert [g["index"] for g in gpus if g["error"] is None] == [0, 1, 2, 4, 5, 6, 7]
    assert all(g["memory_used_mib"] == INCIDENT_MIB for g in gpus if g["error"] is None)


def test_foreign_pid_is_listed_as_invisible(make_host, inventory, tmp_path):
    host = make_host("gpu-node-01")
    host.gpusim("foreign", "--gpu", "2", "--mib", "20000")
    gpus = facts(run_module("gpu_facts", inventory(host), tmp_path / "out")["gpu-node-01"])["gpus"]
    (proc,) = gpus[2]["processes"]
    assert proc["visible"] is False
    assert proc["used_memory_mib"] == 20000
    assert gpus[2]["memory_used_mib"] == 20000
    assert all(g["processes"] == [] for g in gpus if g["index"] != 2)


def test_local_pid_without_device_files_is_not_named_when_nvml_lists_missing_pids(make_host, inventory, tmp_path):
    """NVML lists a PID this namespace does not have, so a PID it also lists may be the machine's: a local sleep with
    that number and no device file open is not named as the holder; the fake vLLM workers (device files open) are."""
    host = make_host("gpu-node-01")
    host.foreign(2, 20000)
    sleeper = subprocess.Popen(["sleep", "600"])
    try:
        host.record_alloc(sleeper.pid, 3, 7000, flags=["foreign"])
        tree = host.spawn_vllm(2, mib=30000)
        devices = host.device_holders()
        assert sleeper.pid not in devices and all(worker in devices for worker in tree["workers"])
        gpus = facts(run_module("gpu_facts", inventory(host), tmp_path / "out")["gpu-node-01"])["gpus"]
        (unverified,) = gpus[3]["processes"]
        assert unverified["pid"] == sleeper.pid and unverified["unverified"] is True and unverified["visible"] is False
        assert unverified["name"] is None and unverified["cmdline"] is None and unverified["used_memory_mib"] == 7000
        named = [(p["pid"], p["name"], p["unverified"]) for g in gpus[:2] for p in g["processes"]]
        assert named == [(worker, "VLLM::Worker_TP%d" % rank, False) for rank, worker in enumerate(tree["workers"])]
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_orphan_memory_has_no_process(make_host, inventory, tmp_path):
    host = make_host("gpu-node-01")
    host.gpusim("orphan", "--gpu", "5", "--mib", "4096")
    gpus = facts(run_module("gpu_facts", inventory(host), tmp_path / "out")["gpu-node-01"])["gpus"]
    assert gpus[5]["memory_used_mib"] == 4096
    assert gpus[5]["processes"] == []


def test_driver_not_loaded_fails_clearly(make_host, inventory, tmp_path):
    host = make_host("gpu-node-01")
    host.gpusim("driver", "--unload")
    result = run_module("gpu_facts", inventory(host), tmp_path / "out")["gpu-node-01"]
    assert result["failed"] is True
    assert "driver" in result["msg"].lower() and "not loaded" in result["msg"].lower()


def test_bad_gpus_value_names_option_and_value(make_host, inventory, tmp_path):
    host = make_host("gpu-node-01")
    result = run_module("gpu_facts", inventory(host), tmp_path / "out", {"gpus": [0, 11]})["gpu-node-01"]
    assert result["failed"] is True
    assert "gpus" in result["msg"] and "11" in result["msg"]


def test_selection_by_index_and_uuid(make_host, inventory, tmp_path):
    host = make_host("gpu-node-01")
    uuid6 = host.status()["gpus"][6]["uuid"]
    gpus = facts(run_module("gpu_facts", inventory(host), tmp_path / "out", {"gpus": [1, uuid6]})["gpu-node-01"])["gpus"]
    assert [g["index"] for g in gpus] == [1, 6]
    assert gpus[1]["uuid"] == uuid6


def test_two_hosts_are_read_apart(make_host, inventory, tmp_path):
    busy = make_host("gpu-node-01")
    idle = make_host("gpu-node-02")
    busy.gpusim_json("vllm", "--tp", "4", "--first-gpu", "4", "--mib", "40000")
    results = run_module("gpu_facts", inventory(busy, idle), tmp_path / "out")
    busy_gpus = facts(results["gpu-node-01"])["gpus"]
    idle_gpus = facts(results["gpu-node-02"])["gpus"]
    assert [g["memory_used_mib"] for g in busy_gpus] == [0] * 4 + [40000] * 4
    assert all(g["memory_used_mib"] == 0 for g in idle_gpus)
    assert {g["uuid"] for g in busy_gpus}.isdisjoint({g["uuid"] for g in idle_gpus})


def test_gpu_facts_playbook_prints_table(make_host, inventory):
    host = make_host("gpu-node-01")
    tree = host.gpusim_json("vllm", "--tp", "8", "--mib", str(INCIDENT_MIB))
    host.gpusim("incident")
    proc = run_playbook(REPO / "playbooks" / "gpu_facts.yml", inventory(host))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "93029/97887" in proc.stdout.replace(",", "")
    for i in range(1, 8):
        assert "VLLM::Worker_TP%d" % i in proc.stdout
        assert str(tree["workers"][i]) in proc.stdout
    assert "VLLM::Worker_TP0" not in proc.stdout


def test_mps_client_is_listed_with_its_memory(make_host, inventory, tmp_path):
    """An MPS client is in NVML's MPS list only: it must not read as 'memory used, no process'."""
    host = make_host("gpu-node-01")
    spec = {"key": "client", "title": "python3 infer.py --mps", "hold": [{"gpu": 1, "mib": 800, "flags": ["mps"]}]}
    pids = host.gpusim_json("tree", "--spec", json.dumps(spec))
    gpus = facts(run_module("gpu_facts", inventory(host), tmp_path / "out", {"gpus": ["1"]})["gpu-node-01"])["gpus"]
    assert gpus[0]["memory_used_mib"] == 800
    assert [(p["pid"], p["type"], p["used_memory_mib"], p["visible"]) for p in gpus[0]["processes"]] == [
        (pids["client"], "mps", 800, True)]


def test_bad_gpus_fail_naming_the_value(make_host, inventory, tmp_path):
    host = make_host("gpu-node-01")
    for value in ("\u00b2", "\u0663"):
        result = run_module("gpu_facts", inventory(host), tmp_path / "out", {"gpus": [value]})["gpu-node-01"]
        assert result["failed"] is True and result["msg"].startswith("gpus: %r" % value), result["msg"]


def smi_topology(host):
    """The fake `nvidia-smi topo -m` (a C program reading NVML on its own): GPU name -> cells."""
    import subprocess
    from gpusim.api import SIM_BIN_DIR

    env = dict(host.environment())
    out = subprocess.run([str(SIM_BIN_DIR / "nvidia-smi"), "topo", "-m"], env=env, capture_output=True, text=True,
                         timeout=30, check=True).stdout
    lines = out.split("\n\nLegend:")[0].splitlines()
    columns = len(lines[0].split("\t")) - 4
    return [[cell.strip() for cell in line.split("\t")[1:columns + 1]] for line in lines[1:]]


@pytest.mark.parametrize("topology, pair", [("nvswitch", "NV18"), ("nvlink", "NV1"), ("pcie", None)])
def test_topology_as_nvidia_smi_prints_it(make_host, inventory, tmp_path, topology, pair):
    """HGX: every GPU's links go to NVSwitches, and each pair counts as NV18; gpu_facts agrees with nvidia-smi topo -m."""
    host = make_host("gpu-node-01", "--topology", topology)
    got = facts(run_module("gpu_facts", inventory(host), tmp_path / "out", {"topology": True})["gpu-node-01"])
    matrix = got["gpu_topology"]["matrix"]
    assert got["gpu_topology"]["gpus"] == list(range(8))
    assert [row[i] for i, row in enumerate(matrix)] == ["X"] * 8
    if pair:
        assert {cell for i, row in enumerate(matrix) for j, cell in enumerate(row) if i != j} == {pair}
    assert matrix == smi_topology(host)
