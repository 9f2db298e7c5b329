# -*- coding: utf-8 -*-
# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The link type between each pair of GPUs, as ``nvidia-smi topo -m`` prints it.

Package rule (_gpu): the GPUs as NVML and nvidia-smi show them. It imports the flat files of module_utils
(_deps, _argspec, _secrets), _host and its own files: never _reclaim, _bench, _server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import NvmlSession, text
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.errors import NvmlError

# nvmlGpuTopologyLevel_t -> nvidia-smi topo -m legend
_LEVELS = {
    0: "PIX",   # INTERNAL: two GPUs on one board
    10: "PIX",  # SINGLE: one PCIe switch
    20: "PXB",  # MULTIPLE: several PCIe switches, no host bridge
    30: "PHB",  # HOSTBRIDGE: through a PCIe host bridge
    40: "NODE",  # NODE: host bridges within one NUMA node
    50: "SYS",  # SYSTEM: across the SMP interconnect between NUMA nodes
}


def bus_key(bus_id: str) -> t.Tuple[int, str]:
    """Compare PCI bus ids whatever the domain width (0000:1B:00.0 == 00000000:1b:00.0)."""
    domain, dummy, rest = bus_id.strip().lower().partition(":")
    return int(domain, 16), rest


def read_topology(session: NvmlSession, bus_ids: t.Mapping[int, t.Optional[str]]) -> t.Dict[str, t.Any]:
    """Matrix of link types between the GPUs in ``bus_ids`` (index -> PCI bus id, None if unknown), in index order.

    A cell is ``X`` on the diagonal, ``NV<n>`` for n active NvLinks between the pair,
    else the PCIe level (PIX, PXB, PHB, NODE, SYS); null where NVML does not answer (e.g. a lost GPU).
    A link to an NVSwitch reaches every GPU that links to the same switch (an HGX baseboard: NV18 between
    every pair), as ``nvidia-smi topo -m`` counts it.
    """
    indices = sorted(bus_ids)
    by_bus = {bus_key(bus): index for index, bus in bus_ids.items() if bus is not None}
    nvlinks = {index: _nvlink_peers(session, index, by_bus) for index in indices}
    matrix: t.List[t.List[t.Optional[str]]] = []
    for row_pos, row in enumerate(indices):
        cells: t.List[t.Optional[str]] = []
        for col_pos, col in enumerate(indices):
            direct, switches = nvlinks[row]
            links = direct.get(col, 0) + sum(count for switch, count in switches.items() if switch in nvlinks[col][1])
            if row == col:
                cells.append("X")
            elif links:
                cells.append("NV%d" % links)
            elif col_pos < row_pos:
                cells.append(matrix[col_pos][row_pos])  # PCIe levels are symmetric
            else:
                cells.append(_pcie_level(session, row, col))
        matrix.append(cells)
    return {"gpus": indices, "matrix": matrix}


def _pcie_level(session: NvmlSession, first: int, second: int) -> t.Optional[str]:
    try:
        level = session.call("nvmlDeviceGetTopologyCommonAncestor", session.handle(first), session.handle(second))
    except NvmlError:
        return None
    return _LEVELS.get(level)


def _is_switch(session: NvmlSession, handle: t.Any, link: int) -> bool:
    """True when NVML says the link's far end is an NVSwitch (False when it is a GPU, or NVML cannot say)."""
    switch = getattr(session.lib, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    try:
        return session.call("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link) == switch
    except NvmlError:
        return False


def _nvlink_peers(session: NvmlSession, index: int, by_bus: t.Mapping[t.Tuple[int, str], int]
                  ) -> t.Tuple[t.Dict[int, int], t.Dict[t.Tuple[int, str], int]]:
    """Active NvLinks from GPU ``index``: per other GPU reached directly, and per NVSwitch (by PCI bus id).

    Both are empty without NvLink.
    """
    peers: t.Dict[int, int] = {}
    switches: t.Dict[t.Tuple[int, str], int] = {}
    for link in range(getattr(session.lib, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            handle = session.handle(index)
            if not session.call("nvmlDeviceGetNvLinkState", handle, link):
                continue
            remote = session.call("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        except NvmlError:
            break  # NOT_SUPPORTED: no NvLink; INVALID_ARGUMENT: past the last link; GPU_IS_LOST: reported in its facts
        far = bus_key(text(remote.busId))
        peer = by_bus.get(far)
        if peer is not None:
            peers[peer] = peers.get(peer, 0) + 1
        elif _is_switch(session, handle, link):
            switches[far] = switches.get(far, 0) + 1
    return peers, switches
