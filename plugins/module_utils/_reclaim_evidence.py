# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a failed reclaim hands the operator so they can act without logging in.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

KERNEL_LOGS = ("/var/log/kern.log", "/var/log/messages", "/var/log/syslog")
# Where the NVIDIA device files are (/dev unless told otherwise: a simulated host keeps its own, see docs/simulator.md)
DEVICE_DIR_ENV = "GPUOPS_NVIDIA_DEVICE_DIR"
_TAIL_BYTES = 4 * 1024 * 1024
XID_MARK = "NVRM: Xid"


def _read(path: str) -> t.Optional[str]:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def survivor(psutil: t.Any, pid: int) -> t.Dict[str, t.Any]:
    """State, kernel wait channel, user and parent chain of a process that would not go."""
    evidence: t.Dict[str, t.Any] = {"pid": pid, "state": None, "wchan": _read("/proc/%d/wchan" % pid) or None,
                                    "username": None, "parents": []}
    try:
        proc = psutil.Process(pid)
        evidence["state"] = proc.status()
        evidence["username"] = proc.username()
        evidence["parents"] = [{"pid": p.pid, "name": p.name()} for p in proc.parents()]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return evidence


def device_prefix() -> str:
    """The path every NVIDIA device file starts with: /dev/nvidia, or $GPUOPS_NVIDIA_DEVICE_DIR/nvidia."""
    return os.path.join(os.environ.get(DEVICE_DIR_ENV) or "/dev", "nvidia")


def device_holders(psutil: t.Any, proc_root: str = "/proc", prefix: t.Optional[str] = None) -> t.List[t.Dict[str, t.Any]]:
    """Processes of this PID namespace with an NVIDIA device file open (/dev/nvidia*: what fuser would show; NVML can
    miss them), each with the device files it holds."""
    prefix = prefix or device_prefix()
    found = []
    for pid in psutil.pids():
        fd_dir = "%s/%d/fd" % (proc_root, pid)
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        devices = set()
        for name in names:
            try:
                link = os.readlink(os.path.join(fd_dir, name))
            except OSError:
                continue
            if link.startswith(prefix):
                devices.add(link)
        if devices:
            found.append({"pid": pid, "name": (_read("%s/%d/comm" % (proc_root, pid)) or "?"), "devices": sorted(devices)})
    return found


def xid_lines(paths: t.Sequence[str] = KERNEL_LOGS, limit: int = 20) -> t.List[str]:
    """The most recent NVIDIA Xid lines of the first readable kernel log (empty if none is readable)."""
    for path in paths:
        try:
            with open(path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - _TAIL_BYTES))
                data = handle.read().decode("utf-8", "replace")
        except OSError:
            continue
        return [line for line in data.splitlines() if XID_MARK in line][-limit:]
    return []
