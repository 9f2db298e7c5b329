# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The server that listens on the role's port, whoever started it: what it is, how it was started, whether the role
may take it over.

The process listening on ``vllm_server_port`` is the server the inventory describes. The role takes it over (drains it,
stops its whole tree, launches its own) when it looks like vLLM and nothing would start it again: started by hand in
tmux, screen or a shell, nohup'd, or by any other live parent. It refuses, before stopping anything, a listener that is
not vLLM (nginx, say), one of another tool's systemd unit (killing it makes the unit start it again) and one in a
container.

Package rule (_reclaim): whose a process is, like owner.py for a GPU holder. It imports the flat files of module_utils,
_host and its own files.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._secrets import masked_argv
from ansible_collections.gpuops.fleet.plugins.module_utils._host import listener as _listener
from ansible_collections.gpuops.fleet.plugins.module_utils._host.procfs import PROC
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import DEFAULT_SUBREAPERS, matches_any, regexes

# the role's vllm_server_reclaim_match: what a vLLM server looks like (its API server, `vllm serve`, its workers)
DEFAULT_MATCH = ["^VLLM::", r"vllm\.entrypoints\.", r"(^|/)vllm\s+serve(\s|$)"]

Looks = t.Callable[[str, t.Sequence[str]], bool]


def read_listener(psutil: t.Any, port: int, match: t.Sequence[str] = tuple(DEFAULT_MATCH), unit: t.Optional[str] = None,
                  stop_units: bool = False) -> t.Optional[t.Dict[str, t.Any]]:
    """describe() with ``match`` as regular expressions (the option of vllm_listener and of vllm_lock's status); raises
    SpecError naming ``match`` for a pattern that does not compile, ListenerError as describe() does."""
    patterns = regexes("match", match)
    adopters = regexes("subreapers", DEFAULT_SUBREAPERS)
    return describe(psutil, port, lambda name, cmdline: matches_any(patterns, name, cmdline),
                    lambda name, cmdline: matches_any(adopters, name, cmdline), unit, stop_units)


def describe(psutil: t.Any, port: int, is_vllm: Looks, adopts: Looks, own_unit: t.Optional[str] = None,
             stop_units: bool = False, proc_root: str = PROC) -> t.Optional[t.Dict[str, t.Any]]:
    """The listener on ``port`` as the role shows it (its command line masked), None when nothing listens.

    ``is_vllm``: whether a process (name, command line) is a vLLM server; ``adopts``: whether a parent adopts orphans.
    Raises ListenerError when unrelated processes share the port."""
    pid = _listener.listening_pid(psutil, port)
    if pid is None:
        return None
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            name, cmdline, create_time = proc.name(), proc.cmdline(), proc.create_time()
        tree = [child.pid for child in proc.children(recursive=True)]
    except psutil.Error:
        # gone since the socket table was read (or unreadable): nothing to take over; a launch on the port then names it
        return None
    started = _listener.how_started(pid, own_unit, lambda p: adopts(p.name, p.cmdline), proc_root)
    vllm = is_vllm(name, cmdline)
    shown = " ".join(masked_argv(cmdline)) or name
    info = {
        "pid": pid,
        "create_time": create_time,
        "name": name,
        "cmdline": masked_argv(cmdline),
        "command": shown,
        "vllm": vllm,
        "tree": sorted(tree),
        "how": started.how,
        "started": started.words,
        "unit": started.unit,
        "container": started.container,
        "by": started.by,
    }
    info["refusal"] = refusal(info, port, stop_units)
    info["takeover"] = info["refusal"] is None and started.how != _listener.OWN_UNIT
    return info


def refusal(info: t.Mapping[str, t.Any], port: int, stop_units: bool = False) -> t.Optional[str]:
    """Why the role may not stop this listener, in words naming it and the way out; None when it may. ``stop_units``: the
    role may stop and disable another tool's systemd unit that runs it (vllm_server_takeover_units)."""
    who = "PID %d (%s), started %s" % (info["pid"], info["command"][:200], info["started"])
    if not info["vllm"]:
        return "port %d is held by %s, which is not a vLLM server: it is not stopped; stop it or choose another vllm_server_port" % (
            port, who)
    if info["how"] == _listener.CONTAINER:
        return ("port %d is held by the vLLM server %s: a container restarts what it runs, and this container is not the "
                "role's own; stop the container (%s) and rerun" % (port, who, info["container"]))
    if info["how"] == _listener.UNIT and not stop_units:
        return ("port %d is held by the vLLM server %s, which would start it again when it ends: set "
                "vllm_server_takeover_units=true to let this run stop and disable %s, or stop and disable it yourself "
                "(systemctl disable --now %s), and rerun" % (port, who, info["unit"], info["unit"]))
    return None
