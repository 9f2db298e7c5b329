# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim's process table read straight from /proc: the same rows as _host/process_table.py's, in fewer reads.

psutil's process_iter() with name, cmdline, username, create_time, ppid and status reads /proc/PID/stat twice (once
to make the Process, once inside as_dict), /proc/stat for the boot time, /proc/PID/cmdline and /proc/PID/status, and
looks the user up in the password database, for every process. Here each process costs three reads (stat, cmdline,
status) and each user one lookup, with psutil's own rules for every field: the name is the kernel's, extended from
the command line when the kernel cut it at 15 characters; the command line is split as psutil splits it (None for a
zombie, [] for a kernel thread); the user is the real UID's name (the number when it has none); the start time is
clock ticks since boot / ticks per second + psutil's boot time. A field that cannot be read is None, as with
process_iter(ad_value=None); a process that exits during the scan is left out. Where psutil does not say Linux (a
stand-in for psutil in tests), the table is psutil's.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

try:
    import pwd
except ImportError:  # pragma: no cover
    pwd = None  # type: ignore[assignment]

from ansible_collections.gpuops.fleet.plugins.module_utils._host.process_table import ProcessTable
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import trim_cmdline
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.looks import proc_readable

_PROC = "/proc"
_STATES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop", "Z": "zombie", "X": "dead",
           "x": "dead", "K": "wake-kill", "W": "waking", "I": "idle", "P": "parked"}  # psutil's STATUS_* values


class _Gone(Exception):
    """The process exited during the scan."""


def _read(path: str) -> bytes:
    """The whole file; _Gone when the process has exited; PermissionError (and other OSErrors) to the caller."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise _Gone() from None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except ProcessLookupError:
        raise _Gone() from None
    finally:
        os.close(fd)


def split_cmdline(data: str) -> t.List[str]:
    """A non-empty /proc/PID/cmdline as psutil splits it: NUL-separated, or space-separated when a process rewrote its
    title with spaces (setproctitle)."""
    sep = "\x00" if data.endswith("\x00") else " "
    if data.endswith(sep):
        data = data[:-1]
    cmdline = data.split(sep)
    if sep == "\x00" and len(cmdline) == 1 and " " in data:
        cmdline = data.split(" ")
    return cmdline


class ScannedTable(ProcessTable):
    """ProcessTable (info, children, ancestors(), descendants()) filled by one pass over /proc (see the module doc)."""

    def __init__(self, psutil: t.Any) -> None:  # pylint: disable=super-init-not-called
        self.direct = proc_readable(psutil)
        if not self.direct:
            ProcessTable.__init__(self, psutil)
            return
        self.info = {}
        self.children = {}
        self._boot = float(psutil.boot_time())
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        self._users: t.Dict[int, t.Optional[str]] = {}
        for entry in os.listdir(_PROC):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                row = self._row(pid)
            except _Gone:
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
        except _Gone:
            return None
        trim_cmdline(row["cmdline"])
        return row

    def _row(self, pid: int) -> t.Dict[str, t.Any]:
        row: t.Dict[str, t.Any] = {"name": None, "cmdline": None, "username": None, "create_time": None, "ppid": None, "status": None}
        base = "%s/%d/" % (_PROC, pid)
        try:
            data = _read(base + "stat")
        except OSError:
            return row  # not readable by this user (hidepid): psutil gives None for every field too
        rpar = data.rfind(b")")
        fields = data[rpar + 2:].split()
        comm = os.fsdecode(data[data.find(b"(") + 1:rpar])
        state = fields[0].decode("ascii", "replace")
        row["status"] = _STATES.get(state, "?")
        row["ppid"] = int(fields[1])
        row["create_time"] = int(fields[19]) / self._ticks + self._boot
        try:
            text = os.fsdecode(_read(base + "cmdline"))
            if text:
                row["cmdline"] = split_cmdline(text)
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
            status = _read(base + "status")
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
