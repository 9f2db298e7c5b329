# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_reclaim's cost above the floor, against the usual shell approach, on the incident's simulated host.

The floor is the slowest holder's own exit time: the longest seconds_to_exit among the processes the module
ended. Each run gets a fresh, identical host: an API server with 8 workers at 93,029 MiB (`gpusim vllm
--tp 8`), as found ("full tree") or after the incident's broken cleanup (`gpusim incident`: the server and
worker 0 SIGKILLed, 7 workers reparented). The shell approach is what the incident's runbook did, done right:

    kill -TERM $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); sleep 5
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits

Run from the repository root: .venv/bin/python bench/bench_gpu_reclaim.py
Exits non-zero only when something fails (including a reclaim that does not verify), never for slowness.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

from _benchlib import BenchError, SimHost, ensure_simulator, median, save_results, table

INCIDENT_MIB = 93029
THRESHOLD_MIB = 1024  # gpu_reclaim's default memory_threshold_mib; v1 memory.used includes the 512 MiB reservation
SCENARIOS = ("incident after the broken cleanup", "full tree")
SHELL = ("kill -TERM $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); sleep {sleep};"
         " nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits")


def prepare(host: SimHost, scenario: str) -> None:
    host.gpusim("create", "--gpus", "8")
    host.vllm("--tp", "8", "--mib", str(INCIDENT_MIB))
    if scenario == SCENARIOS[0]:
        host.gpusim("incident")


def module_run(host: SimHost, grace: float, timeout: float) -> Dict[str, Any]:
    result: Dict[str, Any] = host.probe("_reclaim_probe.py", "--grace", str(grace), "--timeout", str(timeout))
    if not result["verified"] or not result["killed"]:
        raise BenchError(f"gpu_reclaim did not free the incident's GPUs: {result['msg']}")
    result["floor_s"] = max(entry["seconds_to_exit"] for entry in result["killed"])
    return result


def shell_run(host: SimHost, sleep: float) -> Dict[str, Any]:
    start = time.perf_counter()
    done = subprocess.run(["bash", "-c", SHELL.format(sleep=sleep)], env=host.env(), capture_output=True, text=True,
                          timeout=sleep + 30, check=False)
    wall_s = time.perf_counter() - start
    used = [int(line) for line in done.stdout.split()]
    if done.returncode != 0 or len(used) != 8:
        raise BenchError(f"shell approach failed ({done.returncode}): {done.stdout.strip()} {done.stderr.strip()}")
    return {"wall_s": wall_s, "used_mib_after": used, "freed": all(mib <= THRESHOLD_MIB for mib in used)}


def measure(repeats: Dict[str, int], grace: float, timeout: float, sleep: float) -> Dict[str, Dict[str, List[Dict[str, Any]]]]:
    """Every run on its own host; hosts are prepared first (in parallel), runs then go one at a time."""
    runs: List[Tuple[str, str]] = [(scenario, approach) for scenario in SCENARIOS for approach in ("module", "shell")
                                   for _run in range(repeats[approach])]
    results: Dict[str, Dict[str, List[Dict[str, Any]]]] = {s: {"module": [], "shell": []} for s in SCENARIOS}
    with contextlib.ExitStack() as stack:
        hosts = [stack.enter_context(SimHost()) for _run in runs]
        print(f"bench_gpu_reclaim: preparing {len(hosts)} simulated hosts ...", file=sys.stderr)
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            for future in [pool.submit(prepare, host, scenario) for host, (scenario, _approach) in zip(hosts, runs)]:
                future.result()
        for host, (scenario, approach) in zip(hosts, runs):
            run = module_run(host, grace, timeout) if approach == "module" else shell_run(host, sleep)
            results[scenario][approach].append(run)
            print(f"  {scenario}, {approach}: {run['wall_s']:.3f} s", file=sys.stderr)
    return results


def report(results: Dict[str, Dict[str, List[Dict[str, Any]]]], sleep: float) -> str:
    rows = []
    for scenario, by_approach in results.items():
        module, shell = by_approach["module"], by_approach["shell"]
        floor = median([run["floor_s"] for run in module])
        module_over = median([run["wall_s"] for run in module]) - floor
        shell_over = median([run["wall_s"] for run in shell]) - floor
        rows.append([scenario, "gpu_reclaim", len(module), median([run["wall_s"] for run in module]), floor, module_over,
                     f"yes ({len(module[0]['killed'])} ended)", shell_over / module_over])
        rows.append([scenario, f"kill; sleep {sleep:g}", len(shell), median([run["wall_s"] for run in shell]), floor, shell_over,
                     "no (memory " + ("freed)" if all(run["freed"] for run in shell) else "still held)"), "-"])
    return "\n".join([
        table(["scenario", "approach", "runs", "elapsed s", "floor s", "above floor s", "verified", "shell/module"],
              rows),
        "medians; floor: the slowest holder's own exit time (max seconds_to_exit in gpu_reclaim's result), the same for both;",
        "above floor: elapsed - floor; shell/module: the shell's time above the floor over gpu_reclaim's.",
        "gpu_reclaim's elapsed: open NVML, read, plan, signal (launchers first), verify by a fresh NVML reading, close.",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="gpu_reclaim runs per scenario")
    parser.add_argument("--shell-repeats", type=int, default=2, help="shell runs per scenario (each lasts --sleep)")
    parser.add_argument("--grace", type=float, default=10)
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--sleep", type=float, default=5, help="the shell approach's sleep")
    args = parser.parse_args()
    try:
        ensure_simulator()
        results = measure({"module": args.repeats, "shell": args.shell_repeats}, args.grace, args.timeout, args.sleep)
    except BenchError as exc:
        print(f"bench_gpu_reclaim: error: {exc}", file=sys.stderr)
        return 1
    text = report(results, args.sleep)
    print(text)
    saved = save_results("gpu_reclaim", {"results": results, "report": text})
    if saved:
        print(f"results: {saved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
