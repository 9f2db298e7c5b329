# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_cleanup.yml, restart_vllm.yml (and benchmark_matrix.yml once it exists) over SSH, from the incident on every node.

Judged inside each node: the simulator's own reading of its GPUs, the node's process table (node PIDs), and each
server's /health asked from the machine at the node's address.
"""

from __future__ import annotations

import pytest

from fleetlib import PLAYBOOKS, lifecycle, flat, recap, run_playbook, summary_lines

NODES = 4
MIB = 60000


def test_gpu_cleanup_over_ssh_frees_every_node_from_the_incident(make_fleet, tmp_path):
    fleet = make_fleet(NODES)
    trees = {name: fleet.incident(name, mib=MIB) for name in fleet.names}
    for name in fleet.names:
        assert fleet.used(name) == [0, MIB, MIB, MIB]  # worker 0 was SIGKILLed, workers 1-3 hold on
    bystander = fleet.gpusim_json("gpu-node-03", "stuck", "--gpu", "0", "--mib", "500")
    inventory = fleet.inventory(tmp_path / "inventory.yml",
                                host_vars={"gpu-node-03": {"gpu_reclaim_gpus": [1, 2, 3]}})

    check = run_playbook("gpu_cleanup.yml", inventory, "--check")
    assert check.returncode == 0, check.stdout[-3000:]
    for name in fleet.names:
        assert fleet.used(name) == [0 if name != "gpu-node-03" else 500, MIB, MIB, MIB]  # check mode ended nothing
        assert "%s: CHECK MODE: would end 3 process(es)" % name in flat(check.stdout)

    run = run_playbook("gpu_cleanup.yml", inventory)
    assert run.returncode == 0, run.stdout[-3000:]
    for name, tree in trees.items():
        procs = fleet.processes(name)
        assert not [pid for pid in tree["workers"] if pid in procs], "a worker survived on %s" % name
        expected = [500, 0, 0, 0] if name == "gpu-node-03" else [0, 0, 0, 0]
        assert fleet.used(name) == expected, name
        assert "%s: OK: %d MiB freed, 3 process(es) ended" % (name, 3 * MIB) in flat(run.stdout)
    assert bystander["holder"] in fleet.processes("gpu-node-03")  # outside gpu_reclaim_gpus: untouched
    assert all(counters["failed"] == 0 and counters["unreachable"] == 0 for counters in recap(run.stdout).values())


def test_restart_vllm_over_ssh_from_the_incident_starts_verified_servers(make_fleet, tmp_path):
    fleet = make_fleet(NODES)
    trees = {name: fleet.incident(name, mib=MIB) for name in fleet.names}
    inventory = fleet.inventory(tmp_path / "inventory.yml", group_vars={"vllm_restart_serial": 2},
                                host_vars={"gpu-node-02": {"vllm_server_env": {"NCCL_PROTO": "LL"}}})
    run = run_playbook("restart_vllm.yml", inventory)
    assert run.returncode == 0, run.stdout[-4000:]
    for name, tree in fleet_items(fleet, trees):
        procs = fleet.processes(name)
        assert not [pid for pid in [tree["parent"], *tree["workers"]] if pid in procs], name
        server = fleet.server_record(name)["pid"]
        holders = fleet.holders(name)
        assert all(len(holders[gpu]) == 1 for gpu in range(4)), holders
        assert all(fleet.descends_from(name, holders[gpu][0], server) for gpu in range(4)), (name, holders, server)
        assert fleet.health(name) == 200
        said = summary_lines(run.stdout, name)
        assert "STARTED" in said and "%d MiB freed" % (3 * MIB) in said, said
    environ = fleet.gpusim("gpu-node-02", "status").stdout  # the simulator's reading names the holders
    assert "VLLM::Worker_TP3" in environ

    again = run_playbook("restart_vllm.yml", inventory, "-e", "vllm_server_state=started")
    assert again.returncode == 0, again.stdout[-3000:]
    assert all(counters["changed"] == 0 for counters in recap(again.stdout).values()), again.stdout[-3000:]
    assert flat(again.stdout).count("UNCHANGED") == NODES


def fleet_items(fleet, trees):
    return [(name, trees[name]) for name in fleet.names]


@pytest.mark.skipif(not (PLAYBOOKS / "benchmark_matrix.yml").exists(), reason="playbooks/benchmark_matrix.yml does not exist yet")
def test_benchmark_matrix_over_ssh(make_fleet, tmp_path):
    fleet = make_fleet(NODES)
    for name in fleet.names:
        fleet.incident(name, mib=MIB)
    out = tmp_path / "results"
    inventory = fleet.inventory(tmp_path / "inventory.yml", group_vars={
        "vllm_benchmark_configs": [{"name": "default"}, {"name": "LL", "env": {"NCCL_PROTO": "LL"}}],
        "vllm_benchmark_repeats": 1, "vllm_benchmark_results_dir": str(out),
        "vllm_server_benchmark_input_len": 32, "vllm_server_benchmark_output_len": 16,
        "vllm_server_benchmark_num_requests": 4, "vllm_server_benchmark_concurrency": 2,
        "vllm_server_benchmark_warmup_requests": 0,
    })
    run = run_playbook("benchmark_matrix.yml", inventory, timeout=500)
    assert run.returncode == 0, run.stdout[-4000:]
    raw = sorted(path.name for path in (out / "raw").iterdir())
    assert raw == sorted("%s__r1__%s.json" % (name, config) for name in fleet.names for config in ("default", "LL")), raw
    # LL is the faster NCCL protocol of the fake vLLM: the winner, and what every server runs at the end
    assert "LL" in (out / "summary.md").read_text()
    for name in fleet.names:
        assert fleet.health(name) == 200
        server = fleet.server_record(name)["pid"]
        env = lifecycle.node_exec(fleet.rec, name, ["cat", "/proc/%d/environ" % server]).stdout
        assert "NCCL_PROTO=LL" in env.split("\x00"), name
