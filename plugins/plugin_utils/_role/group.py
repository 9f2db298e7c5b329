# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""One vLLM server across several hosts: a host's place in its server group, from the inventory, on the controller.

A server group is an inventory group named by ``vllm_server_nodes_group`` on each of its hosts; its hosts, in the
inventory's order, are the server's nodes: the first one (rank 0) is the head, which serves the API; the others run
headless. vLLM runs such a server in one of two shapes, and the group's variables choose it:

- one engine across hosts (``vllm_server_pipeline_parallel_size`` x ``vllm_server_tensor_parallel_size`` workers, the
  same share on each node): ``--nnodes N --node-rank R --master-addr HEAD --master-port P``, ``--headless`` from rank 1;
- data parallel across hosts (``vllm_server_data_parallel_size`` replicas of ``vllm_server_tensor_parallel_size``
  workers, the same number on each node): ``--data-parallel-size D --data-parallel-size-local d
  --data-parallel-address HEAD --data-parallel-rpc-port P``, ``--headless --data-parallel-start-rank R x d`` from rank 1.

``place`` checks what only the whole group can show (a host in two server groups, a size that does not split over the
hosts, a variable that differs between the nodes) and returns the node's flags, its environment (``VLLM_HOST_IP``) and
the URL of the head's API, which every node waits on: the head serves only once every rank joined.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.gpuops.fleet.plugins.plugin_utils._role.values import text, to_int, to_json

GROUP = "vllm_server_nodes_group"
PIPELINE = "vllm_server_pipeline_parallel_size"
DATA = "vllm_server_data_parallel_size"
NODES_PORT = "vllm_server_nodes_port"
ADDRESS = "vllm_server_node_address"
# the group's variables the plan reads, beside the role's own (plan.VARIABLES)
VARIABLES = (GROUP, PIPELINE, DATA, NODES_PORT, ADDRESS)
# what every node of a group must agree on: the engine is one, and so is its API's port and name
SAME = ("vllm_server_model", "vllm_server_served_model_name", "vllm_server_tensor_parallel_size", PIPELINE, DATA, NODES_PORT,
        "vllm_server_port", "vllm_server_name", "vllm_server_launch_mode", "vllm_server_command", "vllm_server_args",
        "vllm_server_api_key")
# shown by the hosts that differ only: they may hold a secret
UNSHOWN = ("vllm_server_command", "vllm_server_args", "vllm_server_api_key")
HOST = re.compile(r"^[A-Za-z0-9_.:\[\]-]+$")
ONE_HOST = "one"
NODES = "nodes"
DATA_PARALLEL = "data-parallel"


class Members(t.NamedTuple):
    """What the plan reads of the inventory: every group's hosts, and each host's variables (the role's defaults under
    those the inventory sets for it), each host's ``ansible_host`` among them."""

    groups: t.Mapping[str, t.Sequence[str]]
    variables: t.Mapping[str, t.Mapping[str, t.Any]]


def _size(variables: t.Mapping[str, t.Any], name: str) -> int:
    value = variables.get(name)
    return 1 if value is None or text(value).strip() == "" else to_int(value, -1)


def address_of(host: str, variables: t.Mapping[str, t.Any]) -> str:
    """Where the other nodes reach ``host``: vllm_server_node_address, else its ansible_host, else its name."""
    return text(variables.get(ADDRESS)) or text(variables.get("ansible_host")) or host


def local_workers(variables: t.Mapping[str, t.Any], nodes: int) -> int:
    """The workers (one GPU each) of one node of a server over ``nodes`` hosts."""
    tensor, pipeline, data = (max(_size(variables, name), 1) for name in ("vllm_server_tensor_parallel_size", PIPELINE, DATA))
    return max(tensor * pipeline * data // max(nodes, 1), 1)


def _sizes(variables: t.Mapping[str, t.Any], group: str, nodes: int) -> t.List[str]:
    """The sizes against the number of hosts."""
    problems = []
    pipeline, data = _size(variables, PIPELINE), _size(variables, DATA)
    tensor = to_int(variables.get("vllm_server_tensor_parallel_size"))
    for name, value in ((PIPELINE, pipeline), (DATA, data)):
        if value < 1:
            problems.append("%s=%s must be a whole number, at least 1" % (name, to_json(variables.get(name))))
    if problems:
        return problems
    if nodes < 2 and (pipeline > 1 or data > 1):
        where = "vllm_server_nodes_group=%s holds one host" % group if group else "vllm_server_nodes_group is unset"
        return ["%s=%d and %s=%d serve across hosts, but %s: name the inventory group of the server's hosts"
                % (PIPELINE, pipeline, DATA, data, where)]
    if pipeline > 1 and data > 1:
        return ["%s=%d with %s=%d: serve across hosts either as one engine (pipeline x tensor parallel) or as data-parallel"
                " replicas, not both" % (PIPELINE, pipeline, DATA, data)]
    if data > 1 and data % nodes:
        return ["%s=%d does not split over the %d hosts of vllm_server_nodes_group=%s: each host runs the same number of"
                " replicas" % (DATA, data, nodes, group)]
    if data == 1 and nodes > 1 and (tensor * pipeline) % nodes:
        return ["vllm_server_tensor_parallel_size=%d x %s=%d (%d workers) does not split over the %d hosts of"
                " vllm_server_nodes_group=%s: each host runs the same number of workers"
                % (tensor, PIPELINE, pipeline, tensor * pipeline, nodes, group)]
    return []


def _membership(host: str, group: str, members: Members) -> t.List[str]:
    hosts = list(members.groups.get(group) or [])
    if not hosts:
        return ["vllm_server_nodes_group=%s names no inventory group with hosts" % to_json(group)]
    if host not in hosts:
        return ["vllm_server_nodes_group=%s: this host (%s) is not one of its hosts (%s)" % (group, host, ", ".join(hosts))]
    problems = []
    for other in hosts:
        theirs = text(members.variables.get(other, {}).get(GROUP))
        if theirs != group:
            problems.append("%s is a host of server group %s but its vllm_server_nodes_group is %s: a host serves in one"
                            " server group" % (other, group, to_json(theirs or None)))
    for name, listed in sorted(members.groups.items()):
        if name in (group, "all", "ungrouped") or host not in listed:
            continue
        if any(text(members.variables.get(other, {}).get(GROUP)) == name for other in listed if other != host):
            problems.append("%s is a host of two server groups, %s and %s: a host serves in one server group"
                            % (host, group, name))
    return problems


def _agreement(group: str, hosts: t.Sequence[str], members: Members) -> t.List[str]:
    problems = []
    for name in SAME:
        values = [(other, members.variables.get(other, {}).get(name)) for other in hosts]
        if all(value == values[0][1] for _other, value in values):
            continue
        if name in UNSHOWN:
            odd = [other for other, value in values if value != values[0][1]]
            problems.append("%s differs between the hosts of server group %s (%s against %s; the values are not shown)"
                            % (name, group, ", ".join(odd), values[0][0]))
        else:
            problems.append("%s differs between the hosts of server group %s (%s): one server has one value"
                            % (name, group, ", ".join("%s=%s" % (other, to_json(value)) for other, value in values)))
    return problems


def _flags(variables: t.Mapping[str, t.Any], shape: str, nodes: int, rank: int, head: str) -> t.List[str]:
    port = text(to_int(variables.get(NODES_PORT)))
    if shape == NODES:
        flags = ["--nnodes", str(nodes), "--node-rank", str(rank), "--master-addr", head, "--master-port", port]
        pipeline = _size(variables, PIPELINE)
        flags = (["--pipeline-parallel-size", str(pipeline)] if pipeline > 1 else []) + flags
        return flags + (["--headless"] if rank else [])
    data = _size(variables, DATA)
    local = data // nodes
    flags = ["--data-parallel-size", str(data), "--data-parallel-size-local", str(local), "--data-parallel-address", head,
             "--data-parallel-rpc-port", port]
    return flags + (["--headless", "--data-parallel-start-rank", str(rank * local)] if rank else [])


def place(host: str, variables: t.Mapping[str, t.Any], members: Members) -> t.Tuple[t.Optional[t.Dict[str, t.Any]], t.List[str]]:
    """This host's place in its server group (None without one) and the problems that refuse the run."""
    group = text(variables.get(GROUP)).strip()
    if not group:
        return None, _sizes(variables, "", 1)
    problems = _membership(host, group, members)
    if problems:
        return None, problems
    hosts = list(members.groups[group])
    problems = _agreement(group, hosts, members) + _sizes(variables, group, len(hosts))
    addresses = [address_of(other, members.variables.get(other, {})) for other in hosts]
    problems += ["%s=%s (%s) must be a host name or an address" % (ADDRESS, to_json(address), other)
                 for other, address in zip(hosts, addresses) if not HOST.match(address)]
    port = to_int(variables.get(NODES_PORT))
    if len(hosts) > 1 and not 1 <= port <= 65535:
        problems.append("%s=%s must be 1-65535" % (NODES_PORT, to_json(variables.get(NODES_PORT))))
    if problems:
        return None, problems
    rank = hosts.index(host)
    shape = ONE_HOST if len(hosts) == 1 else (DATA_PARALLEL if _size(variables, DATA) > 1 else NODES)
    head = addresses[0]
    return {
        "name": group,
        "nodes": hosts,
        "addresses": addresses,
        "size": len(hosts),
        "rank": rank,
        "head": hosts[0],
        "headless": rank > 0,
        "shape": shape,
        "flags": [] if shape == ONE_HOST else _flags(variables, shape, len(hosts), rank, head),
        "env": {} if shape == ONE_HOST else {"VLLM_HOST_IP": addresses[rank]},
        "local_workers": local_workers(variables, len(hosts)),
        # every node waits on the head's API; the head on itself as any server (vllm_server_health_host)
        "api_host": head if rank else text(variables.get("vllm_server_health_host")),
    }, []
