# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_facts against nvidia-smi's own CSV, field by field: same GPUs, same PIDs, memory within 1%.

    check_facts.py --work DIR --label idle [--holders DIR] [--direct]

With --holders (a cuda_holders.py folder), each worker that holds memory must also be listed on its GPU by both,
and gpu_facts must name it by its title. Exit 0 when everything matches, 1 on a difference, 2 when it cannot check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

from cuda_holders import read_records
from gpucheck_common import CheckError, Modules, nvidia_smi, save, smi_mib, table, within

GPU_QUERY = ("--query-gpu=index,uuid,name,pci.bus_id,memory.total,memory.used", "--format=csv,noheader,nounits")
# gpu_uuid added to the pid,used_memory query so that each PID is compared on its own GPU
APPS_QUERY = ("--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits")

Row = List[Any]  # GPU, field, gpu_facts, nvidia-smi, ok


def compare_gpus(facts: List[Dict[str, Any]], smi_rows: List[List[str]]) -> List[Row]:
    rows: List[Row] = []
    smi = {int(r[0]): r for r in smi_rows}
    by_index = {gpu["index"]: gpu for gpu in facts}
    rows.append(["*", "GPU indices", sorted(by_index), sorted(smi), sorted(by_index) == sorted(smi)])
    for index in sorted(set(by_index) & set(smi)):
        gpu, (_index, uuid, name, bus_id, total, used) = by_index[index], smi[index]
        rows += [
            [index, "uuid", gpu["uuid"], uuid, gpu["uuid"] == uuid],
            [index, "name", gpu["name"], name, gpu["name"] == name],
            [index, "pci_bus_id", gpu["pci_bus_id"], bus_id, str(gpu["pci_bus_id"]).upper() == bus_id.upper()],
            [index, "memory_total_mib", gpu["memory_total_mib"], total, within(gpu["memory_total_mib"], smi_mib(total))],
            [index, "memory_used_mib", gpu["memory_used_mib"], used, within(gpu["memory_used_mib"], smi_mib(used))],
        ]
        if gpu["error"]:
            rows.append([index, "error", gpu["error"], "", False])
    return rows


def compare_processes(facts: List[Dict[str, Any]], app_rows: List[List[str]]) -> Tuple[List[Row], Dict[int, Dict[int, Dict[str, Any]]]]:
    """Per GPU: the compute PIDs and each one's memory; also returns GPU index -> pid -> gpu_facts' process."""
    smi: Dict[str, Dict[int, Optional[int]]] = {}
    for uuid, pid, used in app_rows:
        smi.setdefault(uuid, {})[int(pid)] = smi_mib(used)
    rows: List[Row] = []
    listed: Dict[int, Dict[int, Dict[str, Any]]] = {}
    for gpu in facts:
        procs = {p["pid"]: p for p in gpu["processes"] or []}
        listed[gpu["index"]] = procs
        compute = {pid: p for pid, p in procs.items() if "compute" in p["type"]}
        theirs = smi.get(gpu["uuid"], {})
        rows.append([gpu["index"], "compute PIDs", sorted(compute), sorted(theirs), sorted(compute) == sorted(theirs)])
        for pid in sorted(set(compute) & set(theirs)):
            mine = compute[pid]["used_memory_mib"]
            rows.append([gpu["index"], f"pid {pid} used_memory_mib", mine, theirs[pid], within(mine, theirs[pid])])
        for pid in sorted(set(procs) - set(compute)):
            rows.append([gpu["index"], f"pid {pid} (graphics: not in --query-compute-apps)", procs[pid]["name"], "", True])
    return rows, listed


def check_holders(folder: Path, listed: Dict[int, Dict[int, Dict[str, Any]]], smi_pids: Dict[int, Set[int]]) -> List[Row]:
    """Each worker holding memory is on its GPU in both lists, named by its title (15 characters with prctl)."""
    rows: List[Row] = []
    for worker in sorted((r for r in read_records(folder) if r["role"] == "worker"), key=lambda r: r["rank"]):
        if worker["mode"] == "none":
            continue
        gpu, pid = worker["gpu"], worker["pid"]
        proc = listed.get(gpu, {}).get(pid)
        expected = worker["title"] if worker["title_method"] == "setproctitle" else worker["title"][:15]
        rows.append([gpu, f"worker pid {pid} listed", proc is not None, pid in smi_pids.get(gpu, set()),
                     proc is not None and pid in smi_pids.get(gpu, set())])
        name = proc["name"] if proc else None
        rows.append([gpu, f"worker pid {pid} name", name, expected, name == expected])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--label", required=True, help="names the saved files, e.g. idle or holders")
    parser.add_argument("--holders", type=Path, help="a cuda_holders.py folder whose workers must be listed")
    parser.add_argument("--direct", action="store_true", help="call module_utils even when ansible-core is importable")
    args = parser.parse_args()
    try:
        modules = Modules(args.work, args.direct)
        result = modules.run("gpu_facts", {})
        if result.get("failed"):
            raise CheckError(f"gpu_facts failed: {result.get('msg')}")
        gpu_rows, app_rows = nvidia_smi(*GPU_QUERY), nvidia_smi(*APPS_QUERY)
    except CheckError as exc:
        print(f"check_facts: cannot check: {exc}", file=sys.stderr)
        return 2
    facts = result["ansible_facts"]["gpus"]
    uuid_index = {r[1]: int(r[0]) for r in gpu_rows}
    smi_pids: Dict[int, Set[int]] = {}
    for uuid, pid, _used in app_rows:
        smi_pids.setdefault(uuid_index.get(uuid, -1), set()).add(int(pid))
    rows = compare_gpus(facts, gpu_rows)
    process_rows, listed = compare_processes(facts, app_rows)
    rows += process_rows
    if args.holders:
        rows += check_holders(args.holders, listed, smi_pids)
    report = table(["GPU", "field", "gpu_facts", "nvidia-smi", "ok"], [r[:4] + ["ok" if r[4] else "DIFFERENT"] for r in rows])
    bad = [r for r in rows if not r[4]]
    verdict = f"gpu_facts vs nvidia-smi ({args.label}, gpu_facts via {modules.how}): " + (
        "every field matches" if not bad else f"{len(bad)} difference(s)")
    print(report)
    print(verdict)
    save(args.work, f"facts-{args.label}.json", result)
    save(args.work, f"smi-{args.label}.csv", "\n".join(", ".join(r) for r in gpu_rows + [[""]] + app_rows) + "\n")
    save(args.work, f"compare-{args.label}.txt", report + "\n" + verdict + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
