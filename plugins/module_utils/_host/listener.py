# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The process that listens on a TCP port, and what /proc says of it: its environment and its cgroup.

The server that listens on a port is found through the kernel's socket table (psutil), never through a record
that a run wrote: a server started by hand, in tmux or by another tool's unit is found the same way as our own.

Package rule (_host): this package reads the local host (the process table, PID trust, device files). It imports
only the flat files of module_utils (_deps, _argspec, _secrets) and its own files: never _gpu, _reclaim, _bench,
_server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


class ListenerError(Exception):
    """The listener could not be told apart: several unrelated processes listen on the port."""


def listening_inodes(port: int, proc_root: str = "/proc") -> t.Set[int]:
    """The socket inodes listening on TCP ``port`` (IPv4 and IPv6, any address), from /proc/net/tcp and tcp6."""
    inodes: t.Set[int] = set()
    for table in ("tcp", "tcp6"):
        try:
            with open("%s/net/%s" % (proc_root, table), "r", encoding="ascii", errors="replace") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(fields[9]))
    return inodes


def socket_holders(inodes: t.Set[int], proc_root: str = "/proc") -> t.Set[int]:
    """Every PID with an open file descriptor on one of these socket inodes (a shared socket has several)."""
    wanted = {"socket:[%d]" % inode for inode in inodes}
    holders: t.Set[int] = set()
    if not wanted:
        return holders
    for entry in os.listdir(proc_root):
        if not entry.isdigit():
            continue
        fd_dir = "%s/%s/fd" % (proc_root, entry)
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("%s/%s" % (fd_dir, fd)) in wanted:
                    holders.add(int(entry))
                    break
            except OSError:
                continue
    return holders


def listening_pid(psutil: t.Any, port: int) -> t.Optional[int]:
    """The PID of the process that listens on TCP ``port`` (any address), None when nothing does.

    Children that inherited the listening socket (vLLM's engine core, its workers) hold it too: the listener is the
    holder whose parent does not hold it. Raises ListenerError when unrelated processes listen on the port
    (SO_REUSEPORT). A socket of a process this user may not read is not seen: run as the server's user or root.
    """
    holders = socket_holders(listening_inodes(port))
    tops = []
    for pid in sorted(holders):
        try:
            parent = psutil.Process(pid).ppid()
        except psutil.NoSuchProcess:
            continue
        if parent not in holders:
            tops.append(pid)
    if len(tops) > 1:
        raise ListenerError("port %d: %d unrelated processes listen on it (PIDs %s)" % (port, len(tops), ", ".join(map(str, tops))))
    return tops[0] if tops else None


def read_environ(pid: int, proc_root: str = "/proc") -> t.Optional[t.Dict[str, str]]:
    """/proc/PID/environ as a dict (the environment the process started with); None when it cannot be read."""
    try:
        with open("%s/%d/environ" % (proc_root, pid), "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    env: t.Dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            env[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def read_cgroup(pid: int, proc_root: str = "/proc") -> t.Optional[str]:
    """The process's cgroup path (the unified hierarchy's line, else the first named one); None when unreadable."""
    try:
        with open("%s/%d/cgroup" % (proc_root, pid), "r", encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    paths = {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            paths[parts[1]] = parts[2]
    if "" in paths:
        return paths[""]
    for controller in ("name=systemd", "pids", "memory", "cpu,cpuacct"):
        if controller in paths:
            return paths[controller]
    return next(iter(paths.values()), None)
