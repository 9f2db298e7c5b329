# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One vLLM server across two SSH nodes that reach each other only on the fleet's own bridge (the fabric): the role
over SSH launches its head and its headless rank, each node's address its fabric one; then an unchanged rerun.

Judged inside each node: the simulator's reading of its GPUs, the node's process table, and the head's /health asked
from the machine at the node's address.
"""

from __future__ import annotations

import yaml

from fleetlib import flat, inventory, recap, run_playbook


def test_one_engine_across_two_ssh_nodes_over_the_fabric(make_fleet, tmp_path):
    fleet = make_fleet(2)
    one, two = fleet.rec.nodes
    built = inventory.build(fleet.rec, group_vars={"vllm_restart_serial": "100%", "vllm_restart_max_fail_percentage": 0},
                            host_vars={node.name: {"vllm_server_node_address": node.fabric_ip} for node in (one, two)})
    built["all"]["children"]["glm5_a"] = {"hosts": {one.name: {}, two.name: {}}, "vars": {
        "vllm_server_nodes_group": "glm5_a", "vllm_server_tensor_parallel_size": 2, "vllm_server_pipeline_parallel_size": 2,
        "vllm_server_gpus": [0, 1]}}
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(built, default_flow_style=False, sort_keys=False))

    run = run_playbook("restart_vllm.yml", path)
    assert run.returncode == 0, run.stdout[-5000:]
    assert fleet.health(one.name) == 200  # the head serves: its other rank joined over the fabric
    servers = {}
    for node in (one, two):
        server = fleet.server_record(node.name)["pid"]
        holders = fleet.holders(node.name)
        assert all(len(holders[gpu]) == 1 and fleet.descends_from(node.name, holders[gpu][0], server) for gpu in (0, 1)), holders
        assert not any(holders[gpu] for gpu in range(2, fleet.rec.gpus)), holders
        servers[node.name] = server
    argv = fleet.processes(two.name)[servers[two.name]]
    assert "--headless" in argv and "--master-addr %s" % one.fabric_ip in argv, argv

    again = run_playbook("restart_vllm.yml", path)
    assert again.returncode == 0, again.stdout[-3000:]
    assert all(counters["changed"] == 0 for counters in recap(again.stdout).values()), flat(again.stdout)[-3000:]
    assert {node.name: fleet.server_record(node.name)["pid"] for node in (one, two)} == servers
