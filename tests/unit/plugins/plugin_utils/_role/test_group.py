# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A host's place in a server across hosts (vllm_server_nodes_group), and the plan each node gets from it."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.group import Members, place
from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.plan import PlanError, build

SERVER = {"vllm_server_model": "zai-org/GLM-5", "vllm_server_nodes_group": "glm5_a", "vllm_server_tensor_parallel_size": 8,
          "vllm_server_pipeline_parallel_size": 2, "vllm_server_nodes_port": 29501}
ADDRESSES = {"n1": "10.0.0.1", "n2": "10.0.0.2"}


def members(variables, hosts=("n1", "n2"), change=None, groups=None):
    """Every host of glm5_a with this run's variables, its own ansible_host, and ``change`` per host."""
    seen = {host: dict(variables, ansible_host=ADDRESSES.get(host), **(change or {}).get(host, {})) for host in hosts}
    return Members(dict({"glm5_a": list(hosts), "all": list(hosts)}, **(groups or {})), seen)


def test_one_engine_across_two_hosts_each_rank_its_flags_and_the_heads_api(variables):
    given = variables(**SERVER)
    head = build(given, host="n1", members=members(given))
    rank = build(given, host="n2", members=members(given))
    assert head["argv"][head["argv"].index("--port") + 2:] == ["--pipeline-parallel-size", "2", "--nnodes", "2", "--node-rank", "0",
                                                               "--master-addr", "10.0.0.1", "--master-port", "29501"]
    assert rank["argv"][rank["argv"].index("--node-rank") + 1] == "1" and rank["argv"][-1] == "--headless"
    # each host runs 8 x 2 / 2 = 8 workers on GPUs 0-7, with its own address as VLLM_HOST_IP
    assert head["gpus"] == rank["gpus"] == list(range(8)) and head["local_workers"] == 8
    assert head["env"]["VLLM_HOST_IP"] == "10.0.0.1" and rank["env"]["VLLM_HOST_IP"] == "10.0.0.2"
    # the head is read on its own host; the headless rank waits on the head's API, serves none (no listener on the
    # port is its server), and stops once the head stopped, with nothing to drain
    assert head["url"] == "http://127.0.0.1:8000" and rank["url"] == "http://10.0.0.1:8000"
    assert head["status"]["listener"]["across"] == {"group": "glm5_a", "size": 2, "head": None, "port": None}
    assert rank["status"]["listener"]["across"] == {"group": "glm5_a", "size": 2, "head": "10.0.0.1", "port": 29501}
    assert (head["stop_after"], rank["stop_after"]) == ("", "http://10.0.0.1:8000/health") and head["drain"] and not rank["drain"]
    # kept as good only once every host is ready; the lock is kept until then too
    assert head["whole"] and not head["mark_good"] and head["mark_good_whole"] and not head["release_in_ready"]
    assert head["config_hash"] != rank["config_hash"]


def test_data_parallel_across_hosts(variables):
    given = variables(**dict(SERVER, vllm_server_pipeline_parallel_size=1, vllm_server_data_parallel_size=4, vllm_server_tensor_parallel_size=2))
    rank = build(given, host="n2", members=members(given))
    tail = rank["argv"][rank["argv"].index("--port") + 2:]
    assert tail == ["--data-parallel-size", "4", "--data-parallel-size-local", "2", "--data-parallel-address", "10.0.0.1",
                    "--data-parallel-rpc-port", "29501", "--headless", "--data-parallel-start-rank", "2"]
    assert rank["gpus"] == [0, 1, 2, 3] and rank["local_workers"] == 4  # 2 replicas of TP 2


def test_a_server_of_one_host_is_as_it_was(variables):
    plan = build(variables(vllm_server_model="m", vllm_server_tensor_parallel_size=2))
    assert plan["group"] is None and not plan["whole"] and plan["mark_good"] and plan["release_in_ready"] and plan["stop_after"] == ""
    assert "--nnodes" not in plan["argv"] and "VLLM_HOST_IP" not in plan["env"] and plan["status"]["listener"]["port"] == 8000
    assert "across" not in plan["status"]["listener"]


@pytest.mark.parametrize("change, needle", [
    ({"vllm_server_tensor_parallel_size": 1, "vllm_server_pipeline_parallel_size": 3},
     "vllm_server_tensor_parallel_size=1 x vllm_server_pipeline_parallel_size=3 (3 workers) does not split over the 2 hosts"),
    ({"vllm_server_data_parallel_size": 2}, "not both"),
    ({"vllm_server_pipeline_parallel_size": 1, "vllm_server_data_parallel_size": 3}, "vllm_server_data_parallel_size=3 does not split over the 2 hosts"),
    ({"vllm_server_pipeline_parallel_size": 0}, "vllm_server_pipeline_parallel_size=0 must be a whole number, at least 1"),
    ({"vllm_server_nodes_group": "nope"}, 'vllm_server_nodes_group="nope" names no inventory group with hosts'),
    ({"vllm_server_nodes_port": 0}, "vllm_server_nodes_port=0 must be 1-65535"),
    ({"vllm_server_gpus": [0, 1]}, "this host's share of the server of vllm_server_nodes_group=\"glm5_a\" is 8 worker(s)"),
    ({"vllm_server_args": ["--nnodes", "2"]}, "vllm_server_args: --nnodes 2 are the role's own flags"),
])
def test_each_bad_group_variable_is_named_with_its_value(variables, change, needle):
    given = variables(**dict(SERVER, **change))
    with pytest.raises(PlanError) as raised:
        build(given, host="n1", members=members(given))
    assert needle in str(raised.value)


@pytest.mark.parametrize("change, needle", [
    ({"n2": {"vllm_server_port": 8001}}, "vllm_server_port differs between the hosts of server group glm5_a (n1=8000, n2=8001)"),
    ({"n2": {"vllm_server_args": ["--hf-token", "s3cret"]}},
     "vllm_server_args differs between the hosts of server group glm5_a (n2 against n1; the values are not shown)"),
    ({"n2": {"vllm_server_nodes_group": "glm5_b"}}, 'n2 is a host of server group glm5_a but its vllm_server_nodes_group is "glm5_b"'),
    ({"n2": {"vllm_server_node_address": "a b"}}, 'vllm_server_node_address="a b" (n2) must be a host name or an address'),
])
def test_what_differs_between_the_hosts_is_named(variables, change, needle):
    given = variables(**SERVER)
    with pytest.raises(PlanError) as raised:
        build(given, host="n1", members=members(given, change=change))
    assert needle in str(raised.value) and "s3cret" not in str(raised.value)


def test_a_host_in_two_server_groups_and_a_host_outside_its_group(variables):
    given = variables(**SERVER)
    # n1 is also in glm5_b, whose other host n3 serves in glm5_b
    both = members(given, hosts=("n1", "n2", "n3"), change={"n3": {"vllm_server_nodes_group": "glm5_b"}}, groups={"glm5_b": ["n1", "n3"]})
    both = Members(dict(both.groups, glm5_a=["n1", "n2"]), both.variables)
    node, problems = place("n1", given, both)
    assert node is None and problems == ["n1 is a host of two server groups, glm5_a and glm5_b: a host serves in one server group"]
    node, problems = place("n9", given, members(given))
    assert node is None and "this host (n9) is not one of its hosts (n1, n2)" in problems[0]


def test_pipeline_parallel_needs_a_group_of_two_hosts(variables):
    with pytest.raises(PlanError) as raised:
        build(variables(vllm_server_model="m", vllm_server_tensor_parallel_size=2, vllm_server_pipeline_parallel_size=2))
    assert "vllm_server_nodes_group is unset: name the inventory group of the server's hosts" in str(raised.value)
