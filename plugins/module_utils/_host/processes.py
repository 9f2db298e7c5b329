# -*- coding: utf-8 -*-
# Copyright (c) 2025, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NVML PIDs joined with what psutil knows of them: one psutil pass per PID.

Package rule (_host): this package reads the local host (the process table, PID trust, device files). It imports
only the flat files of module_utils (_deps, _argspec, _secrets) and its own files: never _gpu, _reclaim, _bench,
_server or _report, and never a module.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

_ATTRS = ["name", "cmdline", "username", "status", "ppid", "create_time"]
# psutil's create_time is derived from /proc/PID/stat's start ticks and the boot time: the same
# process reads the same value to well under this tolerance, another process (PID reuse) does not
START_TIME_TOLERANCE_S = 0.05


def trim_cmdline(cmdline: t.Optional[t.List[str]]) -> t.Optional[t.List[str]]:
    """A process title (setproctitle) leaves the rest of the old argv area as NULs: drop the empty words at the end."""
    while cmdline and not cmdline[-1]:
        cmdline.pop()
    return cmdline


def program_names(name: t.Optional[str], cmdline: t.Optional[t.Sequence[str]]) -> t.List[str]:
    """The process name and the base name of its program (the first word of its command line, or of its title)."""
    names = [name] if name else []
    words = " ".join(cmdline or []).split()
    if words:
        names.append(words[0].rsplit("/", 1)[-1])
    return names


def describe_process(psutil: t.Any, pid: int) -> t.Dict[str, t.Any]:
    """name, cmdline (list), username, state, ppid, create_time and visible for one PID.

    ``name`` is psutil's: the 15-character ``comm`` extended by the first word of
    /proc/PID/cmdline, so a process title such as ``VLLM::Worker_TP0`` shows whole.
    ``visible`` is false when this PID namespace has no such PID (a process of
    another namespace, e.g. a container's, or one that exited just now); every
    other field is then null. A field the user may not read is null.
    """
    try:
        info = psutil.Process(pid).as_dict(attrs=_ATTRS, ad_value=None)
    except psutil.NoSuchProcess:
        return {"name": None, "cmdline": None, "username": None, "state": None, "ppid": None, "create_time": None, "visible": False}
    cmdline = trim_cmdline(info["cmdline"])
    return {
        "name": info["name"],
        "cmdline": cmdline,
        "username": info["username"],
        "state": info["status"],
        "ppid": info["ppid"],
        "create_time": info["create_time"],
        "visible": True,
    }


def describe_processes(psutil: t.Any, pids: t.Iterable[int]) -> t.Dict[int, t.Dict[str, t.Any]]:
    """describe_process() for each distinct PID."""
    return {pid: describe_process(psutil, pid) for pid in set(pids)}
