# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What /proc says about a process: state, parent, start time, title, descendants."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    state: str
    ppid: int
    starttime: int


def read_stat(pid: int) -> Optional[ProcStat]:
    """Parse /proc/<pid>/stat (the comm may hold spaces and parentheses); None when gone."""
    return _read_stat(pid, str(pid))


def _read_stat(pid: int, entry: str) -> Optional[ProcStat]:
    try:
        with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
            raw = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    head, _paren, tail = raw.rpartition(")")
    fields = tail.split()
    # fields[0] is field 3 (state) of proc(5); field N is fields[N - 3].
    return ProcStat(pid=pid, comm=head.partition("(")[2], state=fields[0], ppid=int(fields[1]),
                    starttime=int(fields[19]))


def starttime(pid: int) -> Optional[int]:
    stat = read_stat(pid)
    return stat.starttime if stat else None


def is_same_process(pid: int, recorded_starttime: int) -> bool:
    """True while <pid> exists (zombie included) and is still the process that was recorded."""
    stat = read_stat(pid)
    return stat is not None and stat.starttime == recorded_starttime


def is_running(pid: int, recorded_starttime: int) -> bool:
    """The recorded process exists and is not a zombie (it can still hold or do something)."""
    stat = read_stat(pid)
    return stat is not None and stat.starttime == recorded_starttime and stat.state not in ("Z", "X")


def pid_namespace(pid: Optional[int] = None) -> Optional[int]:
    """The inode of /proc/PID/ns/pid (this process's without a PID): the PID namespace's identity, the same number
    from every namespace. None when the process is gone or not ours to inspect (another user's)."""
    try:
        return os.stat(f"/proc/{'self' if pid is None else pid}/ns/pid").st_ino
    except OSError:
        return None


def namespace_pids(pid: int) -> List[int]:
    """The NSpid line of /proc/PID/status: the process's PID in each PID namespace it is in, this /proc's first,
    its own namespace's last; empty when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("NSpid:"):
                    return [int(field) for field in line.split()[1:]]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return []


def own_identity() -> Tuple[int, int, int]:
    """(PID, start time, PID namespace) of this process as it records itself: its PID in its own namespace (in a
    container, the container's), its start time (the same number from every namespace) and its namespace's inode."""
    stat = _read_stat(os.getpid(), "self")
    namespace = pid_namespace()
    assert stat is not None and namespace is not None  # our own /proc entry exists
    return os.getpid(), stat.starttime, namespace


def find_namespaced(wanted: Set[Tuple[int, int, int]]) -> Dict[Tuple[int, int, int], ProcStat]:
    """The processes of /proc named by what each recorded of itself, (PID namespace, PID there, start time), found by
    one scan: a process whose /proc/PID/ns/pid is that namespace (or cannot be read: another user's process, matched
    by its PID there and start time alone), whose last NSpid entry is that PID and whose start time is the same."""
    found: Dict[Tuple[int, int, int], ProcStat] = {}
    if not wanted:
        return found
    namespaces = {namespace for namespace, _pid, _start in wanted}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            seen: Optional[int] = os.stat(f"/proc/{entry}/ns/pid").st_ino
        except PermissionError:
            seen = None
        except OSError:  # gone
            continue
        if seen is not None and seen not in namespaces:
            continue
        stat, inner = read_stat(int(entry)), namespace_pids(int(entry))
        if stat is None or not inner:
            continue
        for namespace in namespaces if seen is None else (seen,):
            key = (namespace, inner[-1], stat.starttime)
            if key in wanted:
                found[key] = stat
    return found


def title(pid: int) -> str:
    """The process title as ps shows it: cmdline joined by spaces, else [comm] (zombies)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            raw = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return ""
    words = [word.decode(errors="replace") for word in raw.split(b"\0") if word]
    if words:
        return " ".join(words)
    stat = read_stat(pid)
    return f"[{stat.comm}]" if stat else ""


def all_stats() -> List[ProcStat]:
    stats: List[ProcStat] = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = read_stat(int(entry))
            if stat:
                stats.append(stat)
    return stats


def children(pid: int) -> List[int]:
    """The processes whose parent is <pid>, in PID order."""
    return sorted(stat.pid for stat in all_stats() if stat.ppid == pid)


def descendants(pid: int) -> Set[int]:
    """Every process below <pid> in the tree (children, grandchildren ...)."""
    children: Dict[int, List[int]] = {}
    for stat in all_stats():
        children.setdefault(stat.ppid, []).append(stat.pid)
    found: Set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def pid_max() -> int:
    with open("/proc/sys/kernel/pid_max", encoding="utf-8") as handle:
        return int(handle.read())


def become_subreaper() -> None:
    """Orphans below this process are reparented to it (instead of PID 1), so it can reap them."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
