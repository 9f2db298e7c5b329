# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The process table in one pass (one scan of /proc), its parent and child links, and the PIDs never signalled.

ProcessTable reads it through psutil. ScannedTable reads the same rows straight from /proc, in fewer reads:
psutil's process_iter() with name, cmdline, username, create_time, ppid and status reads /proc/PID/stat twice (once
to make the Process, once inside as_dict), /proc/stat for the boot time, /proc/PID/cmdline and /proc/PID/status, and
looks the user up in the password database, for every process. ScannedTable costs three reads per process (stat,
cmdline, status) and one lookup per user, with psutil's own rules for every field: the name is the kernel's, extended
from the command line when the kernel cut it at 15 characters; the command line is split as psutil splits it (None for
a zombie, [] for a kernel thread); the user is the real UID's name (the number when it has none); the start time is
clock ticks since boot / ticks per second + psutil's boot time. A field that cannot be read is None, as with
process_iter(ad_value=None); a process that exits during the scan is left out. Where psutil does not say Linux (a
stand-in for psutil in tests), the table is psutil's.

Package rule (_host): this package reads the local host (the process table, PID trust, device files). It imports
only the flat files of module_utils (_deps, _argspec, _secrets) and its own files: never _gpu, _reclaim, _bench,
_server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

try:
    import pwd
except ImportError:  # pragma: no cover
    pwd = None  # type: ignore[assignment]

from ansible_collections.gpuops.fleet.plugins.module_utils._host import procfs
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import trim_cmdline

_ATTRS = ["name", "cmdline", "username", "create_time", "ppid", "status"]
_STATES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop", "Z": "zombie", "X": "dead",
           "x": "dead", "K": "wake-kill", "W": "waking", "I": "idle", "P": "parked"}  # psutil's STATUS_* values


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


class ScannedTable(ProcessTable):
    """ProcessTable (info, children, ancestors(), descendants()) filled by one pass over /proc (see the module doc)."""

    def __init__(self, psutil: t.Any) -> None:  # pylint: disable=super-init-not-called
        self.direct = procfs.readable(psutil)
        if not self.direct:
            ProcessTable.__init__(self, psutil)
            return
        self.info = {}
        self.children = {}
        self._boot = float(psutil.boot_time())
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._users: t.Dict[int, t.Optional[str]] = {}
        for pid in procfs.pids():
            try:
                row = self._row(pid)
            except procfs.Gone:
                continue
            trim_cmdline(row["cmdline"])
            self.info[pid] = row
        for pid in sorted(self.info):
            self.children.setdefault(self.info[pid]["ppid"], []).append(pid)

    def read(self, pid: int) -> t.Optional[t.Dict[str, t.Any]]:
        """A row for ``pid`` read now, as the scan reads one (the table is not changed); None when it is gone. Only
        when the table was read from /proc (``direct``)."""
        try:
            row = self._row(pid)
        except procfs.Gone:
            return None
        trim_cmdline(row["cmdline"])
        return row

    def _row(self, pid: int) -> t.Dict[str, t.Any]:
        row: t.Dict[str, t.Any] = {"name": None, "cmdline": None, "username": None, "create_time": None, "ppid": None, "status": None}
        base = "%s/%d/" % (procfs.PROC, pid)
        try:
            data = procfs.read_stat(pid)
        except OSError:
            return row  # not readable by this user (hidepid): psutil gives None for every field too
        if data is None:
            raise procfs.Gone()
        seen = procfs.parse_stat(data)
        comm = seen.comm
        state = seen.state
        row["status"] = _STATES.get(state, "?")
        row["ppid"] = seen.ppid
        row["create_time"] = seen.start_ticks / self._ticks + self._boot
        try:
            text = os.fsdecode(procfs.read_file(base + "cmdline"))
            if text:
                row["cmdline"] = procfs.split_cmdline(text)
            elif state != "Z":
                row["cmdline"] = []  # a kernel thread; a zombie's command line is None, as psutil's
        except OSError:
            pass
        row["name"] = comm
        if len(comm) >= 15 and row["cmdline"]:
            extended = os.path.basename(row["cmdline"][0])
            if extended.startswith(comm):
                row["name"] = extended
        try:
            status = procfs.read_file(base + "status")
            for line in status.splitlines():
                if line.startswith(b"Uid:"):
                    row["username"] = self._user(int(line.split()[1]))
                    break
        except OSError:
            pass
        return row

    def _user(self, uid: int) -> t.Optional[str]:
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name if pwd is not None else None
            except KeyError:
                self._users[uid] = str(uid)
        return self._users[uid]
