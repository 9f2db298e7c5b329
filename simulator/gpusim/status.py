# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`gpusim status`: what the simulated host holds, per GPU, as the fake NVML will report it."""

from __future__ import annotations

from typing import Dict, List

from gpusim import procfs
from gpusim.allocs import FLAG_FOREIGN, live_allocs
from gpusim.gpus import read_gpus
from gpusim.host import read_host
from gpusim.procs import read_records
from gpusim.statedir import StateDir


def collect_status(state: StateDir) -> Dict[str, object]:
    host = read_host(state.require())
    allocs = live_allocs(state)
    gpus: List[Dict[str, object]] = []
    for gpu in read_gpus(state):
        mine = [alloc for alloc in allocs if alloc.gpu_index == gpu.index]
        holders: List[Dict[str, object]] = []
        for alloc in mine:
            stat = None if FLAG_FOREIGN in alloc.flags else procfs.read_stat(alloc.pid)
            holders.append({
                "pid": alloc.pid,
                "title": procfs.title(alloc.pid) if stat else "(not in this PID namespace)",
                "state": stat.state if stat else "-",
                "used_mib": alloc.used_mib,
                "flags": list(alloc.flags),
            })
        used = sum(alloc.used_mib for alloc in mine) + gpu.orphan_mib
        gpus.append({
            "index": gpu.index, "uuid": gpu.uuid, "pci_bus_id": gpu.pci_bus_id, "name": gpu.name,
            "lost": gpu.lost, "total_mib": gpu.memory_total_mib, "reserved_mib": gpu.reserved_mib,
            "orphan_mib": gpu.orphan_mib, "used_mib": used,
            "free_mib": gpu.memory_total_mib - gpu.reserved_mib - used, "holders": holders,
        })
    processes: List[Dict[str, object]] = []
    for record in read_records(state):
        stat = procfs.read_stat(record.pid)
        if stat is not None and stat.starttime == record.starttime:
            processes.append({"pid": record.pid, "role": record.role, "title": procfs.title(record.pid),
                              "state": stat.state})
    return {"state": str(state.root), "host": host, "gpus": gpus, "processes": processes}


def render_status(status: Dict[str, object]) -> str:
    host: Dict[str, str] = status["host"]  # type: ignore[assignment]
    driver = "loaded" if host["driver_loaded"] == "1" else "NOT LOADED"
    lines = [f"host {status['state']}: driver {host['driver_version']} {driver}, topology {host['topology']}"]
    for gpu in status["gpus"]:  # type: ignore[attr-defined]
        lost = "  LOST" if gpu["lost"] else ""
        orphan = f", {gpu['orphan_mib']} MiB held by no process" if gpu["orphan_mib"] else ""
        lines.append(f"GPU {gpu['index']} {gpu['pci_bus_id']}: {gpu['used_mib']:>6} / {gpu['total_mib']} MiB used"
                     f" (+{gpu['reserved_mib']} reserved){orphan}{lost}")
        for holder in gpu["holders"]:
            flags = f" [{','.join(holder['flags'])}]" if holder["flags"] else ""
            lines.append(f"    pid {holder['pid']:>8} {holder['state']} {holder['used_mib']:>6} MiB"
                         f"  {holder['title']}{flags}")
    return "\n".join(lines)
