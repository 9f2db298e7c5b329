# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One fault per node over SSH; every node gets its own outcome, the summary names each, the others finish.

Nodes (4 simulated GPUs each, the incident on every one): 01 healthy; 02 unreachable (its sshd stopped);
03 a lost GPU; 04 a holder that no signal ends (a zombie whose memory stays held); 05 a server that crashes at
start; 06 a Python without nvidia-ml-py but with nvidia-smi on the PATH; 07 with neither.
Nothing a summary calls a success is taken on its word: the simulator's reading inside the node must agree.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import typing as t
from pathlib import Path

import psutil

from fleetlib import SIM_BIN, flat, lifecycle, recap, run_playbook, summary_lines

MIB = 60000


def python_without_nvml(folder: Path) -> str:
    """A venv whose only third-party package is psutil (linked from this one): no nvidia-ml-py."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(folder)}))
    site.mkdir(parents=True, exist_ok=True)
    (site / "psutil").symlink_to(Path(psutil.__file__).parent)
    python = folder / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import psutil; import pynvml"], capture_output=True, text=True, check=False)
    assert "No module named 'pynvml'" in probe.stderr, probe.stderr
    return str(python)


def test_each_fault_gets_its_own_outcome(make_fleet, tmp_path):
    fleet = make_fleet(7)
    n = {i: "gpu-node-%02d" % i for i in range(1, 8)}
    trees = {name: fleet.incident(name, mib=MIB) for name in fleet.names}
    fleet.gpusim(n[3], "lose-gpu", "--gpu", "2")
    stuck = fleet.gpusim_json(n[4], "stuck", "--gpu", "0", "--mib", "3000")
    bare = python_without_nvml(tmp_path / "venv-without-nvml")
    smi_path = "%s:/usr/sbin:/usr/bin:/sbin:/bin" % SIM_BIN

    def env_of(name: str, **extra: str) -> t.Dict[str, str]:
        return dict(fleet.node_env(name), **extra)

    # gpu_cleanup.yml leaves a job of its own alone by default: node 04's holder is to be signalled, so it ends live jobs
    inventory = fleet.inventory(tmp_path / "inventory.yml", group_vars={"gpu_reclaim_timeout": 8}, host_vars={
        n[4]: {"gpu_cleanup_end_live_jobs": True},
        n[5]: {"vllm_server_host_env": dict(fleet.node_env(n[5], host=True), GPUOPS_SIM_FAIL_AT_START="crash",
                                            GPUOPS_SIM_FAIL_AFTER_S="1")},
        n[6]: {"ansible_python_interpreter": bare, "gpuops_fleet_environment": env_of(n[6], PATH=smi_path)},
        n[7]: {"ansible_python_interpreter": bare},
    })
    lifecycle.stop_sshd(fleet.rec, n[2])

    facts = run_playbook("gpu_facts.yml", inventory, "-e", "gpuops_fleet_idle_threshold_mib=100000")
    counters = recap(facts.stdout)
    assert facts.returncode != 0
    assert counters[n[2]]["unreachable"] == 1 and counters[n[7]]["failed"] == 1, facts.stdout[-3000:]
    assert all(counters[n[i]]["failed"] == 0 and counters[n[i]]["unreachable"] == 0 for i in (1, 3, 4, 5, 6))
    out = flat(facts.stdout)
    assert "%s: 4 GPU(s), driver 580.95.05, CUDA ? (read through nvidia-smi)" % n[6] in out
    assert "nvidia-ml-py is not installed: facts come from nvidia-smi" in flat(facts.stderr), facts.stderr[-2000:]
    assert "Failed to import the required Python library (nvidia-ml-py) on %s's Python %s" % (n[7], bare) in out
    assert "! GPU 2: GPU is lost (NVML_ERROR_GPU_IS_LOST)" in out
    assert "%s: 4 GPU(s), driver 580.95.05, CUDA 13.0 (read through nvml)" % n[1] in out

    cleanup = run_playbook("gpu_cleanup.yml", inventory)
    assert cleanup.returncode != 0
    said = {name: summary_lines(cleanup.stdout, name) for name in fleet.names}
    for i in (1, 5):
        assert "%s: OK: %d MiB freed, 3 process(es) ended, GPU 0,1,2,3 verified free" % (n[i], 3 * MIB) in said[n[i]]
    assert "%s: UNREACHABLE" % n[2] in said[n[2]], said[n[2]]
    assert "%s: FAILED" % n[3] in said[n[3]] and "GPU 2" in said[n[3]] and "lost" in said[n[3]], said[n[3]]
    assert "%s: FAILED" % n[4] in said[n[4]] and "pid %d" % stuck["holder"] in said[n[4]], said[n[4]]
    for i in (6, 7):
        assert "%s: FAILED: Failed to import the required Python library (nvidia-ml-py)" % n[i] in said[n[i]]
    assert_only_verified_successes(fleet, said)
    # the unreachable node was not touched: its incident is as it was
    assert fleet.used(n[2]) == [0, MIB, MIB, MIB]
    assert all(pid in fleet.processes(n[2]) for pid in trees[n[2]]["workers"][1:])
    # the zombie still holds GPU 0 and is named; the nodes without NVML kept their holders (nothing blind was done)
    assert fleet.holders(n[4])[0] == [stuck["holder"]]
    assert fleet.used(n[6]) == [0, MIB, MIB, MIB] and fleet.used(n[7]) == [0, MIB, MIB, MIB]

    restart = run_playbook("restart_vllm.yml", inventory)
    assert restart.returncode != 0
    said = {name: summary_lines(restart.stdout, name) for name in fleet.names}
    assert "%s: STARTED" % n[1] in said[n[1]], said[n[1]]
    assert "%s: NOT RESTARTED: unreachable" % n[2] in said[n[2]], said[n[2]]
    for i in (3, 4):
        assert "%s: FAILED at" % n[i] in said[n[i]] and "nothing was stopped" in said[n[i]], said[n[i]]
    assert "%s: FAILED at \"Wait for /health" % n[5] in said[n[5]] and "exited while starting" in said[n[5]], said[n[5]]
    assert "log|" in said[n[5]] and "Engine core initialization failed" in said[n[5]], said[n[5]]
    for i in (6, 7):
        assert "%s: FAILED at" % n[i] in said[n[i]] and "nvidia-ml-py" in said[n[i]], said[n[i]]
    counters = recap(restart.stdout)
    assert [name for name in fleet.names if counters[name]["failed"] or counters[name]["unreachable"]] == [
        n[i] for i in (2, 3, 4, 5, 6, 7)]
    assert_only_verified_successes(fleet, said)
    assert fleet.health(n[1]) == 200 and fleet.health(n[5]) == -1
    assert fleet.used(n[5]) == [0, 0, 0, 0]  # the crashed server's tree is gone with its memory
    server = fleet.server_record(n[1])["pid"]
    holders = fleet.holders(n[1])
    assert all(fleet.descends_from(n[1], holders[gpu][0], server) for gpu in range(4)), holders


def assert_only_verified_successes(fleet, said: t.Dict[str, str]) -> None:
    """Every host a summary calls OK / STARTED is so by the simulator's own reading inside the node."""
    for name, text in said.items():
        if ": OK:" in text:
            assert fleet.used(name) == [0, 0, 0, 0], (name, text)
        if ": STARTED" in text or ": RESTARTED" in text:
            assert fleet.health(name) == 200, (name, text)
            holders = fleet.holders(name)
            assert all(len(holders[gpu]) == 1 for gpu in range(4)), (name, holders)
