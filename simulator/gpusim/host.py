# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The `host` file (driver and topology keys) and creating a simulated host."""

from __future__ import annotations

import shutil
from typing import Dict

from gpusim import procfs
from gpusim.gpus import new_gpus, write_gpus
from gpusim.statedir import StateDir, StateError, read_kv, write_kv

HOST_DEFAULTS: Dict[str, str] = {
    "driver_loaded": "1",
    "driver_version": "580.95.05",
    "nvml_version": "13.580.95.05",
    "cuda_driver_version": "13000",
    "topology": "pcie",
    "mig_supported": "0",
}
HOST_PID_NAMESPACE = "pid_namespace"  # the PID namespace whose PIDs NVML reports: the one the host was created in
TOPOLOGIES = ("pcie", "nvlink", "nvswitch")
ORPHANS = ("reaper", "init")


def create_host(  # pylint: disable=too-many-arguments
    state: StateDir, gpus: int, memory_mib: int, reserved_mib: int, name: str, topology: str, force: bool,
    orphans: str = "reaper", subreaper_title: str = "",
) -> None:
    """Write `host` and `gpus`; with force, a host already there is replaced (its records too)."""
    if topology not in TOPOLOGIES:
        raise StateError(f"--topology must be one of {', '.join(TOPOLOGIES)}, not {topology!r}")
    if orphans not in ORPHANS:
        raise StateError(f"--orphans must be one of {', '.join(ORPHANS)}, not {orphans!r}")
    if subreaper_title and orphans != "reaper":
        raise StateError("--subreaper-title needs --orphans reaper")
    if state.exists() and not force:
        raise StateError(f"{state.root} already holds a simulated host (use --force to replace it)")
    if memory_mib <= reserved_mib:
        raise StateError("--memory-mib must be larger than --reserved-mib")
    if force:
        for leftover in (state.allocs, state.procs):
            shutil.rmtree(leftover, ignore_errors=True)
        for conf in state.root.glob("gpu*.conf"):
            conf.unlink()
    state.make_dirs()
    write_gpus(state, new_gpus(state, gpus, memory_mib, reserved_mib, name))
    make_device_files(state, gpus)
    extra = {"orphans": orphans} if orphans != "reaper" else {}
    if subreaper_title:
        extra["subreaper_title"] = subreaper_title
    extra[HOST_PID_NAMESPACE] = str(procfs.pid_namespace() or 0)
    write_kv(state.host, dict(HOST_DEFAULTS, topology=topology, **extra))


def make_device_files(state: StateDir, gpus: int) -> None:
    """dev/nvidiactl, dev/nvidia-uvm and dev/nvidia<i>: what a CUDA process holds open (see devices.py)."""
    state.dev.mkdir(parents=True, exist_ok=True)
    for old in state.dev.glob("nvidia*"):
        old.unlink()
    for name in ["nvidiactl", "nvidia-uvm"] + [f"nvidia{index}" for index in range(gpus)]:
        (state.dev / name).touch()


def read_host(state: StateDir) -> Dict[str, str]:
    return dict(HOST_DEFAULTS, **read_kv(state.require().host))


def set_host_key(state: StateDir, key: str, value: str) -> None:
    values = read_kv(state.require().host)
    values[key] = value
    write_kv(state.host, values)
