# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What /proc says about a process: state, parent, start time, title, descendants."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Set

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
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
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
