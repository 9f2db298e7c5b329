# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The `gpus` file: one TAB-separated line per GPU, and how a new host's GPUs are named."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, replace
from typing import List

from gpusim.statedir import StateDir, StateError, atomic_write, content_lines

DEFAULT_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
DEFAULT_TOTAL_MIB = 97887
DEFAULT_RESERVED_MIB = 512
MAX_GPUS = 128


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    pci_bus_id: str
    memory_total_mib: int
    reserved_mib: int
    orphan_mib: int
    lost: bool
    name: str

    def line(self) -> str:
        fields = [
            str(self.index), self.uuid, self.pci_bus_id, str(self.memory_total_mib),
            str(self.reserved_mib), str(self.orphan_mib), "1" if self.lost else "0", self.name,
        ]
        return "\t".join(fields)


def parse_gpu_line(line: str) -> Gpu:
    fields = line.split("\t", 7)
    if len(fields) != 8:
        raise StateError(f"gpus: expected 8 TAB-separated fields: {line!r}")
    index, gpu_uuid, bus_id, total, reserved, orphan, lost, name = fields
    return Gpu(int(index), gpu_uuid, bus_id, int(total), int(reserved), int(orphan), lost == "1", name)


def read_gpus(state: StateDir) -> List[Gpu]:
    return [parse_gpu_line(line) for line in content_lines(state.gpus)]


def write_gpus(state: StateDir, gpus: List[Gpu]) -> None:
    header = "# index\tuuid\tpci_bus_id\tmemory_total_mib\treserved_mib\torphan_mib\tlost\tname\n"
    atomic_write(state.gpus, header + "".join(gpu.line() + "\n" for gpu in gpus))


def gpu_by_index(gpus: List[Gpu], index: int) -> Gpu:
    for gpu in gpus:
        if gpu.index == index:
            return gpu
    raise StateError(f"no GPU {index} on this host (it has {len(gpus)})")


def update_gpu(state: StateDir, index: int, **changes: object) -> Gpu:
    """Rewrite one GPU's line (e.g. lost=True, orphan_mib=1024) and return the new record."""
    gpus = read_gpus(state)
    updated = replace(gpu_by_index(gpus, index), **changes)  # type: ignore[arg-type]
    write_gpus(state, [updated if gpu.index == index else gpu for gpu in gpus])
    return updated


def new_gpus(state: StateDir, count: int, total_mib: int, reserved_mib: int, name: str) -> List[Gpu]:
    """GPUs whose UUIDs and PCI bus ids derive from the state directory's path, so hosts differ.

    Bus numbers ascend with the index, as NVML orders devices by PCI bus id.
    """
    if not 1 <= count <= MAX_GPUS:
        raise StateError(f"--gpus must be between 1 and {MAX_GPUS}, not {count}")
    seed = str(state.root)
    digest = hashlib.sha256(seed.encode()).digest()
    first_bus = 0x10 + digest[0] % 0x20
    step = max(1, min(0x1F, (0xFF - first_bus) // count))
    return [
        Gpu(
            index=index,
            uuid="GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpusim:{seed}:{index}")),
            pci_bus_id=f"00000000:{first_bus + index * step:02X}:00.0",
            memory_total_mib=total_mib,
            reserved_mib=reserved_mib,
            orphan_mib=0,
            lost=False,
            name=name,
        )
        for index in range(count)
    ]
