# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The ladder's looks at its targets: one read of /proc/PID/stat per target per round.

Through psutil, checking a target's identity, its state and its identity again before a signal reads
/proc/PID/stat three or four times (a new Process for each is_running(), status() and the check inside
send_signal()), and /proc/stat for the boot time at each create_time(). With psutil on Linux, a look here is one
read of /proc/PID/stat that gives both the start time and the state. The identity rule does not change: the first
look compares the start time with the plan's (the same computation as psutil's: clock ticks since boot / ticks per
second + boot time, within START_TOLERANCE_S); every later look, the one right before each signal included, compares
the start time in clock ticks with the first look's, exactly. Elsewhere (another platform, a stand-in for psutil in
tests, a file /proc will not let this user read) the looks go through psutil's handles as before. /proc is read
through _host/procfs.py.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host import procfs

ZOMBIE = "zombie"  # exited, not yet reaped by its parent
RUNNING = "running"  # any state but zombie (psutil's "dead" included, as before: it is gone at the next look)
START_TOLERANCE_S = 0.05  # the plan's start time against the first look's (psutil counts in 10 ms ticks)


class Looks:
    """``attach(pid, create_time)`` once per target, then ``state(pid)`` once per round and ``kill(pid, number)``
    right after a look that found it running. ``direct``: read /proc here (default: when procfs.readable())."""

    def __init__(self, psutil: t.Any, direct: t.Optional[bool] = None) -> None:
        self.psutil = psutil
        self.direct = procfs.readable(psutil) if direct is None else direct
        self._ticks = float(os.sysconf("SC_CLK_TCK")) if self.direct else 100.0
        self._boot: t.Optional[float] = None
        self._start: t.Dict[int, int] = {}  # direct: pid -> its start time in clock ticks, from the first look
        self._created: t.Dict[int, float] = {}  # direct: pid -> the plan's start time
        self._handles: t.Dict[int, t.Any] = {}  # otherwise (or where /proc refused a read): pid -> psutil handle
        self.reads = 0  # reads of /proc/PID/stat made here (what the tests count)

    def _read(self, pid: int) -> t.Optional[t.Tuple[str, int]]:
        """(state, start ticks) of ``pid``; None when it is gone. PermissionError goes to the caller."""
        self.reads += 1
        data = procfs.read_stat(pid)
        if data is None:
            return None
        seen = procfs.parse_stat(data)
        return seen.state, seen.start_ticks

    def attach(self, pid: int, create_time: float) -> bool:
        """True when ``pid`` still is the process the plan saw (start time ``create_time``), running or a zombie."""
        if self.direct:
            try:
                seen = self._read(pid)
            except PermissionError:
                return self._attach_handle(pid, create_time)
            if seen is None:
                return False
            if self._boot is None:
                self._boot = float(self.psutil.boot_time())
            if abs(seen[1] / self._ticks + self._boot - create_time) >= START_TOLERANCE_S:
                return False
            self._start[pid] = seen[1]
            self._created[pid] = create_time
            return True
        return self._attach_handle(pid, create_time)

    def _attach_handle(self, pid: int, create_time: float) -> bool:
        try:
            proc = self.psutil.Process(pid)
            if abs(proc.create_time() - create_time) >= START_TOLERANCE_S:
                return False
        except self.psutil.NoSuchProcess:
            return False
        self._handles[pid] = proc
        return True

    def state(self, pid: int) -> t.Optional[str]:
        """ZOMBIE, RUNNING, or None once it has exited (gone, or its PID now names another process)."""
        if pid in self._start:
            try:
                seen = self._read(pid)
            except PermissionError:  # /proc refuses now: psutil's handle decides from here on
                del self._start[pid]
                if not self._attach_handle(pid, self._created[pid]):
                    return None
                return self.state(pid)
            if seen is None or seen[1] != self._start[pid]:
                return None
            return ZOMBIE if seen[0] == "Z" else RUNNING
        proc = self._handles[pid]
        try:
            if not proc.is_running():
                return None
            return ZOMBIE if proc.status() == self.psutil.STATUS_ZOMBIE else RUNNING
        except self.psutil.NoSuchProcess:
            return None

    def kill(self, pid: int, number: int) -> None:
        """Send signal ``number``; psutil's NoSuchProcess when it is gone, AccessDenied when refused. Call it right
        after state() found the process running: that look is the identity check before the signal."""
        if pid not in self._start:
            self._handles[pid].send_signal(number)  # psutil checks the start time again
            return
        try:
            os.kill(pid, number)
        except ProcessLookupError:
            raise self.psutil.NoSuchProcess(pid) from None
        except PermissionError:
            raise self.psutil.AccessDenied(pid) from None
