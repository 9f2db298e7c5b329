# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim's lineage watch: where a process started during the run stands to what the run ends.

A process that is not in the plan's process table started after it. Each one is sorted once (sort_new):

- END: a respawn this run ends: a child of a target or a member of a target's process group (with ``kill_tree``),
  or a child of a live parent of a target that the run may end (may_end_respawn).
- KEEP: the same lineage, but a rule of this run keeps it from ending it (the reason comes with it).
- DETACHED: started by the ended tree as it ended, and out of every proven lineage: a session and group of its own,
  its parent gone. Its parent now is an adopter of the targets' orphans (PID 1 or one of the targets' ancestors:
  the kernel gives an orphan to the nearest child subreaper above it, else to init) and it shares the cgroup of a
  target (a fork stays in its parent's cgroup); or its parent is such a process (a daemon's second fork). Never
  signalled (nothing proves it is ours once its parent is gone), it is watched: one that takes a selected GPU fails
  the run, naming it and the target whose exit came nearest its start (nearest_exit).
- UNRELATED: none of these; never looked at again.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host.process_table import ProcessTable, ScannedTable
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import trim_cmdline
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.ladder import Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.owner import GetSid, label
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import Target, is_cluster_daemon
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import ReclaimSpec, is_excluded, matches_any

# settle: auto. How long a live parent of an ended holder (a supervisor, a wrapper script, a service manager other than
# an adopter) gets, after the last change in the lineage, to fork a replacement before the GPUs count as verified free.
# A respawn shows as that fork long before its CUDA context holds memory; a respawn that comes later than this needs
# a fixed settle window (or stopping what respawns it first). The same window watches a process that the ended tree
# started as it ended and that left every proven lineage (a daemon: DETACHED) before it may count as one that holds
# nothing.
RESPAWN_WINDOW_S = 0.5
# the cgroups read before the first signal, at most (launchers first, in the plan's order): a read of /proc/PID/cgroup
# costs more than the rest of a target's watch, and a tree's processes share few cgroups. A target beyond them has
# an unknown cgroup, and an unknown cgroup matches any (what it leaves is watched, never ended)
CGROUP_READS = 32

END = "end"
KEEP = "keep"
DETACHED = "detached"
UNRELATED = "unrelated"

Rule = t.Callable[[int, t.Mapping[str, t.Any]], t.Optional[str]]


class Known(t.NamedTuple):
    """What the run knows of its lineage when it sorts new processes."""

    parents: t.Collection[int]  # live parents of targets that could respawn one (respawners())
    targets: t.Collection[int]  # every process the ladder has (plan targets and respawns found so far)
    pgids: t.Collection[int]  # the targets' process groups, as the plan read them
    detached: t.Collection[int]  # processes already sorted DETACHED
    adopters: t.Collection[int]  # PID 1 and every ancestor of a target (adopters())


class Sorted(t.NamedTuple):
    """``kind``: END, KEEP, DETACHED or UNRELATED; ``why``: KEEP's reason; ``parent``: the process of the lineage
    that forked it when its parent still is one (a target, a live parent of one or a DETACHED process), else None."""

    kind: str
    why: t.Optional[str]
    parent: t.Optional[int]


def adopters(ancestors: t.Callable[[int], t.Sequence[int]], targets: t.Iterable[int]) -> t.Set[int]:
    """PID 1 and every ancestor of a target: where the kernel may send a target's orphans."""
    found = {1}
    for pid in targets:
        found.update(ancestors(pid))
    return found


def sort_new(rows: t.Mapping[int, t.Mapping[str, t.Any]], known: Known, pgid_of: t.Callable[[int], t.Optional[int]],
             parent_rule: Rule, tree_rule: Rule, same_tree: t.Callable[[int], bool]) -> t.Dict[int, Sorted]:
    """Sort ``rows`` (pid -> a row with at least ``ppid``: processes started since the plan). ``parent_rule`` and
    ``tree_rule``: why this run may not end a child of a live parent, or of a target / a member of a target's group
    (None: it may). ``same_tree(pid)``: it shares the cgroup of a target (True when either cannot be read).
    A child of a process sorted in the same call is sorted after it (a respawn's own fork is the respawn's)."""
    done: t.Dict[int, Sorted] = {}
    ended = set(known.targets)
    detached = set(known.detached)
    pending = dict(rows)
    moved = True
    while pending and moved:
        moved = False
        for pid in sorted(pending):
            ppid = pending[pid].get("ppid")
            verdict: t.Optional[Sorted] = None
            if ppid in known.parents:
                why = parent_rule(pid, pending[pid])
                verdict = Sorted(END if why is None else KEEP, why, ppid)
            elif ppid in ended or pgid_of(pid) in known.pgids:
                why = tree_rule(pid, pending[pid])
                verdict = Sorted(END if why is None else KEEP, why, ppid if ppid in ended else None)
            elif ppid in detached:
                verdict = Sorted(DETACHED, None, ppid)
            elif ppid in known.adopters and same_tree(pid):
                verdict = Sorted(DETACHED, None, None)
            if verdict is None:
                continue
            done[pid] = verdict
            del pending[pid]
            moved = True
            if verdict.kind == END:
                ended.add(pid)
            elif verdict.kind == DETACHED:
                detached.add(pid)
    done.update((pid, Sorted(UNRELATED, None, None)) for pid in pending)
    return done


def nearest_exit(start: float, exits: t.Mapping[int, float]) -> t.Optional[int]:
    """The PID whose exit (``exits``: pid -> when, on the clock of ``start``) came nearest to ``start``; the lower
    PID on a tie; None without exits. A process the tree forked as it ended starts just before its forker's exit (a
    fork in a signal handler) or just after it (a daemon's second fork)."""
    if not exits:
        return None
    return min(exits, key=lambda pid: (abs(exits[pid] - start), pid))


def _boot_offset(psutil: t.Any, clock: t.Callable[[], float]) -> t.Optional[float]:
    """What to take from a process's create_time (psutil's: boot time + clock ticks since boot) to have its start on
    ``clock`` (time.monotonic: the boot-time clock without the time suspended, none during a run); None when unknown."""
    try:
        return float(psutil.boot_time()) + time.clock_gettime(getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)) - clock()
    except (AttributeError, OSError, TypeError, ValueError):
        return None


def is_running(psutil: t.Any, pid: int, create_time: t.Optional[float]) -> bool:
    """``pid`` is still the process that started at ``create_time``, and not a zombie."""
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - (create_time or 0.0)) < 0.05 and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def row_now(psutil: t.Any, table: ProcessTable, pid: int) -> t.Optional[t.Dict[str, t.Any]]:
    """name, cmdline, username, create_time, ppid and status of ``pid`` now, as the process table has them; None when gone."""
    if isinstance(table, ScannedTable) and table.direct:
        return table.read(pid)
    try:
        info = psutil.Process(pid).as_dict(attrs=["name", "cmdline", "username", "create_time", "ppid", "status"], ad_value=None)
    except psutil.NoSuchProcess:
        return None
    trim_cmdline(info["cmdline"])
    return info


def respawners(table: t.Optional[ProcessTable], targets: t.Sequence[Target], protected: t.Container[int],
               spec: ReclaimSpec) -> t.Tuple[t.Dict[int, t.Dict[str, t.Any]], t.Dict[int, t.List[int]]]:
    """The parents (in the plan's process table) of targets that are not targets themselves and could respawn one:
    not PID 0 or 1, not protected (this module and its ancestors: the Ansible connection), not an adopter
    (``subreapers``: init systems and service managers adopt orphans; a holder they hold is an orphan or a service
    whose restart belongs to the manager). A shell, a wrapper script, a supervisor or a cluster daemon is one.
    With them, each one's selected GPUs that its targets held."""
    if table is None:
        return {}, {}
    pids = {tg.pid for tg in targets}
    parents: t.Dict[int, t.Dict[str, t.Any]] = {}
    for target in targets:
        ppid = (table.info.get(target.pid) or {}).get("ppid")
        if ppid is None or ppid <= 1 or ppid in pids or ppid in protected or ppid in parents:
            continue
        row = table.info.get(ppid)
        if row is None or row.get("status") == "zombie" or matches_any(spec.subreapers, row["name"], row["cmdline"]):
            continue
        parents[ppid] = row
    gpus: t.Dict[int, t.List[int]] = {}
    for target in targets:
        ppid = (table.info.get(target.pid) or {}).get("ppid")
        if ppid in parents:
            gpus[ppid] = sorted(set(gpus.get(ppid, [])) | set(target.gpus))
    return parents, gpus


def may_end_respawn(spec: ReclaimSpec, sid_of: GetSid, parent: t.Mapping[str, t.Any], pid: int, info: t.Mapping[str, t.Any]) -> t.Optional[str]:
    """Why this run may not end a process forked by a live parent of a target; None when it may: it passes
    ``match`` (when given, on its name or command line as they are now), under ``orphans_only`` it is a member
    of the owner's session, and its parent is not a cluster daemon (whose new children are the cluster's)."""
    if is_cluster_daemon(spec, parent):
        return "its parent is a cluster daemon (cluster_daemons)"
    if spec.match and not matches_any(spec.match, info["name"], info["cmdline"]):
        return "does not match `match`"
    if spec.orphans_only and (spec.owner is None or sid_of(pid) != spec.owner.pid):
        return "its parent is alive and is not the owner: someone else's job (orphans_only)"
    return None


def excluded_why(spec: ReclaimSpec, info: t.Mapping[str, t.Any]) -> t.Optional[str]:
    return "matches `exclude`, or is a driver helper or a container runtime's own process" if is_excluded(
        spec, info["name"], info["cmdline"]) else None


def respawn_text(ppid: int, parent: t.Optional[t.Mapping[str, t.Any]], why: t.Optional[str]) -> str:
    return "forked by PID %s (%s) in the lineage of what this run ended, after the ladder began: a respawn; not ended (%s): " \
        "stop what respawns it" % (ppid, label(parent), why)


def detached_text(pid: int, forker: t.Optional[int], offset: t.Optional[float], top: int, who: str) -> str:
    """Where a DETACHED process came from (``forker``, ``offset`` and ``top`` as Watch.forker() has them; ``who``: the
    forker as an operator knows it), and what to do."""
    via = "" if top == pid else "forked by PID %d, which " % top
    if forker is None:
        how = "%sstarted while what this run ended was ending, with its parent gone, in the cgroup of a target" % via
    elif offset is None:
        how = "forked by %s in the lineage of what this run ended, then out of it" % who
    else:
        how = "%sstarted %.3f s %s %s ended, with its parent gone, in its cgroup: most likely forked by it as it ended" % (
            via, abs(offset), "before" if offset <= 0 else "after", who)
    return "%s: a respawn that left the tree (a daemon); not ended (with its parent gone nothing proves it is the tree's): " \
        "stop what respawns it, or end it" % how


class Watch:
    """The lineage of what one run ends (see above), from its plan to its verification: the live parents of targets that
    could respawn one (``parents``: pid -> plan-time row; ``parent_gpus``: the selected GPUs their ended children held),
    the new processes of that lineage this run does not end (``candidates``: pid -> row, why, when first seen), what
    the ended tree left out of every proven lineage as it ended (``detached``: pid -> row, its parent if proven, cgroup,
    when first seen) and the processes started since the plan that are none of these (never looked at again). Before its
    first signal, each target's cgroup and where its orphans go; then when the ladder saw each target gone (on ``clock``)."""

    def __init__(self, psutil: t.Any, spec: ReclaimSpec, table: t.Optional[ProcessTable], protected: t.Set[int],
                 clock: t.Callable[[], float], getpgid: t.Callable[[int], t.Optional[int]], sid_of: GetSid,
                 cgroup_of: t.Callable[[int], t.Optional[str]], describe: t.Callable[[int], t.Dict[str, t.Any]]) -> None:
        self.psutil, self.spec, self.table, self.protected, self.clock = psutil, spec, table, protected, clock
        self.getpgid, self.sid_of, self.cgroup_of, self.describe = getpgid, sid_of, cgroup_of, describe
        self.parents: t.Dict[int, t.Dict[str, t.Any]] = {}
        self.parent_gpus: t.Dict[int, t.List[int]] = {}
        self.candidates: t.Dict[int, t.Dict[str, t.Any]] = {}
        self.detached: t.Dict[int, t.Dict[str, t.Any]] = {}
        self.group_of: t.Dict[int, int] = {}  # a targets' process group -> its first target
        self._unrelated: t.Set[int] = set()
        self._cgroups: t.Dict[int, t.Optional[str]] = {}
        self._adopters: t.Set[int] = {1}
        self._new_cgroups: t.Dict[int, t.Optional[str]] = {}
        self._origin: t.Dict[int, int] = {}  # a respawn -> the target (or live parent of one) it came from
        self._targets: t.Dict[int, Target] = {}
        self._exit_at: t.Dict[int, float] = {}
        self._offset: t.Optional[float] = None

    def follow(self, targets: t.Sequence[Target], group_of: t.Dict[int, int]) -> None:
        """The plan's targets (launchers first) and their process groups (plan.process_groups)."""
        self.group_of = group_of
        self.parents, self.parent_gpus = respawners(self.table, targets, self.protected, self.spec)

    def watch_tree(self, targets: t.Sequence[Target]) -> None:
        """Before the first signal: each target's cgroup (at most CGROUP_READS in all), and the adopters of its orphans
        (PID 1 and its ancestors in the plan's table: a respawn found later has none there)."""
        self._targets.update((tg.pid, tg) for tg in targets)
        for target in targets:
            self._cgroups[target.pid] = self.cgroup_of(target.pid) if len(self._cgroups) < CGROUP_READS else None
        if self.table is not None:
            self._adopters |= adopters(self.table.ancestors, [tg.pid for tg in targets])

    def note_exits(self, began: float, outcomes: t.Sequence[Outcome]) -> None:
        """When each target was seen gone, on ``clock`` (``began``: the ladder's start)."""
        for outcome in outcomes:
            if outcome.ended is not None and outcome.seconds is not None:
                self._exit_at.setdefault(outcome.target.pid, began + outcome.seconds)

    def discover(self, known: t.Set[int]) -> t.List[Target]:
        """Processes started since the plan's process table in the lineage of what is ended, to end now (a respawn):
        a child of a target or a member of a target's process group (with ``kill_tree``), or a child of a live
        parent of a target (respawners()) that this run may end (may_end_respawn()). The others of that lineage
        are kept in ``candidates`` for the result and the verification; what the ended tree left out of every
        proven lineage as it ended in ``detached``."""
        if self.table is None:
            return []
        rows = self._new_rows(known)
        if not rows:
            return []
        now = self.clock()
        lineage = Known(self.parents, known, set(self.group_of), self.detached, self._adopters)
        found: t.List[Target] = []
        for pid, verdict in sort_new(rows, lineage, self.getpgid, self._parent_rule, self._tree_rule, self._same_tree).items():
            target = self._take(pid, verdict, rows[pid], now)
            if target is not None:
                found.append(target)
        return found

    def _new_rows(self, known: t.Set[int]) -> t.Dict[int, t.Dict[str, t.Any]]:
        table = t.cast(ProcessTable, self.table)
        rows: t.Dict[int, t.Dict[str, t.Any]] = {}
        for pid in self.psutil.pids():
            if pid in known or pid in self.protected or pid in table.info or pid in self._unrelated or pid in self.detached:
                continue
            info = row_now(self.psutil, table, pid)
            if info is None:
                self.candidates.pop(pid, None)
                continue
            rows[pid] = info
        return rows

    def _take(self, pid: int, verdict: Sorted, info: t.Dict[str, t.Any], now: float) -> t.Optional[Target]:
        """Keep what sort_new() says of one new process; the target to end now when it is one."""
        if verdict.kind == UNRELATED:
            self._unrelated.add(pid)
        elif verdict.kind == DETACHED:
            self.candidates.pop(pid, None)
            self.detached[pid] = {"info": info, "parent": verdict.parent, "seen": now, "cgroup": self._new_cgroups.get(pid)}
        elif verdict.kind == END:
            self.candidates.pop(pid, None)
            target = Target(pid, info["create_time"], info["name"], info["cmdline"], info["username"], "respawned", 1, [])
            origin = verdict.parent if verdict.parent is not None else self.group_of.get(t.cast(int, self.getpgid(pid)))
            if origin is not None:
                self._origin[pid] = origin
            self.watch_tree([target])
            return target
        elif pid not in self.candidates:
            # looked at again at every scan: a fork that has not yet exec'd its program may match later
            self.candidates[pid] = {"info": info, "why": verdict.why, "seen": now}
        return None

    def _parent_rule(self, pid: int, info: t.Mapping[str, t.Any]) -> t.Optional[str]:
        return may_end_respawn(self.spec, self.sid_of, self.parents[info["ppid"]], pid, info) or excluded_why(self.spec, info)

    def _tree_rule(self, _pid: int, info: t.Mapping[str, t.Any]) -> t.Optional[str]:
        return ("kill_tree is false" if not self.spec.kill_tree else None) or excluded_why(self.spec, info)

    def _same_tree(self, pid: int) -> bool:
        """``pid`` shares the cgroup of a target (or either cannot be read)."""
        cgroup = self._new_cgroups[pid] = self.cgroup_of(pid)
        return cgroup is None or any(known in (None, cgroup) for known in self._cgroups.values())

    def parent_alive(self, pid: int) -> bool:
        return is_running(self.psutil, pid, self.parents[pid].get("create_time"))

    def running(self, pid: int, create_time: t.Optional[float]) -> bool:
        return is_running(self.psutil, pid, create_time)

    def running_detached(self) -> t.List[int]:
        return [pid for pid, entry in sorted(self.detached.items()) if self.running(pid, entry["info"]["create_time"])]

    def respawn_text(self, pid: int) -> str:
        candidate = self.candidates[pid]
        ppid = candidate["info"]["ppid"]
        return respawn_text(ppid, self.parents.get(ppid) or self.describe(ppid), candidate["why"])

    def detached_text(self, pid: int) -> str:
        forker, offset, top = self.forker(pid)
        who = ""
        if forker is not None:
            row = self._targets.get(forker)
            who = "PID %d (%s)" % (forker, label(row._asdict() if row is not None else self.parents.get(forker) or self.describe(forker)))
        return detached_text(pid, forker, offset, top, who)

    def left_alone(self) -> t.Dict[int, str]:
        """Why each process of the lineage that this run does not end is left alone."""
        texts = {pid: self.respawn_text(pid) for pid in self.candidates}
        texts.update((pid, self.detached_text(pid)) for pid in self.detached)
        return texts

    def forker(self, pid: int) -> t.Tuple[t.Optional[int], t.Optional[float], int]:
        """Where a DETACHED process came from: (the process of the ended tree, how far the start of the orphan at the
        top of its chain came from that process's exit (None: proven all the way), that orphan). Up the proven
        parents first; from an orphan, the target of its cgroup whose exit came nearest its start (nearest_exit)."""
        while pid in self.detached and self.detached[pid]["parent"] is not None:
            pid = self.detached[pid]["parent"]
        if pid not in self.detached:
            return self._origin_of(pid), None, pid
        entry = self.detached[pid]
        if self._offset is None:
            self._offset = _boot_offset(self.psutil, self.clock)
        if self._offset is None or entry["info"]["create_time"] is None:
            return None, None, pid
        start = entry["info"]["create_time"] - self._offset
        exits = {target: at for target, at in self._exit_at.items() if entry["cgroup"] is None or self._cgroups.get(target) in (None, entry["cgroup"])}
        near = nearest_exit(start, exits)
        return (None, None, pid) if near is None else (self._origin_of(near), start - exits[near], pid)

    def _origin_of(self, pid: int) -> int:
        """The process of the plan (or a live parent of a target) that a respawn found in the lineage came from."""
        seen = set()
        while pid in self._origin and pid not in seen:
            seen.add(pid)
            pid = self._origin[pid]
        return pid

    def running_respawns(self, listed: t.Container[int], now: float) -> t.List[t.Tuple[t.Optional[t.List[int]], str, bool]]:
        """A respawn this run does not end and that still runs keeps the GPUs of its predecessors from counting as free,
        memory or not (its CUDA context may come a moment later): waitable for RESPAWN_WINDOW_S after it was seen (it
        may exit, or exec a program that ``match`` takes), then a failure. One that holds memory (``listed``) is judged
        as a holder. A cluster daemon's new child is only reported while it holds nothing (a node keeps a pool of idle
        workers). Each as (the GPUs its parent's ended children held, None when unknown; what it is; waitable)."""
        found = []
        for pid, candidate in list(self.candidates.items()):
            parent = self.parents.get(candidate["info"]["ppid"])
            if pid in listed or (parent is not None and is_cluster_daemon(self.spec, parent)):
                continue
            if not self.running(pid, candidate["info"]["create_time"]):
                continue
            text = "pid %d (%s) %s; it holds no GPU memory yet" % (pid, candidate["info"]["name"], self.respawn_text(pid))
            found.append((self.parent_gpus.get(candidate["info"]["ppid"]), text, now < candidate["seen"] + RESPAWN_WINDOW_S))
        return found

    def waits(self, now: float, quiet_since: float) -> t.List[float]:
        """settle: auto. Seconds the lineage still needs watching: RESPAWN_WINDOW_S after a DETACHED process was first seen,
        while it runs; while a parent that could respawn a holder is alive, RESPAWN_WINDOW_S after the last change in the
        lineage (``quiet_since``: the ladder's end, or a respawn's)."""
        waits = [RESPAWN_WINDOW_S - (now - entry["seen"]) for pid, entry in self.detached.items()
                 if now - entry["seen"] < RESPAWN_WINDOW_S and self.running(pid, entry["info"]["create_time"])]
        if any(self.parent_alive(pid) for pid in self.parents):
            waits.append(RESPAWN_WINDOW_S - (now - max([quiet_since] + [c["seen"] for c in self.candidates.values()])))
        return waits

    def report(self, waited: float) -> t.Dict[str, t.Any]:
        """The result's ``respawn_watch`` (``waited``: how long the GPUs read free before they counted as verified)."""
        parents = [{"pid": pid, "name": row["name"], "cmdline": row["cmdline"], "alive": self.parent_alive(pid)}
                   for pid, row in sorted(self.parents.items())]
        candidates = []
        for pid, candidate in sorted(self.candidates.items()):
            info = candidate["info"]
            candidates.append({"pid": pid, "name": info["name"], "cmdline": info["cmdline"], "parent": info["ppid"],
                               "running": self.running(pid, info["create_time"]), "reason": self.respawn_text(pid),
                               "forked_by": info["ppid"], "detached": False})
        for pid in self.running_detached():
            info = self.detached[pid]["info"]
            candidates.append({"pid": pid, "name": info["name"], "cmdline": info["cmdline"], "parent": info["ppid"], "running": True,
                               "reason": self.detached_text(pid), "forked_by": self.forker(pid)[0], "detached": True})
        return {"settle": self.spec.settle, "parents": parents, "candidates": candidates, "waited_s": waited}
