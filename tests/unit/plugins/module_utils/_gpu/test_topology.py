# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The topology matrix: PCIe levels, NvLink counts, a GPU that does not answer."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import open_nvml
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.topology import bus_key, read_topology
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_pynvml import device, FakeNvml


def pcie_host(count):
    """Pairs under one switch (PXB), halves under one NUMA node (NODE), else SYS; like the simulator."""
    devices = [device(i) for i in range(count)]
    for i, dev in enumerate(devices):
        for j in range(count):
            dev["level"][j] = 20 if i // 2 == j // 2 else 40 if (i < count // 2) == (j < count // 2) else 50
    return devices


def bus_ids(devices):
    return {i: dev["bus"] for i, dev in enumerate(devices)}


def test_pcie_matrix_like_nvidia_smi_topo():
    devices = pcie_host(4)
    with open_nvml(FakeNvml(devices)) as session:
        got = read_topology(session, bus_ids(devices))
    assert got == {"gpus": [0, 1, 2, 3], "matrix": [
        ["X", "PXB", "SYS", "SYS"],
        ["PXB", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "PXB"],
        ["SYS", "SYS", "PXB", "X"],
    ]}


def test_nvlink_counts_links_per_pair_and_ignores_inactive_links():
    devices = pcie_host(3)
    devices[0]["nvlinks"] = [1, 1, None, 2]  # two links to GPU 1, one inactive, one to GPU 2
    devices[1]["nvlinks"] = [0, 0]
    devices[2]["nvlinks"] = [0]
    with open_nvml(FakeNvml(devices)) as session:
        got = read_topology(session, bus_ids(devices))
    assert got["matrix"] == [["X", "NV2", "NV1"], ["NV2", "X", "NODE"], ["NV1", "NODE", "X"]]


def test_nvswitch_links_reach_every_gpu_on_the_same_switches():
    """HGX: each GPU's 18 links go to 4 NVSwitches; nvidia-smi topo -m prints NV18 for every pair."""
    devices = pcie_host(4)
    for dev in devices[:3]:
        dev["nvlinks"] = ["switch:%d" % (link % 4) for link in range(18)]
    devices[3]["nvlinks"] = ["switch:%d" % (4 + link % 2) for link in range(2)]  # another fabric: shares no switch
    with open_nvml(FakeNvml(devices)) as session:
        got = read_topology(session, bus_ids(devices))
    assert got["matrix"] == [
        ["X", "NV18", "NV18", "SYS"],
        ["NV18", "X", "NV18", "SYS"],
        ["NV18", "NV18", "X", "PXB"],
        ["SYS", "SYS", "PXB", "X"],
    ]


def test_links_split_between_switches_count_only_shared_ones():
    devices = pcie_host(2)
    devices[0]["nvlinks"] = ["switch:0", "switch:0", "switch:1", None, 1]  # 2 to switch 0, 1 to switch 1, 1 direct
    devices[1]["nvlinks"] = ["switch:0", 0]
    with open_nvml(FakeNvml(devices)) as session:
        got = read_topology(session, bus_ids(devices))
    assert got["matrix"] == [["X", "NV3"], ["NV2", "X"]]


def test_selected_subset_and_lost_gpu_give_null_cells():
    devices = pcie_host(4)
    devices[2]["lost"] = True
    with open_nvml(FakeNvml(devices)) as session:
        got = read_topology(session, {0: devices[0]["bus"], 2: None, 3: devices[3]["bus"]})
    assert got == {"gpus": [0, 2, 3], "matrix": [["X", None, "SYS"], [None, "X", None], ["SYS", None, "X"]]}


def test_bus_key_ignores_domain_width_and_case():
    assert bus_key("0000:1b:00.0") == bus_key("00000000:1B:00.0")
    assert bus_key("0001:1B:00.0") != bus_key("00000000:1B:00.0")
