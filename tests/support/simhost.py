# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one simulated GPU host of the test suites and the benches: gpusim's own API (gpusim.api.Host), its command line
(`gpusim`), the host's name in an inventory and its server's loopback port, the whole environment of a process
started on the host, and what the real nvidia-ml-py reads there.

Every host is a gpusim state directory; its processes are recorded by gpusim and cleaned up by recorded PID only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
from pathlib import Path

from gpusim.api import SIM_BIN_DIR, SIM_LIB_DIR, Host, free_port, simulator_environ

SIM_LIB = SIM_LIB_DIR

__all__ = ["SIM_LIB", "SimHost", "hosts_with_ports", "free_port"]

# Run in a fresh interpreter with the host's environment (the fake library first on LD_LIBRARY_PATH): the REAL
# nvidia-ml-py reads every GPU's memory and compute processes and prints them as one JSON object.
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


class SimHost(Host):
    """One simulated GPU host: gpusim's own API (gpusim.api.Host: spawn_vllm, status, used_mib, cleanup, ...),
    its command line (`gpusim`), and the host's name in an inventory.

    ``env`` is the host's tree_env: more environment for every tree it starts and every `gpusim` command it runs.
    """

    def __init__(self, name: str, state: Path, env: t.Optional[t.Mapping[str, str]] = None) -> None:
        super().__init__(state, env)
        self.name = name
        self.port = 0  # its server's loopback port, when the test gives it one (hosts_with_ports, the fleet fixture)

    def process_env(self) -> t.Dict[str, str]:
        """The whole environment of a process started on this host: this process's, with the fake NVML first on
        LD_LIBRARY_PATH, the fake nvidia-smi first on PATH, GPUOPS_SIM_STATE, simulator/ first on PYTHONPATH, and
        the host's tree_env."""
        env = simulator_environ()
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(SIM_LIB_DIR), env.get("LD_LIBRARY_PATH")]))
        env["PATH"] = os.pathsep.join([str(SIM_BIN_DIR), env.get("PATH", "")])
        env["GPUOPS_SIM_STATE"] = str(self.state)
        env.update(self.tree_env)
        return env

    def nvml(self) -> t.Dict[str, t.Any]:
        """What the real nvidia-ml-py reads on this host: {"gpus": [...]} (memory in MiB and processes of each GPU,
        or its error), or {"init_error": code}."""
        result = subprocess.run([sys.executable, "-c", NVML_PROBE], env=self.process_env(), text=True,
                                capture_output=True, timeout=30, check=True)
        probe: t.Dict[str, t.Any] = json.loads(result.stdout)
        return probe

    def nvml_gpus(self) -> t.List[t.Dict[str, t.Any]]:
        gpus: t.List[t.Dict[str, t.Any]] = self.nvml()["gpus"]
        return gpus


def hosts_with_ports(make_host: t.Callable[..., SimHost], *names: str) -> t.List[SimHost]:
    """Simulated hosts, each with a free loopback port for its server (host.port)."""
    made = []
    for name in names:
        host = make_host(name)
        host.port = free_port()
        made.append(host)
    return made
