# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet's record (`fleet.json`): every namespace, interface and process, written before it is created."""

from __future__ import annotations

import json
import os
import typing as t
from dataclasses import asdict, dataclass, field
from pathlib import Path

RECORD_NAME = "fleet.json"
# names of everything the fleet creates start with these, so nothing else is ever touched
NETNS_PREFIX = "gpuops-f"
VETH_PREFIX = "gpuops"
SUBNET_FIRST_OCTETS = "10.213"
# the network between the nodes (one server across hosts: its ranks meet there): a bridge in a namespace of the fleet's
# own, each node's eth1 on it at 10.214.<fleet>.<index>/24
FABRIC_FIRST_OCTETS = "10.214"
MAX_NODES = 63


@dataclass
class ProcEntry:
    """A process as seen from the machine's own PID namespace, with its start time (clock ticks since boot)."""

    pid: int
    starttime: int
    what: str


@dataclass
class NodeRecord:
    name: str
    index: int
    netns: str
    veth: str
    host_ip: str
    node_ip: str
    dir: str
    procs: t.List[ProcEntry] = field(default_factory=list)
    fabric_ip: str = ""  # the node's address on the network between the nodes (eth1)

    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def gpu_state(self) -> Path:
        return self.path / "gpu"

    def init_proc(self) -> t.Optional[ProcEntry]:
        return next((p for p in self.procs if p.what == "init"), None)


@dataclass
class FleetRecord:
    dir: str
    fleet: int
    python: str
    repo: str
    gpus: int = 8
    nodes: t.List[NodeRecord] = field(default_factory=list)
    fabric_netns: str = ""  # the namespace that holds the bridge between the nodes

    @property
    def path(self) -> Path:
        return Path(self.dir)

    def node(self, name: str) -> NodeRecord:
        for node in self.nodes:
            if node.name == name or str(node.index) == name:
                return node
        raise KeyError("no node %r in the fleet of %s" % (name, self.dir))

    def save(self) -> None:
        """Atomically: write a temporary file, then rename it over the record."""
        target = self.path / RECORD_NAME
        temp = target.with_name("%s.tmp.%d" % (RECORD_NAME, os.getpid()))
        temp.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        os.replace(temp, target)


def load(directory: Path) -> t.Optional[FleetRecord]:
    path = Path(directory) / RECORD_NAME
    if not path.exists():
        return None
    raw = json.loads(path.read_text(encoding="utf-8"))
    nodes = [NodeRecord(**dict(n, procs=[ProcEntry(**p) for p in n["procs"]])) for n in raw.pop("nodes")]
    return FleetRecord(nodes=nodes, **raw)


def node_names(fleet: int, index: int) -> t.Tuple[str, str]:
    """(network namespace, machine-side veth) of node <index> of fleet <fleet>; veth names fit IFNAMSIZ (15)."""
    return "%s%d-n%d" % (NETNS_PREFIX, fleet, index), "%s%dv%d" % (VETH_PREFIX, fleet, index)


def node_addresses(fleet: int, index: int) -> t.Tuple[str, str]:
    """(machine side, node side) of the node's /30: 10.213.<fleet>.<4 x index + 1 / + 2>."""
    base = 4 * index
    return ("%s.%d.%d" % (SUBNET_FIRST_OCTETS, fleet, base + 1), "%s.%d.%d" % (SUBNET_FIRST_OCTETS, fleet, base + 2))


def fabric_names(fleet: int) -> t.Tuple[str, str]:
    """(the fabric's namespace, its bridge) of fleet <fleet>."""
    return "%s%d-fabric" % (NETNS_PREFIX, fleet), "br0"


def fabric_address(fleet: int, index: int) -> str:
    """Node <index>'s address on the network between the nodes: 10.214.<fleet>.<index> (a /24)."""
    return "%s.%d.%d" % (FABRIC_FIRST_OCTETS, fleet, index)
