# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_reclaim on holders this check started, and the memory back at its idle baseline (nvidia-smi's reading).

    check_reclaim.py baseline --work DIR [--workers 8] [--mib 3072] [--direct]
        picks the GPUs that no process uses, records their idle memory.used, writes DIR/baseline.json and
        DIR/baseline.env (WORKER_GPUS, WORKER_MIB for cuda_holders.py); exit 3 when every GPU is in use
    check_reclaim.py run --work DIR --holders DIR [--tolerance-mib 256] [--direct]
        refuses (exit 3) unless every process on those GPUs is one cuda_holders.py started, runs gpu_reclaim
        (grace 10, timeout 60), then checks what it ended and the memory; exit 0 ok, 1 failed, 2 cannot check
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from cuda_holders import read_records
from gpucheck_common import CheckError, Modules, save, smi_memory_used, table

RECLAIM_ARGS = {"grace": 10, "timeout": 60, "match": ["^VLLM::Worker_TP"]}
SETTLE_S = 5.0  # how long nvidia-smi may lag behind the module's own NVML verification


def _facts(modules: Modules) -> List[Dict[str, Any]]:
    result = modules.run("gpu_facts", {})
    if result.get("failed"):
        raise CheckError(f"gpu_facts failed: {result.get('msg')}")
    gpus: List[Dict[str, Any]] = result["ansible_facts"]["gpus"]
    return gpus


def baseline(work: Path, workers: int, mib: int, modules: Modules) -> int:
    gpus = _facts(modules)
    free = [g for g in gpus if not g["error"] and not g["processes"]]
    for gpu in gpus:
        if gpu not in free:
            users = ", ".join(f"pid {p['pid']} ({p['name']})" for p in gpu["processes"] or [])
            print(f"GPU {gpu['index']}: not used for the reclaim check: {gpu['error'] or 'in use by ' + users}")
    if not free:
        print("check_reclaim: every GPU is in use by processes this check did not start: it will not run gpu_reclaim there")
        return 3
    chosen = [g["index"] for g in free]
    worker_gpus = [chosen[i % len(chosen)] for i in range(workers)]
    per_gpu = max(worker_gpus.count(g) for g in chosen)
    # half of the free memory at most, so that CUDA contexts and other work still fit
    size = max(256, min(mib, min(int(g["memory_free_mib"]) for g in free) // 2 // per_gpu))
    used = smi_memory_used()
    data = {"gpus": chosen, "worker_gpus": worker_gpus, "mib": size, "memory_used_mib": {str(g): used[g] for g in chosen}}
    save(work, "baseline.json", data)
    (work / "baseline.env").write_text(f"WORKER_GPUS={','.join(map(str, worker_gpus))}\nWORKER_MIB={size}\n", encoding="utf-8")
    for index in chosen:
        print(f"baseline: GPU {index}: {used[index]} MiB used (nvidia-smi), {worker_gpus.count(index)} worker(s) x {size} MiB to come")
    return 0


def run(work: Path, holders: Path, tolerance: int, modules: Modules) -> int:
    base = json.loads((work / "baseline.json").read_text(encoding="utf-8"))
    gpus: List[int] = base["gpus"]
    records = read_records(holders)
    ours = {r["pid"] for r in records}
    workers = [r for r in records if r["role"] == "worker"]
    holding = workers[0]["mode"] != "none" if workers else False
    strangers = [(g["index"], p["pid"], p["name"]) for g in _facts(modules) if g["index"] in gpus
                 for p in g["processes"] or [] if p["pid"] not in ours]
    if strangers:
        print(f"check_reclaim: not running gpu_reclaim: GPUs {gpus} are also used by processes this check did not start: {strangers}")
        return 3
    problems: List[str] = []
    before = smi_memory_used()
    if holding:
        for index in gpus:
            expected = sum(w["mib"] for w in workers if w["gpu"] == index)
            if before[index] - base["memory_used_mib"][str(index)] < 0.9 * expected:
                problems.append(f"GPU {index}: the holders should hold {expected} MiB; nvidia-smi shows {before[index]} MiB used")
    result = modules.run("gpu_reclaim", dict(RECLAIM_ARGS, gpus=[str(g) for g in gpus]))
    save(work, "reclaim-result.json", result)
    killed = {k["pid"] for k in result.get("killed", [])}
    if killed - ours:
        problems.append(f"gpu_reclaim ended processes this check did not start: {sorted(killed - ours)}")
    if holding and not {w["pid"] for w in workers} <= killed:
        problems.append(f"workers not ended by gpu_reclaim: {sorted({w['pid'] for w in workers} - killed)}")
    if result.get("failed") or (holding and not result.get("verified")):
        problems.append(f"gpu_reclaim failed: {result.get('msg')}")
    after, waited = _settled(gpus, base, tolerance, holding)
    print(summary(result, base, before, after, waited, holding, tolerance))
    for index in gpus:
        if holding and after[index] > base["memory_used_mib"][str(index)] + tolerance:
            problems.append(f"GPU {index}: {after[index]} MiB used after gpu_reclaim, idle baseline {base['memory_used_mib'][str(index)]} MiB")
    if not holding:
        print("memory check skipped: the holders allocated nothing (--no-cuda), so there was nothing to reclaim")
    for problem in problems:
        print(f"FAILED: {problem}")
    return 1 if problems else 0


def _settled(gpus: List[int], base: Dict[str, Any], tolerance: int, holding: bool) -> Any:
    """nvidia-smi's memory.used, polled for up to SETTLE_S until every GPU is back at its baseline; and the wait."""
    start = time.monotonic()
    while True:
        after = smi_memory_used()
        back = all(after[g] <= base["memory_used_mib"][str(g)] + tolerance for g in gpus)
        if back or not holding or time.monotonic() - start > SETTLE_S:
            return after, time.monotonic() - start
        time.sleep(0.1)


def summary(result: Dict[str, Any], base: Dict[str, Any], before: Dict[int, int], after: Dict[int, int], waited: float,
            holding: bool, tolerance: int) -> str:
    lines = [f"gpu_reclaim: verified={result.get('verified')} changed={result.get('changed')} elapsed_s={result.get('elapsed_s')}",
             f"msg: {result.get('msg')}"]
    killed = result.get("killed", [])
    if killed:
        lines.append(table(["pid", "name", "role", "signal", "seconds_to_exit"],
                           [[k["pid"], k["name"], k["role"], k["signal"], k["seconds_to_exit"]] for k in killed]))
    by_index = {g["index"]: g for g in result.get("gpus", [])}
    rows = []
    for index, gpu in sorted((int(i), by_index.get(int(i), {})) for i in base["memory_used_mib"]):
        idle = base["memory_used_mib"][str(index)]
        rows.append([index, idle, before[index], gpu.get("memory_used_mib_before"), gpu.get("memory_used_mib_after"), after[index],
                     ("back at baseline" if after[index] <= idle + tolerance else "STILL HELD") if holding else "not checked"])
    lines.append(table(["GPU", "idle MiB (smi)", "held MiB (smi)", "before MiB (module)", "after MiB (module)", "after MiB (smi)",
                        f"within {tolerance} MiB"], rows))
    lines.append(f"nvidia-smi agreed {waited:.2f} s after gpu_reclaim returned")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("baseline", "run"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--work", type=Path, required=True)
        cmd.add_argument("--direct", action="store_true", help="call module_utils even when ansible-core is importable")
    sub.choices["baseline"].add_argument("--workers", type=int, default=8)
    sub.choices["baseline"].add_argument("--mib", type=int, default=3072, help="MiB per worker at most")
    sub.choices["run"].add_argument("--holders", type=Path, required=True)
    sub.choices["run"].add_argument("--tolerance-mib", type=int, default=256)
    args = parser.parse_args()
    try:
        modules = Modules(args.work, args.direct)
        print(f"modules run via {modules.how}")
        if args.command == "baseline":
            return baseline(args.work, args.workers, args.mib, modules)
        return run(args.work, args.holders, args.tolerance_mib, modules)
    except CheckError as exc:
        print(f"check_reclaim: cannot check: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
