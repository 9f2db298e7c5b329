# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host-level faults: a lost GPU, a foreign PID, memory held by no process, the driver unloaded."""

from __future__ import annotations

from typing import Optional, Tuple

from gpusim import procfs
from gpusim.allocs import FLAG_FOREIGN, FLAG_NOT_AVAILABLE, Alloc, read_allocs, write_alloc
from gpusim.gpus import gpu_by_index, read_gpus, update_gpu
from gpusim.host import set_host_key
from gpusim.statedir import StateDir, StateError


def set_lost(state: StateDir, gpu: int, lost: bool) -> None:
    update_gpu(state.require(), gpu, lost=lost)


def set_orphan(state: StateDir, gpu: int, mib: int) -> None:
    """Memory held by no process at all (0 clears it)."""
    if mib < 0:
        raise StateError("--mib must not be negative")
    update_gpu(state.require(), gpu, orphan_mib=mib)


def set_driver_loaded(state: StateDir, loaded: bool) -> None:
    set_host_key(state, "driver_loaded", "1" if loaded else "0")


def add_foreign(state: StateDir, gpu: int, mib: int, pid: Optional[int], not_available: bool) -> Alloc:
    """A holder from another PID namespace: listed by NVML, absent from this /proc.

    Without --pid, the PID is above /proc/sys/kernel/pid_max, so no process here can ever have it.
    """
    gpu_by_index(read_gpus(state.require()), gpu)
    taken = {alloc.pid for alloc in read_allocs(state)}
    if pid is None:
        pid = procfs.pid_max() + 1
        while pid in taken:
            pid += 1
    elif procfs.read_stat(pid) is not None:
        raise StateError(f"PID {pid} exists in this PID namespace; a foreign PID must not")
    flags: Tuple[str, ...] = (FLAG_FOREIGN, FLAG_NOT_AVAILABLE) if not_available else (FLAG_FOREIGN,)
    alloc = Alloc(pid=pid, starttime=0, gpu_index=gpu, used_mib=mib, type="C", flags=flags)
    write_alloc(state, alloc)
    return alloc
