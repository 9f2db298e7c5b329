# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The files of /proc read straight, where psutil would read more than asked: a process's stat line, its command
line, its status, its kernel wait channel, its cgroups; the PIDs there; this boot's id and this process's PID namespace.

A process that exits while it is read is ``Gone`` (or None where the function says so); a file this user may not read
raises PermissionError (or another OSError) to the caller, who decides whether psutil takes over.

Package rule (_host): this package reads the local host (the process table, PID trust, device files). It imports
only the flat files of module_utils (_deps, _argspec, _secrets) and its own files: never _gpu, _reclaim, _bench,
_server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

PROC = "/proc"
ENDED = ("Z", "X")  # a zombie (ended, not yet reaped by its parent) or dead


class Gone(Exception):
    """The process exited (or never was)."""


class Stat(t.NamedTuple):
    """What /proc/PID/stat says of a process."""

    comm: str  # the kernel's name, at most 15 characters
    state: str  # one letter: R, S, D, T, t, Z, X, I, ...
    ppid: int
    session: int  # the PID of its session's leader (its own PID after setsid())
    start_ticks: int  # its start, in clock ticks after boot: exact, unlike a start time in seconds


def read_file(path: str) -> bytes:
    """The whole file; Gone when the process has exited; PermissionError (and other OSErrors) to the caller."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise Gone() from None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except ProcessLookupError:  # it exited between the open and the read
        raise Gone() from None
    finally:
        os.close(fd)


def parse_stat(data: bytes) -> Stat:
    """The fields of a /proc/PID/stat line. The name is in parentheses and may hold spaces and parentheses: the
    fields that follow start after the last ')'."""
    rpar = data.rfind(b")")
    fields = data[rpar + 2:].split()
    return Stat(os.fsdecode(data[data.find(b"(") + 1:rpar]), fields[0].decode("ascii", "replace"), int(fields[1]),
                int(fields[3]), int(fields[19]))


def read_stat(pid: int, proc: str = PROC) -> t.Optional[bytes]:
    """The stat line of ``pid`` (one read: the line is far shorter than 4 KiB); None when it is gone. PermissionError
    (and other OSErrors) go to the caller."""
    try:
        fd = os.open("%s/%d/stat" % (proc, pid), os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return os.read(fd, 4096) or None
    except ProcessLookupError:  # it exited between the open and the read
        return None
    finally:
        os.close(fd)


def stat(pid: int, proc: str = PROC) -> t.Optional[Stat]:
    """parse_stat() of ``pid``'s stat line; None when it is gone or its line cannot be read or parsed."""
    try:
        data = read_stat(pid, proc)
        return parse_stat(data) if data else None
    except (OSError, ValueError, IndexError):
        return None


def readable(psutil: t.Any, proc: str = PROC) -> bool:
    """True when /proc can be read straight: psutil says Linux and this process's own stat file reads."""
    if not getattr(psutil, "LINUX", False):
        return False
    try:
        return bool(read_file("%s/self/stat" % proc))
    except (OSError, Gone):
        return False


def pids(proc: str = PROC) -> t.List[int]:
    """The PIDs /proc lists now (empty where there is no /proc)."""
    try:
        return [int(entry) for entry in os.listdir(proc) if entry.isdigit()]
    except OSError:
        return []


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


def cmdline_bytes(pid: int, proc: str = PROC) -> t.Optional[bytes]:
    """/proc/PID/cmdline as the kernel gives it (NUL-separated words); None when it cannot be read."""
    try:
        return read_file("%s/%d/cmdline" % (proc, pid))
    except (OSError, Gone):
        return None


def _text(path: str) -> t.Optional[str]:
    try:
        return read_file(path).decode("utf-8", "replace").strip() or None
    except (OSError, Gone):
        return None


def wchan(pid: int, proc: str = PROC) -> t.Optional[str]:
    """The kernel function a process waits in (/proc/PID/wchan); None when unknown or unreadable."""
    return _text("%s/%d/wchan" % (proc, pid))


# the cgroup v1 hierarchies whose paths stand for a process's cgroup when there is no unified line, in this order
_V1_ORDER = ("name=systemd", "pids", "memory", "cpu,cpuacct")


def cgroup_paths(pid: int, proc: str = PROC) -> t.Optional[t.List[str]]:
    """The cgroup paths of /proc/PID/cgroup (``ID:CONTROLLERS:PATH`` lines), each once: the unified hierarchy's
    (cgroup v2, ``0::PATH``) first, then name=systemd's, pids', memory's and cpu,cpuacct's, then the other lines' in
    file order. None when the file cannot be read (the process is gone, or another user's without the rights)."""
    text = _text("%s/%d/cgroup" % (proc, pid))
    if text is None:
        return None
    paths: t.Dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            paths.setdefault(parts[1], parts[2])
    ordered = [paths[key] for key in ("",) + _V1_ORDER if key in paths] + list(paths.values())
    return list(dict.fromkeys(ordered))


def boot_id(proc: str = PROC) -> t.Optional[str]:
    """This boot's id (changes at each boot); None when unreadable."""
    found = _text("%s/sys/kernel/random/boot_id" % proc)
    return found.splitlines()[0] if found else None


def pid_namespace(proc: str = PROC) -> t.Optional[str]:
    """This process's PID namespace, as /proc/self/ns/pid names it (``pid:[N]``); None when unreadable."""
    try:
        return os.readlink("%s/self/ns/pid" % proc)
    except OSError:
        return None


def process_start(pid: int, proc: str = PROC) -> t.Optional[str]:
    """A process's start time as a comparable text; raises ProcessLookupError when no such process runs (an ended
    process not yet reaped included).

    Linux: ``ticks:N``, field 22 of /proc/PID/stat (clock ticks after boot, exact). Elsewhere ``epoch:T``
    from psutil. None when the process exists but its start cannot be read.
    """
    if os.path.isdir(proc):
        try:
            data = read_stat(pid, proc)
        except OSError:
            return None
        if data is None:
            raise ProcessLookupError(pid)
        try:
            seen = parse_stat(data)
        except (ValueError, IndexError):
            return None
        if seen.state in ENDED:
            raise ProcessLookupError(pid)
        return "ticks:%d" % seen.start_ticks
    try:
        import psutil  # pylint: disable=import-outside-toplevel  # only where there is no /proc
    except ImportError:
        return None
    try:
        return "epoch:%.2f" % psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        raise ProcessLookupError(pid) from None
    except psutil.Error:
        return None
