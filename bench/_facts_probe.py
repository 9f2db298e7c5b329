# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run by bench_gpu_facts.py inside the simulated host's environment: times gpu_facts' work, its floor and the
nvidia-smi pair.

gpu_facts' in-module time is what the module does between AnsibleModule's parsing and exit_json
(module_utils._gpu.facts.run_facts): check the options, open NVML, read every GPU with its processes and health (the
module's defaults), close NVML.
The floor is a bare nvidia-ml-py loop reading the same fields of the same GPUs and processes (bare_read: no
structure, no error mapping beyond skipping what the device does not support); before timing, the probe checks
that it makes the same NVML calls as gpu_facts, the same number of times.
Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Tuple

import psutil
import pynvml
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.facts import run_facts
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import describe_processes
SMI_GPUS = ["--query-gpu=index,uuid,name,memory.used,memory.total", "--format=csv,noheader"]
SMI_APPS = ["--query-compute-apps=pid,process_name,gpu_uuid,used_memory", "--format=csv,noheader"]


def _missing(name: str) -> None:
    raise SystemExit("%s is not importable" % name)


def gather() -> Dict[str, Any]:
    """gpu_facts with its defaults (every GPU, processes and health on, topology off), as the module runs it."""
    result, _warnings, failed = run_facts({}, pynvml, psutil, _missing)
    if failed:
        raise SystemExit("gpu_facts failed: %s" % result["msg"])
    facts: Dict[str, Any] = result["ansible_facts"]
    return facts


def _ask(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    try:
        return func(*args, **kwargs)
    except pynvml.NVMLError:
        return None


def bare_read() -> int:
    """The floor: every field gpu_facts reports, read with plain nvml-ml-py calls and psutil; returns the rows read."""
    nvml = pynvml
    nvml.nvmlInit()
    rows = 0
    try:
        system = (nvml.nvmlSystemGetDriverVersion(), nvml.nvmlSystemGetNVMLVersion(), nvml.nvmlSystemGetCudaDriverVersion_v2())
        del system
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            fields = (
                nvml.nvmlDeviceGetName(handle), nvml.nvmlDeviceGetUUID(handle), nvml.nvmlDeviceGetPciInfo(handle).busId,
                nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2),
                _ask(nvml.nvmlDeviceGetUtilizationRates, handle),
                _ask(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
                _ask(nvml.nvmlDeviceGetPowerUsage, handle), _ask(nvml.nvmlDeviceGetEnforcedPowerLimit, handle),
                _ask(nvml.nvmlDeviceGetPersistenceMode, handle), _ask(nvml.nvmlDeviceGetMigMode, handle),
                _ask(nvml.nvmlDeviceGetEccMode, handle),
                _ask(nvml.nvmlDeviceGetTotalEccErrors, handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
                _ask(nvml.nvmlDeviceGetRemappedRows, handle),
                _ask(nvml.nvmlDeviceGetRetiredPages, handle, nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
                _ask(nvml.nvmlDeviceGetCurrentClocksEventReasons, handle), _ask(nvml.nvmlDeviceGetPerformanceState, handle),
            )
            del fields
            procs = (list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
                     + list(nvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
                     + list(nvml.nvmlDeviceGetMPSComputeRunningProcesses(handle)))
            for entry in procs:
                try:
                    proc = psutil.Process(entry.pid)
                    with proc.oneshot():
                        described = (proc.name(), proc.cmdline(), proc.username(), proc.status(), proc.ppid(), proc.create_time())
                        del described
                except psutil.Error:
                    pass
                rows += 1
    finally:
        nvml.nvmlShutdown()
    return rows


def smi_pair(smi: str) -> List[str]:
    """Both queries, as a module shelling out to nvidia-smi would run them; the lines of the second."""
    subprocess.run([smi] + SMI_GPUS, check=True, capture_output=True)
    return subprocess.run([smi] + SMI_APPS, check=True, capture_output=True, text=True).stdout.splitlines()


def instrument_nvml() -> Tuple[Dict[str, float], Counter]:
    """Wrap pynvml's functions to add up the calls into NVML and the time spent in them (outermost calls only),
    and count the outermost calls by name.

    On the simulated host each NVML call reads the state directory; a real driver answers most in microseconds.
    """
    totals = {"calls": 0.0, "ms": 0.0}
    names: Counter = Counter()
    depth = [0]

    def wrap(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            depth[0] += 1
            start = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    totals["calls"] += 1
                    totals["ms"] += (time.perf_counter() - start) * 1000
                    names[name] += 1
        return timed

    for name, func in list(vars(pynvml).items()):
        if name.startswith("nvml") and callable(func) and not isinstance(func, type):
            setattr(pynvml, name, wrap(name, func))
    return totals, names


def nvml_share(runs: int) -> Tuple[float, List[float], List[str]]:
    """NVML calls per gather, the ms spent in them per run, and how the floor's calls differ from gpu_facts'
    (empty: the same calls, as often). Call last: pynvml stays wrapped."""
    totals, names = instrument_nvml()
    spent: List[float] = []
    for _run in range(runs):
        totals.update(calls=0.0, ms=0.0)
        gather()
        spent.append(totals["ms"])
    calls = totals["calls"]
    names.clear()
    gather()
    module_calls = Counter(names)
    names.clear()
    bare_read()
    bare_calls = Counter(names)
    differ = sorted(f"{name}: gpu_facts {module_calls[name]}, floor {bare_calls[name]}"
                    for name in set(module_calls) | set(bare_calls) if module_calls[name] != bare_calls[name])
    return calls, spent, differ


def timed_ms(func: Callable[[], object], warmup: int, runs: int, budget_s: float) -> List[float]:
    """Wall times in ms of ``runs`` calls after ``warmup`` (fewer, but at least 3, when ``budget_s`` runs out)."""
    for _run in range(warmup):
        func()
    times: List[float] = []
    stop = time.monotonic() + budget_s
    while len(times) < runs and (len(times) < 3 or time.monotonic() < stop):
        start = time.perf_counter()
        func()
        times.append((time.perf_counter() - start) * 1000)
    return times


def alternate(first: Callable[[], object], second: Callable[[], object], warmup: int, runs: int,
              budget_s: float) -> Tuple[List[float], List[float]]:
    """Wall times in ms of both, interleaved run by run (at least 3 each; fewer than ``runs`` past ``budget_s`` x 2)."""
    for _run in range(warmup):
        first()
        second()
    times: Tuple[List[float], List[float]] = ([], [])
    stop = time.monotonic() + 2 * budget_s
    while len(times[0]) < runs and (len(times[0]) < 3 or time.monotonic() < stop):
        for func, spent in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            func()
            spent.append((time.perf_counter() - start) * 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--budget-s", type=float, default=1.0, help="time budget per measured function")
    args = parser.parse_args()
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise SystemExit("nvidia-smi is not on PATH")
    facts = gather()
    errors = [gpu["error"] for gpu in facts["gpus"] if gpu["error"]]
    if errors:
        raise SystemExit("gpu_facts reported errors: %s" % errors)
    pids = sorted({proc["pid"] for gpu in facts["gpus"] for proc in gpu["processes"]})
    entries = sum(len(gpu["processes"]) for gpu in facts["gpus"])
    smi_entries = len(smi_pair(smi))
    if smi_entries != entries:
        raise SystemExit("gpu_facts lists %d (process, GPU) entries, nvidia-smi %d" % (entries, smi_entries))
    result: Dict[str, Any] = {
        "gpus": len(facts["gpus"]),
        "processes": len(pids),
        "entries": entries,
        "psutil_ms": timed_ms(lambda: describe_processes(psutil, pids), args.warmup, args.runs, args.budget_s),
        "smi_pair_ms": timed_ms(lambda: smi_pair(smi), args.warmup, args.runs, args.budget_s),
    }
    # the module and its floor alternate, run by run, so a change of load hits both alike
    result["gpu_facts_ms"], result["bare_ms"] = alternate(gather, bare_read, args.warmup, args.runs, args.budget_s)
    result["nvml_calls"], result["nvml_ms"], result["floor_differs"] = nvml_share(min(5, len(result["gpu_facts_ms"])))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
