# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a failed reclaim hands the operator so they can act without logging in.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.devices import device_holders
from ansible_collections.gpuops.fleet.plugins.module_utils._host.procfs import wchan

KERNEL_LOGS = ("/var/log/kern.log", "/var/log/messages", "/var/log/syslog")
_TAIL_BYTES = 4 * 1024 * 1024
XID_MARK = "NVRM: Xid"


def survivor(psutil: t.Any, pid: int, container: t.Optional[t.Mapping[str, t.Any]] = None) -> t.Dict[str, t.Any]:
    """State, kernel wait channel, user and parent chain of a process that would not go, and the container it runs in
    (``container``: runtime, id, name, image; None outside one)."""
    evidence: t.Dict[str, t.Any] = {"pid": pid, "state": None, "wchan": wchan(pid),
                                    "username": None, "parents": [], "container": None if container is None else dict(container)}
    try:
        proc = psutil.Process(pid)
        evidence["state"] = proc.status()
        evidence["username"] = proc.username()
        evidence["parents"] = [{"pid": p.pid, "name": p.name()} for p in proc.parents()]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return evidence


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


def collect(psutil: t.Any, pids: t.Iterable[int], container_fact: t.Callable[[int], t.Optional[t.Mapping[str, t.Any]]]) -> t.Dict[str, t.Any]:
    """The result's ``evidence``: each process left (survivor(), with its container: ``container_fact(pid)``), the
    device holders, the Xid lines."""
    return {
        "survivors": [survivor(psutil, pid, container_fact(pid)) for pid in sorted(pids)],
        "device_holders": device_holders(psutil),
        "xid": xid_lines(),
    }
