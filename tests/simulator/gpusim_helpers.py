# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Helpers for the gpusim tests: a simulated host driven by its command line, /proc readers, an NVML probe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[2]
SIMULATOR = REPO / "simulator"
LIB_DIR = SIMULATOR / "build" / "lib"
GRACE_S = 0.5  # vLLM's 5 s shutdown grace, shortened so the suite stays fast

# Runs in a subprocess with the fake library first on LD_LIBRARY_PATH: the REAL nvidia-ml-py.
NVML_PROBE = r"""
import json
import pynvml as nvml

def mib(value):
    return None if value is None else value // (1024 * 1024)

try:
    nvml.nvmlInit()
except nvml.NVMLError as error:
    print(json.dumps({"init_error": error.value}))
    raise SystemExit(0)
gpus = []
for index in range(nvml.nvmlDeviceGetCount()):
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    try:
        v2 = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        v1 = nvml.nvmlDeviceGetMemoryInfo(handle)
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        gpus.append({
            "index": index, "uuid": nvml.nvmlDeviceGetUUID(handle), "name": nvml.nvmlDeviceGetName(handle),
            "total_mib": mib(v2.total), "used_mib": mib(v2.used), "reserved_mib": mib(v2.reserved),
            "v1_used_mib": mib(v1.used),
            "processes": [{"pid": p.pid, "used_mib": mib(p.usedGpuMemory)} for p in procs],
        })
    except nvml.NVMLError as error:
        gpus.append({"index": index, "error": error.value})
nvml.nvmlShutdown()
print(json.dumps({"gpus": gpus}))
"""


def read_proc(pid: int, name: str) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/{name}", "rb") as handle:
            return handle.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return None


def cmdline(pid: int) -> List[str]:
    raw = read_proc(pid, "cmdline") or ""
    return [word for word in raw.split("\0") if word]


def stat_fields(pid: int) -> Optional[List[str]]:
    """Fields 3.. of /proc/<pid>/stat (state, ppid, ...), None when the PID is gone."""
    raw = read_proc(pid, "stat")
    return raw.rpartition(")")[2].split() if raw else None


def proc_state(pid: int) -> Optional[str]:
    fields = stat_fields(pid)
    return fields[0] if fields else None


def ppid(pid: int) -> int:
    fields = stat_fields(pid)
    assert fields is not None, f"PID {pid} is gone"
    return int(fields[1])


def is_running(pid: int) -> bool:
    return proc_state(pid) not in (None, "Z", "X")


def wait_for(condition: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class SimHost:
    """One simulated host in a test's tmp_path, driven through the real command line."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.env = dict(os.environ)
        self.env.update({
            "PYTHONPATH": str(SIMULATOR),
            "GPUOPS_SIM_STATE": str(state),
            "GPUOPS_SIM_SHUTDOWN_GRACE_S": str(GRACE_S),
            "LD_LIBRARY_PATH": str(LIB_DIR),
        })

    def gpusim(self, *args: str, check: bool = True) -> "subprocess.CompletedProcess[str]":
        result = subprocess.run([sys.executable, "-m", "gpusim", *args], env=self.env, text=True,
                                capture_output=True, timeout=60, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"gpusim {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")
        return result

    def gpusim_json(self, *args: str) -> Any:
        return json.loads(self.gpusim(*args).stdout)

    def nvml(self) -> Dict[str, Any]:
        result = subprocess.run([sys.executable, "-c", NVML_PROBE], env=self.env, text=True,
                                capture_output=True, timeout=30, check=True)
        probe: Dict[str, Any] = json.loads(result.stdout)
        return probe

    def nvml_gpus(self) -> List[Dict[str, Any]]:
        gpus: List[Dict[str, Any]] = self.nvml()["gpus"]
        return gpus

    def records(self) -> List[Tuple[int, int, str]]:
        found = []
        for path in (self.state / "procs").iterdir():
            if ".tmp." not in path.name:
                pid, start, role = path.read_text().split()
                found.append((int(pid), int(start), role))
        return found

    def kill(self, pid: int, sig: int = signal.SIGKILL) -> None:
        """Signal a process this test's simulator started (refuses any other PID)."""
        fields = stat_fields(pid)
        recorded = {rec_pid: start for rec_pid, start, _role in self.records()}
        assert fields is not None and recorded.get(pid) == int(fields[19]), f"PID {pid} is not ours"
        os.kill(pid, sig)
