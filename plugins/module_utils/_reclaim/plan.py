# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Which processes gpu_reclaim may end: the holders, and their launchers' trees.

The launcher rule: climbing from a holder's parent upward, each process must look like an inference launcher
(``launcher_patterns``); the highest of that unbroken chain is the launcher. An ordinary process (a shell, a
job script), a cluster daemon (``cluster_daemons``: raylet, gcs_server, ``ray start``, ...), an excluded or a
protected process stops the climb. Without a launcher, the holder itself is the root of what is taken.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.errors import NvmlError
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import NvmlSession
from ansible_collections.gpuops.fleet.plugins.module_utils._host import pid_trust as _pid_trust
from ansible_collections.gpuops.fleet.plugins.module_utils._host.peers import connected_to
from ansible_collections.gpuops.fleet.plugins.module_utils._host.process_table import ProcessTable, protected_pids
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import describe_process
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.owner import FOREIGN, GetSid, Ownership, Verdict, getsid
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import ReclaimSpec, always_excluded, is_excluded, matches_any

if t.TYPE_CHECKING:
    from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.verify import Reading

Readings = t.Mapping[int, "Reading"]


class Target(t.NamedTuple):
    """A process to end. ``role``: launcher, holder, descendant or respawned; ``depth`` below its root (roots are 0)."""

    pid: int
    create_time: float
    name: t.Optional[str]
    cmdline: t.Optional[t.List[str]]
    username: t.Optional[str]
    role: str
    depth: int
    gpus: t.List[int]


# The rules by which a holder is left alone on purpose (Plan.on_purpose), named after the option that decides each:
# another job's under orphans_only, not taken by match, taken by exclude (or a driver helper), protected (PID 1, this
# module, its ancestors), holding a GPU outside `gpus` too. live_jobs: keep accepts a GPU that only such holders keep
# busy. A holder left alone for lack of evidence (an unverifiable PID, one whose owner cannot be told) is none of them.
ORPHANS_ONLY = "orphans_only"
MATCH = "match"
EXCLUDE = "exclude"
PROTECTED = "protected"
OUTSIDE_GPUS = "gpus"


class Plan(t.NamedTuple):
    targets: t.List[Target]
    left_alone: t.Dict[int, str]  # holder pid -> why it is not signalled
    warnings: t.List[str]
    foreign: t.Dict[int, Verdict] = {}  # under orphans_only: holder pid -> the verdict that makes it someone else's
    on_purpose: t.Dict[int, str] = {}  # the holders of left_alone left alone by a rule of this run -> that rule


def is_cluster_daemon(spec: ReclaimSpec, info: t.Mapping[str, t.Any]) -> bool:
    return matches_any(spec.cluster_daemons, info["name"], info["cmdline"])


def climb(table: ProcessTable, pid: int, spec: ReclaimSpec, protected: t.Set[int]) -> t.Tuple[t.List[int], t.Optional[int]]:
    """The unbroken chain of launcher-shaped ancestors of ``pid`` that starts at its parent (nearest first), and
    the process that ended it (an ordinary, protected, excluded or cluster-daemon process; None when the
    chain's top has no parent in the table)."""
    chain: t.List[int] = []
    for parent in table.ancestors(pid):
        info = table.info[parent]
        if parent in protected or is_excluded(spec, info["name"], info["cmdline"]) or is_cluster_daemon(spec, info):
            return chain, parent
        if not matches_any(spec.launcher_patterns, info["name"], info["cmdline"]):
            return chain, parent
        chain.append(parent)
    return chain, None


def find_launcher(table: ProcessTable, pid: int, spec: ReclaimSpec, protected: t.Set[int]) -> t.Optional[int]:
    """The launcher of holder ``pid``: the highest process of the unbroken chain of launcher-shaped ancestors
    that starts at its parent; None when its parent is not one."""
    chain, _stop = climb(table, pid, spec, protected)
    return chain[-1] if chain else None


def _tree(table: ProcessTable, root: int, root_role: str, spec: ReclaimSpec,
          protected: t.Set[int]) -> t.Dict[int, t.Tuple[str, int, t.Dict[str, t.Any]]]:
    """pid -> (role, depth, info) for ``root`` and every descendant. An excluded or protected process is
    "kept" (never signalled, its own subtree not walked)."""
    tree = {root: (root_role, 0, table.info[root])}
    kept: t.Set[int] = set()
    for pid, depth, parent in table.descendants(root):
        info = table.info[pid]
        if parent in kept or pid in protected or is_excluded(spec, info["name"], info["cmdline"]):
            kept.add(pid)
            tree[pid] = ("kept", depth, info)
        else:
            tree[pid] = ("descendant", depth, info)
    return tree


def plan_targets(psutil: t.Any, spec: ReclaimSpec, holders: t.Mapping[int, t.Dict[str, t.Any]],
                 selected_gpus: t.Set[int], other_holders: t.Mapping[int, t.List[int]],
                 table: t.Optional[ProcessTable] = None, unverifiable: t.Optional[t.Mapping[int, str]] = None,
                 sid_of: GetSid = getsid) -> Plan:
    """Decide what to signal.

    ``holders``: visible holder pid -> its description (name, cmdline, username, create_time, gpus);
    ``other_holders``: pid -> GPUs it holds outside the selection. A tree (a launcher's, or a holder's own
    descendants) is taken only when every GPU holder inside it is itself a target; otherwise only the holder.
    ``unverifiable``: holder pid -> why the local process with that PID may not be the GPU process NVML lists
    (see _host/pid_trust.py); such a holder is left alone.
    With ``orphans_only``, a holder that passes ``match`` is taken only when it is the owner's or an orphan (see
    _reclaim/owner.py); another job's is left alone and returned in ``Plan.foreign``.
    """
    protected = protected_pids(psutil)
    left_alone: t.Dict[int, str] = {}
    chosen: t.Dict[int, t.Dict[str, t.Any]] = {}
    foreign: t.Dict[int, Verdict] = {}
    ownership = None
    if spec.orphans_only and holders:
        if table is None:
            table = ProcessTable(psutil)
        ownership = Ownership(table, spec, sid_of, lambda pids, address: connected_to(psutil, pids, address))
    on_purpose: t.Dict[int, str] = {}
    for pid, info in holders.items():
        builtin = always_excluded(info["name"], info["cmdline"])
        if unverifiable and pid in unverifiable:
            left_alone[pid] = unverifiable[pid]
        elif pid in protected:
            left_alone[pid], on_purpose[pid] = "protected: PID 1, this module or its ancestors (the Ansible connection)", PROTECTED
        elif pid in other_holders:
            left_alone[pid] = "also holds GPU %s, outside `gpus`" % ", ".join(str(g) for g in other_holders[pid])
            on_purpose[pid] = OUTSIDE_GPUS
        elif builtin is not None:
            left_alone[pid], on_purpose[pid] = builtin, EXCLUDE
        elif matches_any(spec.exclude, info["name"], info["cmdline"]):
            left_alone[pid], on_purpose[pid] = "matches `exclude`", EXCLUDE
        elif spec.match and not matches_any(spec.match, info["name"], info["cmdline"]):
            left_alone[pid], on_purpose[pid] = "does not match `match`", MATCH
        elif ownership is not None and pid not in ownership.table.info:
            left_alone[pid] = "not in the process table, so whose it is cannot be told (orphans_only)"
        else:
            verdict = None if ownership is None else ownership.judge(pid, *climb(ownership.table, pid, spec, protected))
            if verdict is not None and verdict.kind == FOREIGN:
                left_alone[pid], on_purpose[pid] = verdict.why, ORPHANS_ONLY
                foreign[pid] = verdict
            else:
                chosen[pid] = info

    if not spec.kill_tree:
        table = None
    elif table is None and chosen:
        table = ProcessTable(psutil)
    targets: t.Dict[int, Target] = {}
    warnings: t.List[str] = []
    for pid, info in sorted(chosen.items()):
        if pid in targets:
            continue
        tree = None
        if table is not None and pid in table.info:
            launcher = find_launcher(table, pid, spec, protected)
            if launcher is not None:
                tree = _tree(table, launcher, "launcher", spec, protected)
            elif not is_cluster_daemon(spec, table.info[pid]):
                tree = _tree(table, pid, "holder", spec, protected)
            if tree is not None:
                foreign_holders = sorted(p for p in tree if (p in holders or p in other_holders) and p not in chosen)
                if foreign_holders:
                    warnings.append(
                        "pid %d (%s): its tree also holds GPUs through pid %s, which this run may not end; "
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
    return Plan(ordered, left_alone, warnings, foreign, on_purpose)


class Descriptions:
    """What psutil says of each PID, described once: from the plan's process table (one scan of /proc, ``table``) while
    planning, else fresh. ``before``: what was described by the end of the plan; fresh() forgets the rest."""

    def __init__(self, psutil: t.Any) -> None:
        self.psutil = psutil
        self.table: t.Optional[ProcessTable] = None
        self.planning = True
        self.cache: t.Dict[int, t.Dict[str, t.Any]] = {}
        self.before: t.Dict[int, t.Dict[str, t.Any]] = {}

    def __call__(self, pid: int) -> t.Dict[str, t.Any]:
        if pid not in self.cache:
            row = self.table.info.get(pid) if self.table is not None and self.planning else None
            if row is None:
                self.cache[pid] = describe_process(self.psutil, pid)
            else:
                self.cache[pid] = {"name": row["name"], "cmdline": row["cmdline"], "username": row["username"],
                                   "state": row["status"], "ppid": row["ppid"], "create_time": row["create_time"], "visible": True}
        return self.cache[pid]

    def planned(self) -> None:
        """The plan is made: what is described from now on is described fresh, and what was is kept as ``before``."""
        self.planning = False
        self.before = dict(self.cache)

    def fresh(self) -> None:
        """Forget every description: a fresh reading means fresh process states too."""
        self.cache.clear()

    def state(self, pid: int) -> t.Optional[str]:
        """The state of ``pid`` as the plan's process table has it, else as described."""
        if self.table is not None and pid in self.table.info:
            return self.table.info[pid].get("status")
        return self(pid)["state"]


def gpu_holders(session: NvmlSession, readings: Readings, describe: t.Callable[[int], t.Dict[str, t.Any]]) -> t.Dict[int, t.Dict[str, t.Any]]:
    """The visible holders of ``readings`` (pid -> its description, with the selected GPUs it holds as ``gpus``) that NVML
    still lists after they were described. NVML gives no start time: a holder that exited between the NVML reading and
    psutil's look at its PID may have left that PID to an unrelated process."""
    holders: t.Dict[int, t.Dict[str, t.Any]] = {}
    for reading in readings.values():
        for holder in reading.holders:
            info = describe(holder.pid)
            if info["visible"]:
                holders.setdefault(holder.pid, dict(info, gpus=[]))["gpus"].append(reading.index)
    confirmed: t.Set[int] = set()
    for reading in readings.values():
        if reading.error is None:
            try:
                confirmed.update(holder.pid for holder in session.holders(reading.index))
            except NvmlError:
                pass  # the GPU stopped answering: the verification reports it
    return {pid: info for pid, info in holders.items() if pid in confirmed}


def outside_holders(session: NvmlSession, selected: t.Container[int]) -> t.Tuple[t.Dict[int, t.List[int]], t.List[str]]:
    """The holders of the GPUs outside ``selected`` (pid -> those GPUs), and a warning for each such GPU that could not be read."""
    others: t.Dict[int, t.List[int]] = {}
    unread: t.List[str] = []
    for index in range(session.count):
        if index in selected:
            continue
        try:
            for holder in session.holders(index):
                others.setdefault(holder.pid, []).append(index)
        except NvmlError as exc:
            unread.append("GPU %d (outside `gpus`) could not be read, so a launcher tree ended here may also hold it: %s" % (index, exc))
    return others, unread


def unverifiable(readings: Readings, holders: t.Mapping[int, t.Any], others: t.Mapping[int, t.List[int]],
                 describe: t.Callable[[int], t.Dict[str, t.Any]], table: t.Optional[ProcessTable]) -> t.Dict[int, str]:
    """Holders that may not be signalled on NVML's word alone (see _host/pid_trust.py): pid -> why."""
    if not holders:
        return {}
    missing = {h.pid for reading in readings.values() for h in reading.holders if not describe(h.pid)["visible"]}
    missing |= {pid for pid in others if not (table is not None and pid in table.info) and not describe(pid)["visible"]}
    trust = _pid_trust.assess(missing)
    return {pid: trust.reason(pid, holders[pid]["name"]) for pid in sorted(holders) if not trust.verified(pid)}


def process_groups(targets: t.Sequence[Target], protected: t.Iterable[int], getpgid: t.Callable[[int], t.Optional[int]]) -> t.Dict[int, int]:
    """The targets' process groups (a process the targets fork during the ladder shares one), each -> its first target
    (launchers first: a group's first target is the one a member of it came from); never a group of ours, nor 0 or 1."""
    ours = {getpgid(pid) for pid in protected if pid > 1}
    groups: t.Dict[int, int] = {}
    for target in targets:
        pgid = getpgid(target.pid)
        if pgid not in ours and pgid not in (None, 0, 1):
            groups.setdefault(t.cast(int, pgid), target.pid)
    return groups
