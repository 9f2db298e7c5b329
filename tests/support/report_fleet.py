# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Generated fleet facts for the report's size test and bench (no ansible, no simulator), and a headless browser.

synthetic_results(hosts, gpus, holders): (host, registered gpu_report_facts result) pairs shaped like the module's
output, every GPU held by `holders` processes of a role-managed server. chromium(): Debian's chromium, headless.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import typing as t
from pathlib import Path

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--disable-extensions", "--disable-dev-shm-usage")


def synthetic_results(hosts: int = 64, gpus: int = 8, holders: int = 4) -> t.List[t.Tuple[str, t.Dict[str, t.Any]]]:
    results = []
    for h in range(hosts):
        server_pid = 100000 + h * 100
        facts_gpus, owners = [], []
        for g in range(gpus):
            procs = []
            for k in range(holders):
                pid = server_pid + 1 + g * holders + k
                procs.append({"pid": pid, "name": "VLLM::Worker_TP%d" % g, "cmdline": ["VLLM::Worker_TP%d" % g], "username": "vllm",
                              "state": "sleeping", "ppid": server_pid, "create_time": 1764470000.0, "used_memory_mib": 20000 + k,
                              "type": "compute", "visible": True, "unverified": False})
                owners.append({"pid": pid, "kind": "server", "server": "vllm-8000", "launcher_pid": server_pid,
                               "launcher": "python3 -m vllm.entrypoints.openai.api_server --model zai-org/GLM-5-GGUF --tensor-parallel-size 8",
                               "why": "the owner, PID %d, or one of its descendants" % server_pid})
            facts_gpus.append({
                "index": g, "uuid": "GPU-%08x-0000-4000-8000-%012x" % (h, g), "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                "pci_bus_id": "00000000:%02X:00.0" % (0x1B + g), "memory_total_mib": 97887, "memory_used_mib": 80006 + 4 * 0,
                "memory_reserved_mib": 512, "memory_free_mib": 17369, "utilization_gpu_pct": 97, "utilization_memory_pct": 45,
                "temperature_c": 62, "power_draw_w": 310.0, "power_limit_w": 600.0, "persistence_mode": True, "mig_mode": False,
                "ecc_mode": True, "ecc_uncorrected_volatile": 0,
                "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
                "retired_pages": None, "clocks_event_reasons": [], "performance_state": "P0", "processes": procs, "error": None,
            })
        results.append(("gpu-node-%02d" % (h + 1), {
            "changed": False,
            "ansible_facts": {"gpus": facts_gpus, "gpu_driver": {"driver_version": "580.95.05", "cuda_driver_version": "13.0",
                                                                 "nvml_version": "13.580.95.05", "count": gpus, "source": "nvml"}},
            "owners": owners,
            "servers": [{"name": "vllm-8000", "pid": server_pid, "create_time": 1764470000.0, "running": True, "model": "zai-org/GLM-5-GGUF",
                         "port": 8000, "gpus": list(range(gpus)), "config_hash": "ab" * 32, "launched_at": 1764470000.0,
                         "argv": ["vllm", "serve", "zai-org/GLM-5-GGUF"], "health": "HTTP 200", "healthy": True, "error": None, "unit": None}],
        }))
    return results


def chromium_binary() -> t.Optional[str]:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(page: Path, *args: str, timeout: int = 120) -> t.Tuple[subprocess.CompletedProcess, float]:
    """Run headless chromium on a file:// page with a new, empty profile; (completed process, wall seconds)."""
    binary = chromium_binary()
    if binary is None:
        raise AssertionError("chromium is not installed: `make integration` installs Debian's chromium")
    with tempfile.TemporaryDirectory(prefix="gpuops-chromium-") as profile:
        argv = [binary, *CHROMIUM_FLAGS, "--user-data-dir=%s" % profile, *args, page.resolve().as_uri()]
        start = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                              start_new_session=True)
        return proc, time.monotonic() - start
