# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Which processes gpu_reclaim may end: the holders, and their launchers' trees.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._processes import trim_cmdline
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim_spec import ReclaimSpec, matches_any


class Target(t.NamedTuple):
    """A process to end. ``role``: launcher, holder or descendant; ``depth`` below its launcher (launchers are 0)."""

    pid: int
    create_time: float
    name: t.Optional[str]
    cmdline: t.Optional[t.List[str]]
    username: t.Optional[str]
    role: str
    depth: int
    gpus: t.List[int]


class Plan(t.NamedTuple):
    targets: t.List[Target]
    left_alone: t.Dict[int, str]  # holder pid -> why it is not signalled
    warnings: t.List[str]


def protected_pids(psutil: t.Any) -> t.Set[int]:
    """PID 0 and 1, this process and its ancestors (the Ansible connection): never signalled."""
    me = psutil.Process(os.getpid())
    return {0, 1, me.pid} | {p.pid for p in me.parents()}


def _info(psutil: t.Any, proc: t.Any) -> t.Optional[t.Dict[str, t.Any]]:
    try:
        info = proc.as_dict(attrs=["name", "cmdline", "username", "create_time", "ppid"], ad_value=None)
    except psutil.NoSuchProcess:
        return None
    trim_cmdline(info["cmdline"])
    return info


def _launcher(psutil: t.Any, holder: t.Any, spec: ReclaimSpec, protected: t.Set[int]) -> t.Any:
    """The inference launcher of a holder, or None: climbing from the holder, the first process that matches
    ``launcher_patterns``, then its ancestors for as long as they match too (API server above EngineCore above
    workers). The climb stops at the first non-matching process above a match, at a protected or excluded one."""
    found = None
    chain = [holder]
    try:
        chain += holder.parents()
    except psutil.NoSuchProcess:
        return None
    for proc in chain:
        if proc.pid in protected:
            break
        info = _info(psutil, proc)
        if info is None:
            break
        if matches_any(spec.exclude, info["name"], info["cmdline"]):
            break
        if matches_any(spec.launcher_patterns, info["name"], info["cmdline"]):
            found = proc
        elif found is not None:
            break
    return found


def plan_targets(psutil: t.Any, spec: ReclaimSpec, holders: t.Mapping[int, t.Dict[str, t.Any]],
                 selected_gpus: t.Set[int], other_holders: t.Mapping[int, t.List[int]]) -> Plan:
    """Decide what to signal.

    ``holders``: visible holder pid -> its description (name, cmdline, username, create_time, gpus);
    ``other_holders``: pid -> GPUs it holds outside the selection. A launcher's tree is taken only
    when every GPU holder inside it is itself a target; otherwise only the holder is ended.
    """
    protected = protected_pids(psutil)
    left_alone: t.Dict[int, str] = {}
    chosen: t.Dict[int, t.Dict[str, t.Any]] = {}
    for pid, info in holders.items():
        if pid in protected:
            left_alone[pid] = "protected: PID 1, this module or its ancestors (the Ansible connection)"
        elif pid in other_holders:
            left_alone[pid] = "also holds GPU %s, outside `gpus`" % ", ".join(str(g) for g in other_holders[pid])
        elif matches_any(spec.exclude, info["name"], info["cmdline"]):
            left_alone[pid] = "matches `exclude`"
        elif spec.match and not matches_any(spec.match, info["name"], info["cmdline"]):
            left_alone[pid] = "does not match `match`"
        else:
            chosen[pid] = info

    targets: t.Dict[int, Target] = {}
    warnings: t.List[str] = []
    children_of: t.Dict[int, t.List[int]] = {}
    for pid, info in sorted(chosen.items()):
        if pid in targets:
            continue
        tree = _tree(psutil, pid, spec, protected, children_of) if spec.kill_tree else None
        if tree is not None:
            foreign_holders = sorted(p for p in tree if (p in holders or p in other_holders) and p not in chosen)
            if foreign_holders:
                warnings.append(
                    "pid %d (%s): its launcher's tree also holds GPUs through pid %s, which this run may not end; "
                    "ended the holder only" % (pid, info["name"], ", ".join(str(p) for p in foreign_holders)))
                tree = None
        if tree is None:
            tree = {pid: ("holder", 0, info)}
        for tpid, (role, depth, tinfo) in tree.items():
            if tpid in targets or role == "kept":
                continue
            if tpid in chosen:
                role = "launcher" if role == "launcher" else "holder"
            targets[tpid] = Target(tpid, tinfo["create_time"], tinfo["name"], tinfo["cmdline"], tinfo["username"],
                                   role, depth, sorted(chosen.get(tpid, {}).get("gpus", [])))
    ordered = sorted(targets.values(), key=lambda tg: (tg.role != "launcher", tg.depth, tg.pid))
    return Plan(ordered, left_alone, warnings)


def _children_map(psutil: t.Any, children_of: t.Dict[int, t.List[int]]) -> t.Dict[int, t.List[int]]:
    """parent pid -> child pids, from one pass over the process table (filled on first use, then shared)."""
    if not children_of:
        for proc in psutil.process_iter(["ppid"]):
            children_of.setdefault(proc.info["ppid"], []).append(proc.pid)
    return children_of


def _tree(psutil: t.Any, pid: int, spec: ReclaimSpec, protected: t.Set[int],
          children_of: t.Dict[int, t.List[int]]) -> t.Optional[t.Dict[int, t.Tuple[str, int, t.Dict[str, t.Any]]]]:
    """pid -> (role, depth, info) for the holder's launcher and every descendant; None without a launcher."""
    try:
        holder = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None
    launcher = _launcher(psutil, holder, spec, protected)
    if launcher is None:
        return None
    root = _info(psutil, launcher)
    if root is None:
        return None
    tree = {launcher.pid: ("launcher", 0, root)}
    level = [launcher]
    depth = 0
    while level:
        depth += 1
        next_level = []
        for proc in level:
            for child_pid in _children_map(psutil, children_of).get(proc.pid, []):
                try:
                    child = psutil.Process(child_pid)
                except psutil.NoSuchProcess:
                    continue
                info = _info(psutil, child)
                if info is None or info["ppid"] != proc.pid:  # gone, or the PID was reused since the map was made
                    continue
                if child.pid in protected or matches_any(spec.exclude, info["name"], info["cmdline"]):
                    tree[child.pid] = ("kept", depth, info)  # never signalled, but its GPUs count when deciding on the tree
                    continue
                tree[child.pid] = ("descendant", depth, info)
                next_level.append(child)
        level = next_level
    return tree
