# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The NVIDIA device files a process has open (what ``fuser /dev/nvidia*`` shows): the one scan of /proc/PID/fd.

Package rule (_host): this package reads the local host (the process table, PID trust, device files). It imports
only the flat files of module_utils (_deps, _argspec, _secrets) and its own files: never _gpu, _reclaim, _bench,
_server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

# Where the NVIDIA device files are (/dev unless told otherwise: a simulated host keeps its own, see docs/simulator.md)
DEVICE_DIR_ENV = "GPUOPS_NVIDIA_DEVICE_DIR"


def device_prefix() -> str:
    """The path every NVIDIA device file starts with: /dev/nvidia, or $GPUOPS_NVIDIA_DEVICE_DIR/nvidia."""
    return os.path.join(os.environ.get(DEVICE_DIR_ENV) or "/dev", "nvidia")


def open_device_files(pid: int, proc_root: str = "/proc", prefix: t.Optional[str] = None,
                      first_only: bool = False) -> t.Optional[t.Set[str]]:
    """The NVIDIA device files process ``pid`` has open; None when its descriptors cannot be read (another
    user's process without the rights, or gone). ``first_only``: stop at the first one found."""
    prefix = prefix or device_prefix()
    fd_dir = "%s/%d/fd" % (proc_root, pid)
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return None
    found: t.Set[str] = set()
    for name in names:
        try:
            link = os.readlink(os.path.join(fd_dir, name))
        except OSError:
            continue
        if link.startswith(prefix):
            found.add(link)
            if first_only:
                break
    return found


def _comm(proc_root: str, pid: int) -> t.Optional[str]:
    try:
        with open("%s/%d/comm" % (proc_root, pid), "r", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def device_holders(psutil: t.Any, proc_root: str = "/proc", prefix: t.Optional[str] = None) -> t.List[t.Dict[str, t.Any]]:
    """Processes of this PID namespace with an NVIDIA device file open (/dev/nvidia*: what fuser would show; NVML can
    miss them), each with the device files it holds."""
    prefix = prefix or device_prefix()
    found = []
    for pid in psutil.pids():
        devices = open_device_files(pid, proc_root, prefix)
        if devices:
            found.append({"pid": pid, "name": (_comm(proc_root, pid) or "?"), "devices": sorted(devices)})
    return found
