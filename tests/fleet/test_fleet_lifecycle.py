# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet itself: namespaces per node, its own sshd, SSH with ControlPersist, exact teardown by record."""

from __future__ import annotations

import json
import subprocess
import time

from fleetlib import Fleet, ansible_env, BIN, lifecycle
from gpusim.fleet import record
from gpusim.fleet.system import alive, ip, link_exists, netns_exists, netns_pids


def ssh_sessions(fleet: Fleet, name: str) -> int:
    return sum(1 for args in fleet.processes(name).values() if args.startswith("sshd: root@notty"))


def test_nodes_are_separate_hosts_reached_over_ssh(make_fleet, tmp_path):
    fleet = make_fleet(3)
    for node in fleet.rec.nodes:
        assert netns_exists(node.netns) and link_exists(node.veth)
        init = node.init_proc()
        assert init is not None and alive(init.pid, init.starttime)
        assert init.pid in netns_pids(node.netns)
        procs = fleet.processes(node.name)
        # its own PID namespace: PID 1 is the node's init, sshd runs under it, nothing of the machine is seen
        assert "nodeinit.py" in procs[1]
        assert any(args.startswith("sshd: /usr/sbin/sshd -D -e -f %s" % node.path) for args in procs.values())
        others = [args for pid, args in procs.items() if pid != 1 and not args.startswith(("sshd", "ps "))]
        assert not others, others
        assert lifecycle.node_exec(fleet.rec, node.name, ["hostname"]).stdout.strip() == node.name
    # a process started on node 1 exists there only
    fleet.gpusim("gpu-node-01", "stuck", "--gpu", "0", "--mib", "1000")
    stuck = fleet.holders("gpu-node-01")[0]
    assert len(stuck) == 1
    assert fleet.processes("gpu-node-02").get(stuck[0], "").find("gpusim") == -1

    inventory = fleet.inventory(tmp_path / "inventory.yml")
    ping = subprocess.run([str(BIN / "ansible"), "-i", str(inventory), "gpu_nodes", "-m", "ansible.builtin.command",
                           "-a", "hostname"], env=ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    for name in fleet.names:
        assert "%s | CHANGED | rc=0 >>\n%s" % (name, name) in ping.stdout
    # ControlPersist left a master on the machine and a `sshd: root@notty` session on each node
    assert all(ssh_sessions(fleet, name) >= 1 for name in fleet.names)
    assert any(path.is_socket() for path in (fleet.rec.path / "cp").iterdir())

    every_pid = {pid for node in fleet.rec.nodes for pid in netns_pids(node.netns)}
    assert len(every_pid) >= 3 * 4  # unshare, init, sshd, session (+ the stuck holder)
    lifecycle.down(fleet.rec)
    for node in fleet.rec.nodes:
        assert not netns_exists(node.netns) and not link_exists(node.veth)
    assert not [pid for pid in every_pid if alive(pid)]
    assert not (fleet.rec.path / "fleet.json").exists()
    assert not [p for p in (fleet.rec.path / "cp").iterdir() if p.is_socket()]


def test_a_second_up_cleans_up_after_a_crashed_first(make_fleet, tmp_path):
    first = make_fleet(2, folder="fleet")
    old = json.loads((first.rec.path / "fleet.json").read_text())
    old_pids = [(p["pid"], p["starttime"]) for n in old["nodes"] for p in n["procs"]]
    fleet_number = old["fleet"]
    # a namespace and an interface that belong to someone else, with our prefix: never touched
    bystander_ns, bystander_veth = "gpuops-bystander", "gpuopsbystand0"
    ip("netns", "add", bystander_ns)
    try:
        ip("link", "add", bystander_veth, "type", "veth", "peer", "name", "eth0", "netns", bystander_ns)
        # the "crash": the first run never called down; a second up in the same folder takes over
        second = make_fleet(3, folder="fleet")
        assert not [pid for pid, start in old_pids if alive(pid, start)]
        assert second.rec.fleet == fleet_number  # its names were freed, so they are taken again
        assert [n.name for n in second.rec.nodes] == ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
        assert all(second.health(name) == -1 for name in second.names)  # fresh nodes: no server yet
        assert all(lifecycle.ssh_banner(n.node_ip).startswith("SSH-2.0") for n in second.rec.nodes)
        lifecycle.down(second.rec)
        assert netns_exists(bystander_ns) and link_exists(bystander_veth)
    finally:
        ip("netns", "delete", bystander_ns, check=False)
        ip("link", "delete", bystander_veth, check=False)


def test_a_crash_between_record_and_creation_is_cleaned_up(make_fleet, tmp_path):
    """A record that names a namespace never created, and one created but not yet started, tear down cleanly."""
    fleet = make_fleet(1)
    number = fleet.rec.fleet
    extra = record.NodeRecord(name="gpu-node-02", index=2, netns=record.node_names(number, 2)[0],
                              veth=record.node_names(number, 2)[1], host_ip="-", node_ip="-", dir=str(tmp_path / "n2"))
    never = record.NodeRecord(name="gpu-node-03", index=3, netns=record.node_names(number, 3)[0],
                              veth=record.node_names(number, 3)[1], host_ip="-", node_ip="-", dir=str(tmp_path / "n3"))
    ip("netns", "add", extra.netns)
    fleet.rec.nodes += [extra, never]
    fleet.rec.save()
    again = make_fleet(1)
    assert not netns_exists(extra.netns) and not netns_exists(never.netns)
    assert netns_exists(again.rec.nodes[0].netns)


def test_stop_sshd_makes_a_node_unreachable_and_start_brings_it_back(make_fleet, tmp_path):
    fleet = make_fleet(2)
    inventory = fleet.inventory(tmp_path / "inventory.yml")
    run = subprocess.run([str(BIN / "ansible"), "-i", str(inventory), "gpu_nodes", "-m", "ansible.builtin.ping"],
                         env=ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout
    assert ssh_sessions(fleet, "gpu-node-02") >= 1
    lifecycle.stop_sshd(fleet.rec, "gpu-node-02")
    # the ControlPersist session went with it: nothing of sshd is left on the node
    assert not any(args.startswith("sshd") for args in fleet.processes("gpu-node-02").values())
    run = subprocess.run([str(BIN / "ansible"), "-i", str(inventory), "gpu_nodes", "-m", "ansible.builtin.ping"],
                         env=ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode != 0
    assert "gpu-node-02 | UNREACHABLE!" in run.stdout and "gpu-node-01 | SUCCESS" in run.stdout, run.stdout
    lifecycle.start_sshd(fleet.rec, "gpu-node-02")
    run = subprocess.run([str(BIN / "ansible"), "-i", str(inventory), "gpu_nodes", "-m", "ansible.builtin.ping"],
                         env=ansible_env(), capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout


def test_one_server_spans_two_nodes_over_the_network_between_them(make_fleet):
    """The nodes reach each other on a bridge of the fleet's own (not through the machine): a fake vLLM head on node 1
    listens for its other rank on its fabric address, and serves its API only once node 2's headless rank joined."""
    fleet = make_fleet(2)
    one, two = fleet.rec.nodes
    assert netns_exists(fleet.rec.fabric_netns) and one.fabric_ip != two.fabric_ip
    machine = ip("-o", "addr", "show").stdout
    assert one.fabric_ip not in machine and two.fabric_ip not in machine  # the machine has no address on it
    rendezvous = ["--nnodes", "2", "--master-addr", one.fabric_ip, "--master-port", "29500", "--tensor-parallel-size", "2"]
    fleet.gpusim_json(one.name, "vllm", "--gpus", "0", "--mib", "1000", "--port", "8000", "--entrypoint", "serve", "--",
                      "--host", "0.0.0.0", "--node-rank", "0", *rendezvous)
    assert fleet.health(one.name, 8000) == -1  # the head waits for rank 1 before it listens
    fleet.gpusim_json(two.name, "vllm", "--gpus", "0", "--mib", "1000", "--entrypoint", "serve", "--",
                      "--node-rank", "1", "--headless", *rendezvous)
    deadline = time.monotonic() + 30
    while fleet.health(one.name, 8000) != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert fleet.health(one.name, 8000) == 200
    assert fleet.used(one.name)[0] == 1000 and fleet.used(two.name)[0] == 1000  # each node's own worker
    fabric = fleet.rec.fabric_netns
    lifecycle.down(fleet.rec)
    assert not netns_exists(fabric)
