# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_reclaim's time above the floor, against a careful shell script, on simulated hosts.

Scenarios, each on 8 GPUs:

- "incident" and "full tree": the incident's server (an API server with 8 workers at 93,029 MiB,
  `gpusim vllm --tp 8`), after the incident's broken cleanup (the server and worker 0 SIGKILLed, 7 workers
  adopted by the simulator's reaper) or as found;
- "8 x 16", "8 x 512", "8 x 4096": that many `sleep` holders (see _light_holders.py), spread evenly over the
  GPUs, each the bench's own child; the bench is an ancestor of the module's process, which the module never
  signals, so nothing in these shapes can respawn a holder.

For each, on one host per approach, one after the other:

- floor: the bench itself SIGTERMs every process at once and polls /proc until the last one has exited:
  the slowest holder's own exit, the least any approach can take;
- gpu_reclaim through its module_utils in a fresh interpreter (`run_reclaim`, as the module runs it), with
  the module's default `settle`, and with a fixed `settle` window (`--settle`, 0.5 s: a baseline measured in
  the same run);
- the shell baseline (SHELL below): signal every PID nvidia-smi lists, then poll nvidia-smi until the memory
  is back (SIGKILL what is left after the grace), as a careful operator would write it.

The figure of each approach is the median over repetitions of (its elapsed time - that repetition's floor).
Every approach's "verified" comes from the same independent reading after it finished: the simulator's own
status (memory used and holders per GPU) and the liveness of every process involved.
Targets (the module's default settle, above the floor): at most 0.2 s at 8 x 16 and 0.5 s at 8 x 512;
8 x 4096 is reported with its growth against 8 x 512.

Run from the repository root: .venv/bin/python bench/run.py bench_gpu_reclaim
Exits non-zero only when something fails (including a run that does not free the GPUs), never for slowness:
PASS/FAIL against the targets is printed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from _benchlib import BenchError, bench_host, ensure_simulator, median, run_probe, save_results, table
from _light_holders import LightHolders
from gpusim.api import pid_alive
from simhost import SimHost

INCIDENT_MIB = 93029
TREES = ("incident", "full tree")
SHAPES = {"8 x 16": 2, "8 x 512": 64, "8 x 4096": 512}  # holders per GPU, on 8 GPUs
LIGHT_MIB = 100
# the module's default settle, above the floor (seconds); 8 x 4096 has no target, its growth against 8 x 512 is printed
TARGETS = {"8 x 16": 0.2, "8 x 512": 0.5}
DEFAULT = "gpu_reclaim, default settle"
SHELL = r"""
smi() { nvidia-smi "$@" --format=csv,noheader,nounits; }
held() {  # true while any GPU lists a process or uses more than the threshold
    [ -n "$(smi --query-compute-apps=pid)" ] && return 0
    smi --query-gpu=memory.used | awk -v t="$THRESHOLD" '$1 > t { busy = 1 } END { exit !busy }'
}
pids=$(smi --query-compute-apps=pid | sort -u)
[ -n "$pids" ] && kill -TERM $pids
deadline=$((SECONDS + GRACE))
while held && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
if held; then
    left=$(smi --query-compute-apps=pid | sort -u)
    [ -n "$left" ] && kill -KILL $left
    deadline=$((SECONDS + GRACE))
    while held && [ $SECONDS -lt $deadline ]; do sleep 0.05; done
fi
held && { echo "GPUs still held" >&2; exit 1; }
exit 0
"""
THRESHOLD_MIB = 1024  # gpu_reclaim's default idle_threshold_mib; v1 memory.used counts the 512 MiB reservation


def prepare(host: SimHost, scenario: str) -> List[int]:
    """An 8-GPU host with the incident's server; the PIDs of its tree that are still running."""
    host.gpusim("create", "--gpus", "8")
    tree = host.spawn_vllm(8, mib=INCIDENT_MIB)
    if scenario == "incident":
        host.incident()
    return [pid for pid in [tree["parent"], *tree["workers"]] if pid_alive(pid)]


def independent(host: SimHost, tree: List[int]) -> Dict[str, Any]:
    """The simulator's own reading and /proc, after an approach finished."""
    used = host.used_mib()
    left = [pid for pid in tree if pid_alive(pid)]  # e.g. an API server still shutting down after its workers died
    return {"used_mib_after": used, "tree_left": left, "verified": not host.holders() and max(used) == 0}


def floor_run(host: SimHost, tree: List[int]) -> Dict[str, Any]:
    """SIGTERM every process of the tree at once; elapsed until the last one has exited (polled every ms)."""
    start = time.perf_counter()
    for pid in tree:
        os.kill(pid, signal.SIGTERM)
    pending = set(tree)
    while pending:
        pending = {pid for pid in pending if pid_alive(pid)}
        if pending:
            if time.perf_counter() - start > 30:
                raise BenchError(f"floor: {sorted(pending)} did not exit on SIGTERM within 30 s")
            time.sleep(0.001)
    return {"wall_s": time.perf_counter() - start}


def module_run(host: SimHost, settle: Optional[float], grace: float, timeout: float) -> Dict[str, Any]:
    """gpu_reclaim in a fresh interpreter; ``settle`` None: the module's default."""
    extra = [] if settle is None else ["--settle", str(settle)]
    result: Dict[str, Any] = run_probe(host, "_reclaim_probe.py", "--grace", str(grace), "--timeout", str(timeout), *extra)
    return result


def shell_run(host: SimHost, grace: float) -> Dict[str, Any]:
    env = dict(host.process_env(), THRESHOLD=str(THRESHOLD_MIB), GRACE=str(int(max(1, grace))))
    start = time.perf_counter()
    done = subprocess.run(["bash", "-c", SHELL], env=env, capture_output=True, text=True, timeout=4 * grace + 60,
                          check=False)
    wall_s = time.perf_counter() - start
    return {"wall_s": wall_s, "exit_status": done.returncode, "stderr": done.stderr.strip()}


def approaches(args: argparse.Namespace) -> Dict[str, Callable[[SimHost, List[int]], Dict[str, Any]]]:
    return {
        "floor": floor_run,
        DEFAULT: lambda host, _tree: module_run(host, None, args.grace, args.timeout),
        f"gpu_reclaim, settle {args.settle:g}": lambda host, _tree: module_run(host, args.settle, args.grace, args.timeout),
        "shell: signal + poll nvidia-smi": lambda host, _tree: shell_run(host, args.grace),
    }


def run_one(name: str, runner: Callable[[SimHost, List[int]], Dict[str, Any]], host: SimHost, tree: List[int],
            scenario: str) -> Dict[str, Any]:
    run = runner(host, tree)
    run.update(independent(host, tree))
    if not run["verified"]:
        raise BenchError(f"{scenario}: {name} left the GPUs held: {run}")
    print(f"  {name}: {run['wall_s']:.3f} s", file=sys.stderr)
    return run


def measure_trees(args: argparse.Namespace, results: Dict[str, List[Dict[str, Dict[str, Any]]]]) -> None:
    """The incident's server; the hosts of a repetition are prepared (two at a time) before its runs."""
    runners = approaches(args)
    for repetition in range(args.repeats):
        for scenario in TREES:
            with contextlib.ExitStack() as stack:
                hosts = {name: stack.enter_context(bench_host()) for name in runners}
                print(f"bench_gpu_reclaim: {scenario}, repetition {repetition + 1}: preparing {len(hosts)} hosts",
                      file=sys.stderr)
                with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
                    futures = {name: pool.submit(prepare, host, scenario) for name, host in hosts.items()}
                    trees = {name: future.result() for name, future in futures.items()}
                results[scenario].append({name: run_one(name, runner, hosts[name], trees[name], scenario)
                                          for name, runner in runners.items()})


def measure_shapes(args: argparse.Namespace, results: Dict[str, List[Dict[str, Dict[str, Any]]]]) -> None:
    """`sleep` holders; one host at a time (8 x 4096 is 4,096 processes per host)."""
    runners = approaches(args)
    for scenario, per_gpu in SHAPES.items():
        if scenario not in args.shapes:
            continue
        repeats = args.large_repeats if per_gpu * 8 > 1000 else args.repeats
        for repetition in range(repeats):
            print(f"bench_gpu_reclaim: {scenario}, repetition {repetition + 1} of {repeats}", file=sys.stderr)
            runs: Dict[str, Dict[str, Any]] = {}
            for name, runner in runners.items():
                with bench_host() as host, LightHolders(host.state) as light:
                    host.gpusim("create", "--gpus", "8")
                    light.add(8, per_gpu, LIGHT_MIB)
                    runs[name] = run_one(name, runner, host, light.pids, scenario)
            results[scenario].append(runs)


def measure(args: argparse.Namespace) -> Dict[str, List[Dict[str, Dict[str, Any]]]]:
    """results[scenario][repetition][approach]."""
    results: Dict[str, List[Dict[str, Dict[str, Any]]]] = {scenario: [] for scenario in [*TREES, *SHAPES]
                                                           if scenario in TREES and args.trees or scenario in args.shapes}
    if args.trees:
        measure_trees(args, results)
    measure_shapes(args, results)
    return results


def verdicts(figures: Dict[str, Any]) -> List[str]:
    """PASS/FAIL of the module's default against the targets; the growth from 8 x 512 to 8 x 4096."""
    lines = []
    for scenario, target in TARGETS.items():
        figure = figures.get(f"{scenario} / {DEFAULT}")
        if figure is not None:
            over = figure["above_floor_s"]
            lines.append(f"{'PASS' if over <= target else 'FAIL'}: {scenario}, {DEFAULT}: {over:.3f} s above the floor"
                         f" (target at most {target:g} s)")
    small, large = figures.get(f"8 x 512 / {DEFAULT}"), figures.get(f"8 x 4096 / {DEFAULT}")
    if large is not None:
        growth = f", {large['above_floor_s'] / small['above_floor_s']:.1f}x the 8 x 512 figure for 8x the holders" if (
            small is not None and small["above_floor_s"] > 0) else ""
        lines.append(f"8 x 4096, {DEFAULT}: {large['above_floor_s']:.3f} s above the floor, {large['elapsed_s']:.3f} s elapsed"
                     f"{growth} (5.3 s before the one-scan plan)")
    return lines


def report(results: Dict[str, List[Dict[str, Dict[str, Any]]]], args: argparse.Namespace) -> Tuple[str, Dict[str, Any]]:
    rows = []
    figures: Dict[str, Any] = {}
    for scenario, repetitions in results.items():
        if not repetitions:
            continue
        names = list(repetitions[0])
        above = {name: [rep[name]["wall_s"] - rep["floor"]["wall_s"] for rep in repetitions] for name in names}
        shell_name, fixed_name = names[-1], names[2]
        for name in names:
            over = median(above[name])
            ratio = "-" if name in ("floor", shell_name) else f"{median(above[shell_name]) / over:.2f}" if over > 0 else "-"
            fixed = f"{median(above[fixed_name]) / over:.2f}" if name == DEFAULT and over > 0 else "-"
            verified = all(rep[name]["verified"] for rep in repetitions)
            left = max(len(rep[name]["tree_left"]) for rep in repetitions)
            rows.append([scenario, name, len(repetitions), median([rep[name]["wall_s"] for rep in repetitions]),
                         "-" if name == "floor" else over, "yes" if verified else "NO", left, ratio, fixed])
            figures[f"{scenario} / {name}"] = {"elapsed_s": median([rep[name]["wall_s"] for rep in repetitions]),
                                               "above_floor_s": over}
    load = os.getloadavg()[0]
    text = "\n".join([
        table(["scenario", "approach", "runs", "elapsed s", "above floor s", "verified", "left", "shell/this",
               "fixed/default"], rows),
        "elapsed: median wall time. above floor: median over repetitions of (elapsed - the same repetition's floor).",
        "floor: the bench SIGTERMs every process itself and waits for the last exit (each holder's own exit).",
        "verified: the simulator's reading right after the run: no holder, 0 MiB used. left: processes of the tree"
        " still running at that moment (most in any repetition; the shell never ends an API server, it exits later).",
        f"grace {args.grace:g}, timeout {args.timeout:g}; the fixed settle column waits {args.settle:g} s for a second"
        " reading, inside its elapsed time.",
        "shell/this: the shell's time above the floor over this approach's. fixed/default: the fixed window's over the"
        " default's (same run).",
        f"load average (1 min) {load:.2f} on {os.cpu_count()} CPUs.",
        *verdicts(figures),
    ])
    return text, figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="repetitions per scenario (each: floor, module x2, shell)")
    parser.add_argument("--large-repeats", type=int, default=1, help="repetitions of 8 x 4096 (4,096 processes per host)")
    parser.add_argument("--grace", type=float, default=10)
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--settle", type=float, default=0.5, help="gpu_reclaim's fixed settle window in the second module column")
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES), help="the sleep-holder shapes to run")
    parser.add_argument("--no-trees", dest="trees", action="store_false", help="skip the incident's server (incident, full tree)")
    args = parser.parse_args()
    try:
        ensure_simulator()
        results = measure(args)
    except BenchError as exc:
        print(f"bench_gpu_reclaim: error: {exc}", file=sys.stderr)
        return 1
    text, figures = report(results, args)
    print(text)
    saved = save_results("gpu_reclaim", {"results": results, "figures": figures, "report": text,
                                         "load_1min": os.getloadavg()[0], "date": time.strftime("%Y-%m-%d %H:%M %Z")})
    if saved:
        print(f"results: {saved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
