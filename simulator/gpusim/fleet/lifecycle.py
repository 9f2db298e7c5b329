# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bring a fleet up and down, exactly, by its record; stop and start one node's sshd; run a command on a node.

Up: a leftover record in the folder is torn down first; then, for each node, the record is written BEFORE the
namespace, interface or process it names is created. Down: the controller's ControlPersist masters are asked
to exit, each node's PID 1 (the recorded machine PID, start time checked) is killed, which ends every process of
its PID namespace (the `sshd: root@notty` sessions ControlPersist leaves included), then whatever `ip netns pids`
still lists; only then are the namespaces and interfaces of the record deleted.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
import typing as t
from pathlib import Path

from gpusim.fleet import nodefiles
from gpusim.fleet.record import (
    FABRIC_FIRST_OCTETS, MAX_NODES, NETNS_PREFIX, SUBNET_FIRST_OCTETS, FleetRecord, NodeRecord, ProcEntry, fabric_address,
    fabric_names, load, node_addresses, node_names,
)
from gpusim.fleet.system import (
    FleetError, address_in_use, alive, ip, kill_and_wait, link_exists, netns_exists, netns_pids, signal_recorded,
    starttime,
)
from gpusim.procfs import children

SIMULATOR = Path(__file__).resolve().parents[2]
REPO = SIMULATOR.parent
NODEINIT = Path(__file__).resolve().parent / "nodeinit.py"
# the Popen objects of the node processes this Python process started, so that `down` reaps them
_STARTED: t.Dict[int, subprocess.Popen] = {}


def node_name(index: int) -> str:
    return "gpu-node-%02d" % index


def _claim_fleet_number(first_node: int) -> int:
    """The first fleet number whose names and subnet are free; claimed by creating node 1's namespace."""
    taken = {line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line.strip()}
    for number in range(256):
        if any(name.startswith("%s%d-" % (NETNS_PREFIX, number)) for name in taken):
            continue
        if address_in_use("%s.%d." % (SUBNET_FIRST_OCTETS, number)) or address_in_use("%s.%d." % (FABRIC_FIRST_OCTETS, number)):
            continue
        netns, _veth = node_names(number, first_node)
        if ip("netns", "add", netns, check=False).returncode == 0:
            return number
    raise FleetError("no free fleet number: 256 fleets of gpuops namespaces exist")


def _create_network(node: NodeRecord, created_netns: bool) -> None:
    if not created_netns:
        ip("netns", "add", node.netns)
    ip("link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns)
    ip("addr", "add", node.host_ip + "/30", "dev", node.veth)
    ip("link", "set", node.veth, "up")
    ip("-n", node.netns, "addr", "add", node.node_ip + "/30", "dev", "eth0")
    ip("-n", node.netns, "link", "set", "eth0", "up")
    ip("-n", node.netns, "link", "set", "lo", "up")


def _create_fabric(rec: FleetRecord) -> None:
    """The network between the nodes: a bridge in a namespace of the fleet's own (nothing of the machine's network
    changes, no forwarding is turned on)."""
    netns, bridge = fabric_names(rec.fleet)
    rec.fabric_netns = netns
    rec.save()
    ip("netns", "add", netns)
    ip("-n", netns, "link", "add", bridge, "type", "bridge")
    ip("-n", netns, "link", "set", bridge, "up")


def _join_fabric(rec: FleetRecord, node: NodeRecord) -> None:
    """The node's eth1, on the fabric's bridge, at its fabric address."""
    _netns, bridge = fabric_names(rec.fleet)
    port = "n%d" % node.index
    ip("-n", node.netns, "link", "add", "eth1", "type", "veth", "peer", "name", port, "netns", rec.fabric_netns)
    ip("-n", rec.fabric_netns, "link", "set", port, "master", bridge, "up")
    ip("-n", node.netns, "addr", "add", node.fabric_ip + "/24", "dev", "eth1")
    ip("-n", node.netns, "link", "set", "eth1", "up")


def _start_node(rec: FleetRecord, node: NodeRecord, config: Path) -> None:
    argv = ["ip", "netns", "exec", node.netns, "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--uts",
            rec.python, str(NODEINIT), str(config)]
    with open(node.path / "init.log", "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    _STARTED[proc.pid] = proc
    outer_start = starttime(proc.pid)
    node.procs.append(ProcEntry(pid=proc.pid, starttime=outer_start or 0, what="unshare"))
    rec.save()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        kids = children(proc.pid)
        # `ip netns exec` execs unshare, which forks PID 1 of the node: the only child of the recorded PID
        if kids and starttime(kids[0]) is not None and proc.poll() is None:
            node.procs.append(ProcEntry(pid=kids[0], starttime=starttime(kids[0]) or 0, what="init"))
            rec.save()
            return
        if proc.poll() is not None:
            break
        time.sleep(0.02)
    raise FleetError("node %s did not start (see %s)" % (node.name, node.path / "init.log"))


def ssh_banner(address: str, timeout: float = 2.0) -> str:
    """The first line sshd sends on <address>:22, or '' when nothing answers."""
    try:
        with socket.create_connection((address, 22), timeout=timeout) as conn:
            conn.settimeout(timeout)
            return conn.recv(256).decode(errors="replace").strip()
    except OSError:
        return ""


def wait_sshd(node: NodeRecord, up: bool, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ssh_banner(node.node_ip).startswith("SSH-2.0") == up:
            return
        time.sleep(0.05)
    raise FleetError("sshd of %s is %s after %.0f s (see %s)" % (
        node.name, "not answering" if up else "still answering", timeout, node.path / "sshd.log"))


def _gpusim(rec: FleetRecord, *args: str) -> None:
    env = {"PYTHONPATH": str(SIMULATOR), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    proc = subprocess.run([rec.python, "-m", "gpusim", *args], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    if proc.returncode != 0:
        raise FleetError("gpusim %s: %s" % (" ".join(args), proc.stderr.strip() or proc.stdout.strip()))


def up(directory: Path, nodes: int, gpus: int = 8, python: t.Optional[str] = None) -> FleetRecord:
    """Start a fleet of <nodes> nodes in <directory> (a leftover fleet recorded there is torn down first)."""
    if not 1 <= nodes <= MAX_NODES:
        raise FleetError("--nodes must be 1-%d" % MAX_NODES)
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    leftover = load(directory)
    if leftover is not None:
        down(leftover)
    shutil.rmtree(directory / "nodes", ignore_errors=True)
    shutil.rmtree(directory / "cp", ignore_errors=True)
    (directory / "cp").mkdir(mode=0o700)
    keys = directory / "keys"
    keys.mkdir(exist_ok=True)
    nodefiles.keygen(keys / "client", "gpuops fleet controller")
    public_key = (keys / "client.pub").read_text()
    python = python or sys.executable
    number = _claim_fleet_number(1)
    rec = FleetRecord(dir=str(directory), fleet=number, python=python, repo=str(REPO), gpus=gpus)
    try:
        for index in range(1, nodes + 1):
            netns, veth = node_names(number, index)
            host_ip, node_ip = node_addresses(number, index)
            node = NodeRecord(name=node_name(index), index=index, netns=netns, veth=veth, host_ip=host_ip,
                              node_ip=node_ip, dir=str(directory / "nodes" / node_name(index)),
                              fabric_ip=fabric_address(number, index))
            rec.nodes.append(node)
            rec.save()
            node.path.mkdir(parents=True)
            _create_network(node, created_netns=index == 1)
            if index == 1:
                _create_fabric(rec)
            _join_fabric(rec, node)
            _gpusim(rec, "create", "--state", str(node.gpu_state), "--gpus", str(gpus))
            _start_node(rec, node, nodefiles.prepare(node, public_key, python, reach=[directory, REPO]))
        for node in rec.nodes:
            wait_sshd(node, up=True)
    except BaseException:
        down(rec)
        raise
    return rec


def _exit_control_masters(rec: FleetRecord) -> None:
    """Ask each ControlPersist master of this fleet's control folder to exit (by its socket, never by name)."""
    control = rec.path / "cp"
    if not control.is_dir():
        return
    for sock in sorted(control.iterdir()):
        if sock.is_socket():
            subprocess.run(["ssh", "-o", "ControlPath=%s" % sock, "-O", "exit", "fleet-node"],
                           capture_output=True, timeout=10, check=False)


def down(rec: FleetRecord) -> t.List[str]:
    """End every process of the fleet and delete its namespaces and interfaces, by record. Raises when any is left."""
    _exit_control_masters(rec)
    inits = [(p.pid, p.starttime) for n in rec.nodes for p in n.procs if p.what == "init"]
    problems = ["PID %d (init) survived SIGKILL" % pid for pid in kill_and_wait(inits)]
    others: t.List[t.Tuple[int, int]] = [(p.pid, p.starttime) for n in rec.nodes for p in n.procs if p.what != "init"]
    for node in rec.nodes:
        for pid in netns_pids(node.netns):
            start = starttime(pid)
            if start is not None:
                others.append((pid, start))
    problems += ["PID %d survived SIGKILL" % pid for pid in kill_and_wait(others)]
    for pid, _start in inits + others:
        proc = _STARTED.pop(pid, None)
        if proc is not None:
            proc.wait(timeout=10)
    for node in rec.nodes:
        left = [pid for pid in netns_pids(node.netns) if alive(pid)]
        if left:
            problems.append("%s: processes %s are still in %s" % (node.name, left, node.netns))
            continue
        if netns_exists(node.netns):
            proc = ip("netns", "delete", node.netns, check=False)
            if proc.returncode != 0:
                problems.append("ip netns delete %s: %s" % (node.netns, proc.stderr.strip()))
        if link_exists(node.veth):
            ip("link", "delete", node.veth, check=False)
        if link_exists(node.veth) or netns_exists(node.netns):
            problems.append("%s: %s or %s is left" % (node.name, node.netns, node.veth))
    if rec.fabric_netns and netns_exists(rec.fabric_netns):
        # its ports went with the nodes' namespaces (each the peer of a node's eth1); nothing else runs in it
        proc = ip("netns", "delete", rec.fabric_netns, check=False)
        if proc.returncode != 0 or netns_exists(rec.fabric_netns):
            problems.append("ip netns delete %s: %s" % (rec.fabric_netns, proc.stderr.strip()))
    if problems:
        raise FleetError("fleet %s: teardown incomplete: %s" % (rec.dir, "; ".join(problems)))
    (rec.path / "fleet.json").unlink()
    return [node.name for node in rec.nodes]


def stop_sshd(rec: FleetRecord, name: str) -> None:
    """Make a node unreachable: its init ends sshd and every session under it; wait until port 22 refuses."""
    node = rec.node(name)
    init = node.init_proc()
    if init is None or not signal_recorded(init.pid, init.starttime, signal.SIGUSR1):
        raise FleetError("node %s is not running" % node.name)
    wait_sshd(node, up=False)


def start_sshd(rec: FleetRecord, name: str) -> None:
    node = rec.node(name)
    init = node.init_proc()
    if init is None or not signal_recorded(init.pid, init.starttime, signal.SIGUSR2):
        raise FleetError("node %s is not running" % node.name)
    wait_sshd(node, up=True)


def node_exec(rec: FleetRecord, name: str, argv: t.Sequence[str], env: t.Optional[t.Dict[str, str]] = None,
              timeout: float = 120) -> subprocess.CompletedProcess:
    """Run <argv> inside the node (its PID, mount, UTS and network namespaces), as its own processes see it."""
    node = rec.node(name)
    init = node.init_proc()
    if init is None or not alive(init.pid, init.starttime):
        raise FleetError("node %s is not running" % node.name)
    command = ["nsenter", "--target", str(init.pid), "--pid", "--mount", "--uts", "--net", "--", *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def gpusim_on(rec: FleetRecord, name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`gpusim ARGS --state <node's GPU state>` run inside the node, so the PIDs it records are the node's own."""
    node = rec.node(name)
    command, rest = args[0], args[1:]
    env = {"PYTHONPATH": str(SIMULATOR), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    return node_exec(rec, name, [rec.python, "-m", "gpusim", command, "--state", str(node.gpu_state), *rest],
                     env=env, timeout=timeout)


def status(rec: FleetRecord) -> t.List[t.Dict[str, t.Any]]:
    rows = []
    for node in rec.nodes:
        init = node.init_proc()
        rows.append({
            "name": node.name, "address": node.node_ip, "fabric_address": node.fabric_ip, "netns": node.netns,
            "veth": node.veth,
            "init_pid": init.pid if init else None,
            "running": bool(init and alive(init.pid, init.starttime)),
            "sshd": ssh_banner(node.node_ip, timeout=1.0),
            "processes": len(netns_pids(node.netns)),
        })
    return rows
