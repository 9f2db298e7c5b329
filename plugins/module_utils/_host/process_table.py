# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The process table in one pass (one scan of /proc), its parent and child links, and the PIDs never signalled.

Package rule (_host): this package reads the local host (the process table, PID trust, device files). It imports
only the flat files of module_utils (_deps, _argspec, _secrets) and its own files: never _gpu, _reclaim, _bench,
_server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import trim_cmdline

_ATTRS = ["name", "cmdline", "username", "create_time", "ppid", "status"]


class ProcessTable:
    """One pass over the process table (one scan of /proc): pid -> name, cmdline, username, create_time, ppid,
    status (and pgid where readable), and the children of each PID. Every walk of a plan uses it."""

    def __init__(self, psutil: t.Any) -> None:
        self.info: t.Dict[int, t.Dict[str, t.Any]] = {}
        self.children: t.Dict[int, t.List[int]] = {}
        for proc in psutil.process_iter(_ATTRS):
            info = dict(proc.info)
            trim_cmdline(info.get("cmdline"))
            self.info[proc.pid] = info
        for pid in sorted(self.info):
            self.children.setdefault(self.info[pid]["ppid"], []).append(pid)

    def ancestors(self, pid: int) -> t.List[int]:
        """The parent chain of ``pid``, nearest first (stops at a PID the table does not have, or a loop)."""
        chain: t.List[int] = []
        seen = {pid}
        parent = (self.info.get(pid) or {}).get("ppid")
        while parent is not None and parent in self.info and parent not in seen:
            chain.append(parent)
            seen.add(parent)
            parent = self.info[parent]["ppid"]
        return chain

    def descendants(self, pid: int) -> t.List[t.Tuple[int, int, int]]:
        """(pid, depth, parent) of every descendant, breadth first."""
        found: t.List[t.Tuple[int, int, int]] = []
        level = [pid]
        seen = {pid}
        depth = 0
        while level:
            depth += 1
            next_level = []
            for parent in level:
                for child in self.children.get(parent, []):
                    if child not in seen:
                        seen.add(child)
                        found.append((child, depth, parent))
                        next_level.append(child)
            level = next_level
        return found


def protected_pids(psutil: t.Any) -> t.Set[int]:
    """PID 0 and 1, this process and its ancestors (the Ansible connection): never signalled."""
    me = psutil.Process(os.getpid())
    return {0, 1, me.pid} | {p.pid for p in me.parents()}
