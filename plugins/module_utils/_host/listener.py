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

from ansible_collections.gpuops.fleet.plugins.module_utils._host import procfs
from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import masked_argv

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
# the role's vllm_server_reclaim_match: what a vLLM server looks like (its API server, `vllm serve`, its workers); the
# default of every listener reading (_reclaim/takeover.py), here so that a module's options need no more than this file
DEFAULT_MATCH = ["^VLLM::", r"vllm\.entrypoints\.", r"(^|/)vllm\s+serve(\s|$)"]


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
    paths = procfs.cgroup_paths(pid, proc_root)
    return paths[0] if paths else None


# ---- how the listener was started ------------------------------------------------------------------------------

BY_HAND_TMUX = "tmux"
BY_HAND_SCREEN = "screen"
BY_HAND_SHELL = "shell"
NOHUP = "nohup"
PARENT = "process"
UNIT = "systemd"
CONTAINER = "container"
OWN_UNIT = "own_unit"

# kinds whose server the role may stop and replace; a unit or a container would start theirs again
TAKEN_OVER = (BY_HAND_TMUX, BY_HAND_SCREEN, BY_HAND_SHELL, NOHUP, PARENT, OWN_UNIT)

_SHELLS = ("bash", "sh", "dash", "zsh", "ksh", "mksh", "fish", "tcsh", "csh", "busybox")


class Proc(t.NamedTuple):
    """One process of a listener's ancestry, as /proc shows it: ``name`` (its comm), ``cmdline`` (its words)."""

    pid: int
    name: str
    cmdline: t.List[str]


class Started(t.NamedTuple):
    """How a listener was started. ``how``: one of the kinds above; ``words``: in an operator's words; ``unit``: the
    systemd unit of its cgroup (UNIT, OWN_UNIT); ``container``: the container's runtime and id (CONTAINER);
    ``by``: the process that started it or runs its pane (None when its parent is gone)."""

    how: str
    words: str
    unit: t.Optional[str] = None
    container: t.Optional[str] = None
    by: t.Optional[int] = None


def cgroup_container(cgroup: t.Optional[str]) -> t.Optional[str]:
    """``runtime <short id>`` when the cgroup path is a container's (docker, podman; containerd, crio or kubernetes
    below kubepods: see container.py); None otherwise."""
    # imported by the reading that needs it: a module run compiles what it imports (a launch's run reads no cgroup)
    from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import container_in_path  # pylint: disable=import-outside-toplevel
    found = container_in_path(cgroup or "")
    return "%s %s" % (found.engine or found.runtime, found.container_id[:12]) if found else None


def cgroup_unit(cgroup: t.Optional[str]) -> t.Optional[str]:
    """The systemd service whose own cgroup this is (its last component, ``NAME.service``), None otherwise.

    A login session's scope (session-3.scope), a tmux or screen scope and a user's manager (user@1000.service, whose
    processes live in cgroups below it) run what a person typed: none of them starts a server again when it ends."""
    last = (cgroup or "").rstrip("/").rpartition("/")[2]
    if not last.endswith(".service") or last.startswith("user@"):
        return None
    return last


def _program(proc: Proc) -> str:
    """The program's base name: the first word of its command line (or its comm), without a directory or a '-' of a
    login shell; tmux and screen rewrite their titles (``tmux: server``, ``SCREEN -S x``)."""
    word = proc.cmdline[0] if proc.cmdline else proc.name
    word = word.split(":", 1)[0].split()[0] if word.strip() else proc.name
    return word.rpartition("/")[2].lstrip("-").lower()


def _shown(proc: Proc) -> str:
    """``PID N (its command line)``, secrets masked (a shell's ``-c`` string may hold the server's whole command line)."""
    text = " ".join(masked_argv(proc.cmdline)) or proc.name
    return "PID %d (%s)" % (proc.pid, text if len(text) <= 60 else text[:57] + "...")


def classify(cgroup: t.Optional[str], parents: t.Sequence[Proc], own_unit: t.Optional[str] = None,
             adopts: t.Callable[[Proc], bool] = lambda proc: False) -> Started:
    """How the process with this cgroup and these ``parents`` (its parent first, up to PID 1; empty when its parent is
    gone) was started. ``own_unit``: the role's systemd unit; ``adopts``: whether a parent adopts orphans (an init
    system, a service manager, a container's init).

    In this order: a container (its cgroup); a systemd service (its cgroup names it: the role's own, or another
    tool's); nohup'd (its parent is gone, or PID 1 or an adopter took it); by hand in tmux or screen (one of its
    ancestors is their server); by hand in a shell (its parent is one); else started by its parent process."""
    container = cgroup_container(cgroup)
    if container:
        return Started(CONTAINER, "in a container (%s)" % container, container=container)
    unit = cgroup_unit(cgroup)
    if unit and unit == own_unit:
        return Started(OWN_UNIT, "by this role's unit %s" % unit, unit=unit)
    if unit:
        return Started(UNIT, "by the systemd unit %s" % unit, unit=unit)
    if not parents or parents[0].pid in (0, 1) or adopts(parents[0]):
        adopted = ", adopted by %s" % _shown(parents[0]) if parents else ""
        return Started(NOHUP, "nohup'd (its parent is gone%s)" % adopted)
    for proc in parents:
        program = _program(proc)
        if program == "tmux":
            return Started(BY_HAND_TMUX, "by hand in tmux (%s, pane shell %s)" % (_shown(proc), _shown(parents[0])), by=proc.pid)
        if program == "screen":
            return Started(BY_HAND_SCREEN, "by hand in screen (%s, window shell %s)" % (_shown(proc), _shown(parents[0])), by=proc.pid)
        if proc.pid == 1 or adopts(proc):
            break
    if _program(parents[0]) in _SHELLS:
        return Started(BY_HAND_SHELL, "by hand in a shell (%s)" % _shown(parents[0]), by=parents[0].pid)
    return Started(PARENT, "by %s" % _shown(parents[0]), by=parents[0].pid)


def read_proc(pid: int, proc_root: str = "/proc") -> t.Optional[t.Tuple[Proc, int]]:
    """(the process, its parent's PID) from /proc/PID/stat and cmdline; None when it is gone or unreadable."""
    try:
        with open("%s/%d/stat" % (proc_root, pid), "rb") as handle:
            stat = handle.read().decode("utf-8", "replace")
        with open("%s/%d/cmdline" % (proc_root, pid), "rb") as handle:
            cmdline = [w.decode("utf-8", "replace") for w in handle.read().split(b"\0")]
    except OSError:
        return None
    name = stat[stat.find("(") + 1:stat.rfind(")")]
    fields = stat[stat.rfind(")") + 2:].split()
    if len(fields) < 2:
        return None
    while cmdline and cmdline[-1] == "":
        cmdline.pop()
    return Proc(pid, name, cmdline), int(fields[1])


def parents_of(pid: int, proc_root: str = "/proc", limit: int = 64) -> t.List[Proc]:
    """The ancestors of ``pid``, its parent first, up to PID 1 (empty when its parent is gone)."""
    found: t.List[Proc] = []
    read = read_proc(pid, proc_root)
    parent = read[1] if read else 0
    while parent > 0 and len(found) < limit:
        read = read_proc(parent, proc_root)
        if read is None:
            break
        found.append(read[0])
        parent = read[1]
    return found


def how_started(pid: int, own_unit: t.Optional[str] = None, adopts: t.Callable[[Proc], bool] = lambda proc: False,
                proc_root: str = "/proc") -> Started:
    """classify() for a live process, from its /proc."""
    return classify(read_cgroup(pid, proc_root), parents_of(pid, proc_root), own_unit, adopts)
