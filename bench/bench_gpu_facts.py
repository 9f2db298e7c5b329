# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_facts' in-module time on simulated hosts, against its floor (a bare nvidia-ml-py loop reading the same fields)
and against `nvidia-smi --query-gpu` + `--query-compute-apps`.

Run from the repository root: .venv/bin/python bench/run.py bench_gpu_facts
Exits non-zero only when something fails, never because a figure is slow.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List

from _benchlib import BenchError, bench_host, ensure_simulator, median, run_probe, save_results, table
from _light_holders import LightHolders
from simhost import SimHost

TARGET_MS = 30.0
TARGET_FLOOR_RATIO = 1.5  # gpu_facts' time over the bare loop's
TARGET_SHAPE = (8, 16)  # GPUs, processes
INCIDENT_MIB = 93029
SECOND_SERVER_MIB = 4096  # fits beside the incident's 93,029 MiB on a 97,887 MiB GPU
LIGHT_MIB = 1024


def measure(host: SimHost, scenario: str, holders: str, runs: int) -> Dict[str, Any]:
    probe = run_probe(host, "_facts_probe.py", "--runs", str(runs))
    facts_ms, smi_ms = median(probe["gpu_facts_ms"]), median(probe["smi_pair_ms"])
    ratios = [facts / bare for facts, bare in zip(probe["gpu_facts_ms"], probe["bare_ms"])]
    row = {
        "scenario": scenario,
        "holders": holders,
        "gpus": probe["gpus"],
        "processes": probe["processes"],
        "gpu_facts_ms": facts_ms,
        "bare_ms": median(probe["bare_ms"]),
        "facts_over_bare": median(ratios),
        "floor_differs": probe["floor_differs"],
        "psutil_ms": median(probe["psutil_ms"]),
        "nvml_calls": int(probe["nvml_calls"]),
        "nvml_ms": median(probe["nvml_ms"]),
        "smi_pair_ms": smi_ms,
        "runs": len(probe["gpu_facts_ms"]),
        "samples": probe,
    }
    print(f"  {scenario}: gpu_facts {facts_ms:.2f} ms, bare loop {row['bare_ms']:.2f} ms, nvidia-smi pair {smi_ms:.2f} ms"
          f" ({row['runs']} runs)", file=sys.stderr)
    return row


def real_trees(runs: int) -> List[Dict[str, Any]]:
    """The incident host: fake vLLM trees (API server + VLLM::Worker_TP<i> interpreters)."""
    rows = []
    with bench_host() as host:
        host.gpusim("create", "--gpus", "8")
        host.gpusim_json("vllm", "--tp", "8", "--mib", str(INCIDENT_MIB))
        rows.append(measure(host, "incident: 1 x TP=8", "vllm", runs))
        host.gpusim_json("vllm", "--tp", "8", "--mib", str(SECOND_SERVER_MIB))
        rows.append(measure(host, "2 x TP=8 on the same GPUs", "vllm", runs))
    return rows


def light_sweep(runs: int) -> List[Dict[str, Any]]:
    """The growth: `sleep` holders (see _light_holders.py), first on the target shape to compare with real trees."""
    rows = []
    with bench_host() as host, LightHolders(host.state) as light:
        host.gpusim("create", "--gpus", "8")
        light.add(8, 2, LIGHT_MIB)
        rows.append(measure(host, "2 holders per GPU", "sleep", runs))
    with bench_host() as host, LightHolders(host.state) as light:
        host.gpusim("create", "--gpus", "64")
        for per_gpu, added in ((1, 1), (8, 7)):
            light.add(64, added, LIGHT_MIB)
            rows.append(measure(host, f"{per_gpu} holder(s) per GPU", "sleep", runs))
    return rows


def report(rows: List[Dict[str, Any]]) -> str:
    lines = [table(
        ["scenario", "holders", "GPUs", "procs", "gpu_facts ms", "bare loop ms", "facts/bare", "NVML calls", "in NVML ms",
         "in psutil ms", "nvidia-smi pair ms", "smi/facts"],
        [[r["scenario"], r["holders"], r["gpus"], r["processes"], r["gpu_facts_ms"], r["bare_ms"], r["facts_over_bare"],
          r["nvml_calls"], r["nvml_ms"], r["psutil_ms"], r["smi_pair_ms"], r["smi_pair_ms"] / r["gpu_facts_ms"]] for r in rows])]
    lines += [
        "times: medians of wall time after warm-up. gpu_facts: open NVML, read every GPU with processes and health, close.",
        "bare loop: the floor for a Python reader, plain nvidia-ml-py calls and psutil for the same fields of the same GPUs",
        "and processes (checked: the same NVML calls, as often), timed alternately with gpu_facts in the same interpreter;",
        "facts/bare: the median of the per-run ratios.",
        "in NVML: time inside the simulated libnvidia-ml, which re-reads the state directory on every call (a real driver",
        "answers most calls in microseconds); in psutil: naming the holders. smi/facts > 1: gpu_facts is faster than the pair;",
        "the fake nvidia-smi is a small C program, a real one takes longer to start.",
        "load average while measuring (1 min): %.2f on %d CPUs" % (os.getloadavg()[0], os.cpu_count() or 0),
    ]
    target = [r for r in rows if (r["gpus"], r["processes"]) == TARGET_SHAPE and r["holders"] == "vllm"]
    differ = sorted({item for r in rows for item in r["floor_differs"]})
    if differ:
        lines.append("WARNING: the bare loop's NVML calls differ from gpu_facts': " + "; ".join(differ))
    worst = max(rows, key=lambda r: r["facts_over_bare"])
    lines.append(f"floor: gpu_facts at most {worst['facts_over_bare']:.2f}x the bare loop ({worst['scenario']});"
                 f" target <= {TARGET_FLOOR_RATIO:g}x: {'PASS' if worst['facts_over_bare'] <= TARGET_FLOOR_RATIO else 'FAIL'}")
    for row in target:
        verdict = "PASS" if row["gpu_facts_ms"] < TARGET_MS else "FAIL"
        lines.append(f"target: {TARGET_SHAPE[0]} GPUs x {TARGET_SHAPE[1]} processes under {TARGET_MS:g} ms:"
                     f" {verdict} ({row['gpu_facts_ms']:.2f} ms, {row['nvml_ms']:.2f} ms of it inside the simulated NVML)")
    base, largest = target[0] if target else rows[0], max(rows, key=lambda r: (r["gpus"], r["processes"]))
    lines.append(f"growth: {base['gpus']} x {base['processes']} -> {largest['gpus']} GPUs x {largest['processes']} processes:"
                 f" {base['gpu_facts_ms']:.2f} -> {largest['gpu_facts_ms']:.2f} ms"
                 f" (x{largest['gpu_facts_ms'] / base['gpu_facts_ms']:.1f} for x{largest['processes'] / base['processes']:.0f} processes)")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="measured runs per scenario and figure (after a warm-up run; fewer, at least 3, past ~1 s)")
    args = parser.parse_args()
    try:
        ensure_simulator()
        print("bench_gpu_facts: measuring ...", file=sys.stderr)
        rows = real_trees(args.runs) + light_sweep(args.runs)
    except BenchError as exc:
        print(f"bench_gpu_facts: error: {exc}", file=sys.stderr)
        return 1
    text = report(rows)
    print(text)
    saved = save_results("gpu_facts", {"rows": rows, "report": text})
    if saved:
        print(f"results: {saved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
