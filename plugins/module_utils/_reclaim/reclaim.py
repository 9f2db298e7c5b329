# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim: read every holder, end them (launchers first), then prove the GPUs free with fresh NVML readings.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import os
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._host import pid_trust as _pid_trust
from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import KUBERNETES, container_of as _container_of, starts_again
from ansible_collections.gpuops.fleet.plugins.module_utils._host.devices import device_holders
from ansible_collections.gpuops.fleet.plugins.module_utils._host.listener import read_cgroup
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim import containers as _containers, evidence
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import NvmlSession, renew
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.errors import NvmlError
from ansible_collections.gpuops.fleet.plugins.module_utils._host.process_table import ProcessTable, ScannedTable, protected_pids
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import Plan, Target, plan_targets
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import describe_process, trim_cmdline
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.owner import GetSid, Verdict, getsid, label
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import AUTO, CONTAINER_RESTART_DISABLE, ReclaimSpec, is_excluded, matches_any
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.verify import (
    Problem,
    Reading,
    add_mib,
    drop_exited,
    judge,
    left_alone_on,
    predict,
    read_gpu,
)
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.selection import resolve_gpus
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.ladder import Outcome, run_ladder
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.lineage import DETACHED, END, UNRELATED, Known, adopters, nearest_exit, sort_new

VERIFY_POLL_S = 0.02
# settle: auto. How long a live parent of an ended holder (a supervisor, a wrapper script, a service manager other than
# an adopter) gets, after the last change in the lineage, to fork a replacement before the GPUs count as verified free.
# A respawn shows as that fork long before its CUDA context holds memory; a respawn that comes later than this needs
# a fixed settle window (or stopping what respawns it first). The same window watches a process that the ended tree
# started as it ended and that left every proven lineage (a daemon: see lineage.py, DETACHED) before it may count as
# one that holds nothing.
RESPAWN_WINDOW_S = 0.5
# the cgroups read before the first signal, at most (launchers first, in the plan's order): a read of /proc/PID/cgroup
# costs more than the rest of a target's watch, and a tree's processes share few cgroups. A target beyond them has
# an unknown cgroup, and an unknown cgroup matches any (what it leaves is watched, never ended)
CGROUP_READS = 32


def _boot_offset(psutil: t.Any, clock: t.Callable[[], float]) -> t.Optional[float]:
    """What to take from a process's create_time (psutil's: boot time + clock ticks since boot) to have its start on
    ``clock`` (time.monotonic: the boot-time clock without the time suspended, none during a run); None when unknown."""
    try:
        return float(psutil.boot_time()) + time.clock_gettime(getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)) - clock()
    except (AttributeError, OSError, TypeError, ValueError):
        return None


def _getpgid(pid: int) -> t.Optional[int]:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class Reclaim:
    """One reclaim run. ``run()`` returns the module result, with the warnings as ``warnings_list``."""

    def __init__(self, session: NvmlSession, psutil: t.Any, spec: ReclaimSpec, check_mode: bool,
                 clock: t.Callable[[], float] = time.monotonic, getpgid: t.Optional[t.Callable[[int], t.Optional[int]]] = None,
                 sid_of: t.Optional[GetSid] = None, cgroup_of: t.Optional[t.Callable[[int], t.Optional[str]]] = None,
                 runtimes: t.Optional[_containers.Runtimes] = None, container_of: t.Optional[_containers.ContainerOf] = None) -> None:
        self.session = session
        self.psutil = psutil
        self.spec = spec
        self.check_mode = check_mode
        self.clock = clock
        self.getpgid = getpgid or _getpgid
        self.sid_of = sid_of or getsid
        self.cgroup_of = cgroup_of or read_cgroup
        # containers: the runtimes' command lines, the container of a host PID (from its cgroup), and the containers that
        # run targets of the plan (set apart from what is signalled: see _reclaim/containers.py)
        self.runtimes = runtimes or _containers.Runtimes()
        self.container_of = container_of or _container_of
        self._held: t.List[_containers.HeldContainer] = []
        self._stopped_at: t.Optional[float] = None  # when the containers' stops ended (on ``clock``)
        self.start = clock()
        self._described: t.Dict[int, t.Dict[str, t.Any]] = {}
        self._before_described: t.Dict[int, t.Dict[str, t.Any]] = {}
        self._table: t.Optional[ProcessTable] = None
        self._protected: t.Set[int] = set()
        self._pgids: t.Set[int] = set()
        self._planning = True
        self._foreign: t.List[t.Dict[str, t.Any]] = []
        self._holder_gpus: t.Dict[int, t.List[int]] = {}
        self._on_purpose: t.Dict[int, t.Optional[float]] = {}  # the holders the plan left alone on purpose -> start time
        # the lineage of what is ended: live parents of targets that could respawn one (pid -> plan-time row), new
        # processes forked by them that this run does not end (pid -> what the result says), and processes started
        # since the plan that are none of these (never looked at again)
        self._parents: t.Dict[int, t.Dict[str, t.Any]] = {}
        self._parent_gpus: t.Dict[int, t.List[int]] = {}  # parent -> the selected GPUs its ended children held
        self._candidates: t.Dict[int, t.Dict[str, t.Any]] = {}
        self._unrelated: t.Set[int] = set()
        # what the ended tree left as it ended (see lineage.py): each target's cgroup (read before its first signal) and
        # where its orphans go, the processes sorted DETACHED (pid -> row, its parent if proven, cgroup, when first
        # seen), the target each respawn came from, and when the ladder saw each target gone (on ``clock``)
        self._cgroups: t.Dict[int, t.Optional[str]] = {}
        self._adopters: t.Set[int] = {1}
        self._detached: t.Dict[int, t.Dict[str, t.Any]] = {}
        self._new_cgroups: t.Dict[int, t.Optional[str]] = {}
        self._origin: t.Dict[int, int] = {}
        self._group_of: t.Dict[int, int] = {}  # a targets' process group -> its first target
        self._targets: t.Dict[int, Target] = {}
        self._exit_at: t.Dict[int, float] = {}
        self._offset: t.Optional[float] = None
        self._waited = 0.0
        self._fresh_at: t.Optional[float] = None  # when the verification's own NVML session was opened (seconds in)
        self._uuids: t.Dict[int, str] = {}  # index -> UUID, as that session read it

    def describe(self, pid: int) -> t.Dict[str, t.Any]:
        """What psutil says of a PID: from the plan's process table (one scan of /proc) while planning, else fresh."""
        if pid not in self._described:
            row = self._table.info.get(pid) if self._table is not None and self._planning else None
            if row is None:
                self._described[pid] = describe_process(self.psutil, pid)
            else:
                self._described[pid] = {"name": row["name"], "cmdline": row["cmdline"], "username": row["username"],
                                        "state": row["status"], "ppid": row["ppid"], "create_time": row["create_time"], "visible": True}
        return self._described[pid]

    def excluded(self, info: t.Dict[str, t.Any]) -> bool:
        return is_excluded(self.spec, info["name"], info["cmdline"])

    def read(self, index: int, uuid: t.Optional[str] = None) -> Reading:
        return read_gpu(self.session, index, uuid, self.describe)

    def run(self) -> t.Dict[str, t.Any]:
        indices = resolve_gpus(self.spec.gpus, self.session.count, self.session.inventory)
        raw = {index: read_gpu(self.session, index) for index in indices}
        if any(reading.holders for reading in raw.values()):
            self._table = ScannedTable(self.psutil)  # after the NVML reading: every holder listed was started before it
        before = {index: drop_exited(self.session, raw[index], self.describe) for index in indices}
        plan = self._plan(before, set(indices))
        self._foreign = [self._foreign_entry(pid, verdict) for pid, verdict in sorted(plan.foreign.items())]
        self._planning = False
        self._before_described = dict(self._described)
        self._on_purpose = {pid: self._before_described[pid]["create_time"] for pid in plan.on_purpose if pid in self._before_described}
        if self._held:
            _containers.judge(self._held, self.spec, self.runtimes)
        if self.check_mode:
            return self._check_result(before, plan)
        if any(container.refused for container in self._held):
            return self._refused_result(before, plan)
        if self._held:
            self._stop_containers()
        self._watch_tree(plan.targets)
        began = self.clock()
        outcomes = run_ladder(self.psutil, plan.targets, self.spec.signals, self.spec.grace, clock=self.clock,
                              deadline=self.start + self.spec.timeout, discover=self._discover)
        self._note_exits(began, outcomes)
        after, problems, outcomes = self._verify(before, plan, outcomes)
        return self._result(before, after, plan, outcomes, list(problems) + self._container_problems(after))

    def _plan(self, before: t.Mapping[int, Reading], selected: t.Set[int]) -> Plan:
        holders: t.Dict[int, t.Dict[str, t.Any]] = {}
        for reading in before.values():
            for holder in reading.holders:
                info = self.describe(holder.pid)
                if info["visible"]:
                    holders.setdefault(holder.pid, dict(info, gpus=[]))["gpus"].append(reading.index)
        # NVML gives no start time: a holder that exited between the NVML reading and psutil's look at its PID may
        # have left that PID to an unrelated process. Only PIDs NVML still lists after they were described are targets.
        confirmed: t.Set[int] = set()
        for reading in before.values():
            if reading.error is None:
                try:
                    confirmed.update(holder.pid for holder in self.session.holders(reading.index))
                except NvmlError:
                    pass  # the GPU stopped answering: the verification reports it
        holders = {pid: info for pid, info in holders.items() if pid in confirmed}
        self._holder_gpus = {pid: list(info["gpus"]) for pid, info in holders.items()}
        others: t.Dict[int, t.List[int]] = {}
        unread: t.List[str] = []
        for index in range(self.session.count):
            if index in selected:
                continue
            try:
                for holder in self.session.holders(index):
                    others.setdefault(holder.pid, []).append(index)
            except NvmlError as exc:
                unread.append("GPU %d (outside `gpus`) could not be read, so a launcher tree ended here may also hold it: %s" % (index, exc))
        unverifiable = self._unverifiable(before, holders, others)
        self._protected = protected_pids(self.psutil)
        plan = plan_targets(self.psutil, self.spec, holders, selected, others, self._table, unverifiable, self.sid_of)
        plan.warnings.extend(unread)
        # a target that runs in a container is never signalled: its container is stopped through its runtime, or refused
        host_targets, self._held = _containers.set_apart(plan.targets, self.container_of, self.container_of(os.getpid()))
        if self.check_mode and self.spec.managed_containers:
            # the caller's own container, which the caller stops itself before the real run: a check run counts its
            # processes as that stop's; a real run refuses it or stops it through its runtime like any other
            mine = [held for held in self._held if held.id.startswith(tuple(self.spec.managed_containers))]
            host_targets += [target for held in mine for target in held.targets]
            self._held = [held for held in self._held if held not in mine]
        plan = plan._replace(targets=host_targets)
        # a process the targets fork during the ladder shares their process group (unless it is one of ours)
        ours = {self.getpgid(pid) for pid in self._protected if pid > 1}
        for target in plan.targets:  # launchers first: a group's first target is the one a member of it came from
            pgid = self.getpgid(target.pid)
            if pgid not in ours and pgid not in (None, 0, 1):
                self._group_of.setdefault(t.cast(int, pgid), target.pid)
        self._pgids = set(self._group_of)
        self._parents = self._respawners(plan.targets)
        return plan

    def _respawners(self, targets: t.Sequence[Target]) -> t.Dict[int, t.Dict[str, t.Any]]:
        """The parents (in the plan's process table) of targets that are not targets themselves and could respawn one:
        not PID 0 or 1, not protected (this module and its ancestors: the Ansible connection), not an adopter
        (``subreapers``: init systems and service managers adopt orphans; a holder they hold is an orphan or a service
        whose restart belongs to the manager). A shell, a wrapper script, a supervisor or a cluster daemon is one."""
        if self._table is None:
            return {}
        pids = {tg.pid for tg in targets}
        parents: t.Dict[int, t.Dict[str, t.Any]] = {}
        for target in targets:
            ppid = (self._table.info.get(target.pid) or {}).get("ppid")
            if ppid is None or ppid <= 1 or ppid in pids or ppid in self._protected or ppid in parents:
                continue
            row = self._table.info.get(ppid)
            if row is None or row.get("status") == "zombie" or matches_any(self.spec.subreapers, row["name"], row["cmdline"]):
                continue
            parents[ppid] = row
        for target in targets:
            ppid = (self._table.info.get(target.pid) or {}).get("ppid")
            if ppid in parents:
                self._parent_gpus[ppid] = sorted(set(self._parent_gpus.get(ppid, [])) | set(target.gpus))
        return parents

    def _parent_alive(self, pid: int) -> bool:
        row = self._parents[pid]
        try:
            proc = self.psutil.Process(pid)
            return abs(proc.create_time() - (row.get("create_time") or 0.0)) < 0.05 and proc.status() != self.psutil.STATUS_ZOMBIE
        except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
            return False

    def _foreign_entry(self, pid: int, verdict: Verdict) -> t.Dict[str, t.Any]:
        """A holder left alone as someone else's job (orphans_only): what the caller needs to name it."""
        info = self.describe(pid)
        gpus = sorted(self._holder_gpus.get(pid, []))
        parent = None
        if verdict.parent is not None:
            pinfo = self.describe(verdict.parent)
            parent = {"pid": verdict.parent, "name": pinfo["name"], "cmdline": pinfo["cmdline"], "username": pinfo["username"]}
        box = self._container_fact(pid)
        inside = ""
        if box is not None:
            inside = " in the %s container %s" % (box["runtime"], box.get("name") or box["id"][:_containers.SHORT_ID])
            inside += " of pod %s" % box["pod_uid"] if box.get("pod_uid") else ""
        return {
            "pid": pid, "name": info["name"], "cmdline": info["cmdline"], "username": info["username"], "gpus": gpus,
            "parent": parent, "launcher": verdict.top if verdict.top != pid else None, "container": box,
            "reason": "PID %d %s on GPU %s%s belongs to live PID %s (%s), not to this server: not ended" % (
                pid, info["name"] or "?", ", ".join(str(g) for g in gpus) or "?", inside, verdict.parent, label(parent)),
        }

    def _unverifiable(self, before: t.Mapping[int, Reading], holders: t.Mapping[int, t.Any],
                      others: t.Mapping[int, t.List[int]]) -> t.Dict[int, str]:
        """Holders that may not be signalled on NVML's word alone (see _host/pid_trust.py): pid -> why."""
        if not holders:
            return {}
        missing = {h.pid for reading in before.values() for h in reading.holders if not self.describe(h.pid)["visible"]}
        missing |= {pid for pid in others if not (self._table is not None and pid in self._table.info) and not self.describe(pid)["visible"]}
        trust = _pid_trust.assess(missing)
        return {pid: trust.reason(pid, holders[pid]["name"]) for pid in sorted(holders) if not trust.verified(pid)}

    def _watch_tree(self, targets: t.Sequence[Target]) -> None:
        """Before the first signal: each target's cgroup (at most CGROUP_READS in all), and the adopters of its orphans
        (lineage.py): PID 1 and its ancestors in the plan's table (a respawn found later has none there)."""
        self._targets.update((tg.pid, tg) for tg in targets)
        for target in targets:
            self._cgroups[target.pid] = self.cgroup_of(target.pid) if len(self._cgroups) < CGROUP_READS else None
        if self._table is not None:
            self._adopters |= adopters(self._table.ancestors, [tg.pid for tg in targets])

    def _note_exits(self, began: float, outcomes: t.Sequence[Outcome]) -> None:
        """When each target was seen gone, on ``clock`` (``began``: the ladder's start)."""
        for outcome in outcomes:
            if outcome.ended is not None and outcome.seconds is not None:
                self._exit_at.setdefault(outcome.target.pid, began + outcome.seconds)

    def _discover(self, known: t.Set[int]) -> t.List[Target]:
        """Processes started since the plan's process table in the lineage of what is ended, to end now (a respawn):
        a child of a target or a member of a target's process group (with ``kill_tree``), or a child of a live
        parent of a target (see _respawners) that this run may end (_may_end_respawn). The others of that lineage
        are kept in ``_candidates`` for the result and the verification; what the ended tree left out of every
        proven lineage as it ended in ``_detached`` (see lineage.py)."""
        if self._table is None:
            return []
        rows: t.Dict[int, t.Dict[str, t.Any]] = {}
        for pid in self.psutil.pids():
            if pid in known or pid in self._protected or pid in self._table.info or pid in self._unrelated or pid in self._detached:
                continue
            info = self._row_now(pid)
            if info is None:
                self._candidates.pop(pid, None)
                continue
            rows[pid] = info
        if not rows:
            return []
        now = self.clock()
        lineage = Known(self._parents, known, self._pgids, self._detached, self._adopters)
        found: t.List[Target] = []
        for pid, verdict in sort_new(rows, lineage, self.getpgid, self._parent_rule, self._tree_rule, self._same_tree).items():
            info = rows[pid]
            if verdict.kind == UNRELATED:
                self._unrelated.add(pid)
            elif verdict.kind == DETACHED:
                self._candidates.pop(pid, None)
                self._detached[pid] = {"info": info, "parent": verdict.parent, "seen": now, "cgroup": self._new_cgroups.get(pid)}
            elif verdict.kind == END:
                self._candidates.pop(pid, None)
                target = Target(pid, info["create_time"], info["name"], info["cmdline"], info["username"], "respawned", 1, [])
                origin = verdict.parent if verdict.parent is not None else self._group_of.get(t.cast(int, self.getpgid(pid)))
                if origin is not None:
                    self._origin[pid] = origin
                self._watch_tree([target])
                found.append(target)
            elif pid not in self._candidates:
                # looked at again at every scan: a fork that has not yet exec'd its program may match later
                self._candidates[pid] = {"info": info, "why": verdict.why, "seen": now}
        return found

    def _parent_rule(self, pid: int, info: t.Mapping[str, t.Any]) -> t.Optional[str]:
        return self._may_end_respawn(pid, info) or self._excluded_why(info)

    def _tree_rule(self, _pid: int, info: t.Mapping[str, t.Any]) -> t.Optional[str]:
        return ("kill_tree is false" if not self.spec.kill_tree else None) or self._excluded_why(info)

    def _excluded_why(self, info: t.Mapping[str, t.Any]) -> t.Optional[str]:
        return "matches `exclude`, or is a driver helper or a container runtime's own process" if is_excluded(
            self.spec, info["name"], info["cmdline"]) else None

    def _same_tree(self, pid: int) -> bool:
        """``pid`` shares the cgroup of a target (or either cannot be read)."""
        cgroup = self._new_cgroups[pid] = self.cgroup_of(pid)
        return cgroup is None or any(known in (None, cgroup) for known in self._cgroups.values())

    def _row_now(self, pid: int) -> t.Optional[t.Dict[str, t.Any]]:
        """name, cmdline, username, create_time, ppid and status of ``pid`` now, as the process table has them; None when gone."""
        if isinstance(self._table, ScannedTable) and self._table.direct:
            return self._table.read(pid)
        try:
            info = self.psutil.Process(pid).as_dict(attrs=["name", "cmdline", "username", "create_time", "ppid", "status"], ad_value=None)
        except self.psutil.NoSuchProcess:
            return None
        trim_cmdline(info["cmdline"])
        return info

    def _may_end_respawn(self, pid: int, info: t.Mapping[str, t.Any]) -> t.Optional[str]:
        """Why this run may not end a process forked by a live parent of a target; None when it may: it passes
        ``match`` (when given, on its name or command line as they are now), under ``orphans_only`` it is a member
        of the owner's session, and its parent is not a cluster daemon (whose new children are the cluster's)."""
        parent = self._parents[info["ppid"]]
        if matches_any(self.spec.cluster_daemons, parent["name"], parent["cmdline"]):
            return "its parent is a cluster daemon (cluster_daemons)"
        if self.spec.match and not matches_any(self.spec.match, info["name"], info["cmdline"]):
            return "does not match `match`"
        if self.spec.orphans_only and (self.spec.owner is None or self.sid_of(pid) != self.spec.owner.pid):
            return "its parent is alive and is not the owner: someone else's job (orphans_only)"
        return None

    def _verify(self, before: t.Mapping[int, Reading], plan: Plan,
                outcomes: t.Sequence[Outcome]) -> t.Tuple[t.Dict[int, Reading], t.List[Problem], t.List[Outcome]]:
        """Poll fresh NVML readings until every selected GPU reads free and stays so for the settle window, only
        lasting problems remain, or ``timeout`` (the last reading may come up to the window after it).

        Every poll also looks at the lineage of what was ended (_discover): a respawn found there is ended at once
        through the same ladder, and the window starts again. The window: ``settle`` seconds (a fixed number), or with
        ``settle: auto``, RESPAWN_WINDOW_S after the last change in the lineage, and only while a parent that could
        respawn a holder (_respawners) is alive or a process it forked that this run does not end still runs;
        otherwise the first free reading is the verification.

        Before the first of these readings the module's NVML session is shut down and a new one opened (see _gpu/nvml.py
        renew): what verifies does not rely on the session that planned and watched the ladder."""
        indices = sorted(before)
        outcomes = list(outcomes)
        # every reading that verifies comes through an NVML session of its own, opened after the module's was shut down
        opened = round(self.clock() - self.start, 3)
        try:
            self.session = renew(self.session)
            self._fresh_at = opened
        except NvmlError as exc:
            after = {index: Reading(index, None, None, [], "GPU %d: %s" % (index, exc)) for index in indices}
            return after, [Problem(index, after[index].error or "", False) for index in indices], outcomes
        deadline = self.start + self.spec.timeout
        free_since: t.Optional[float] = None
        quiet_since = self.clock()  # the ladder's end: the slowest target's exit, or its last signal
        signalled: t.Dict[int, t.Tuple[str, bool]] = {}
        settling: t.Set[int] = set()
        counted = -1
        while True:
            if outcomes and self._table is not None:
                found = self._discover({o.target.pid for o in outcomes})
                if found:
                    began = self.clock()
                    more = run_ladder(self.psutil, found, self.spec.signals, self.spec.grace, clock=self.clock,
                                      deadline=deadline, discover=self._discover)
                    self._note_exits(began, more)
                    outcomes += more
                    quiet_since, free_since = self.clock(), None
            if counted != len(outcomes):
                # every target is ours: one NVML still lists after it exited (signalled or not) is the driver lagging behind
                signalled = {o.target.pid: _why_left(o) for o in outcomes}
                signalled.update(self._stopped_pids())
                settling = {index for index in indices if any(holder.pid in signalled for holder in before[index].holders)}
                counted = len(outcomes)
            after, problems = self._judged(indices, before, plan, signalled, settling)
            now = self.clock()
            if not problems:
                if free_since is None:
                    free_since = now
                wait = self._window(now, free_since, quiet_since)
                if wait <= 0 or now >= deadline:
                    self._waited = round(now - free_since, 3)
                    return after, problems, outcomes
                time.sleep(min(VERIFY_POLL_S, wait))
                continue
            free_since = None
            if not any(p.waitable for p in problems) or now >= deadline:
                return after, problems, outcomes
            time.sleep(VERIFY_POLL_S)

    def _judged(self, indices: t.Sequence[int], before: t.Mapping[int, Reading], plan: Plan, signalled: t.Mapping[int, t.Tuple[str, bool]],
                settling: t.Set[int]) -> t.Tuple[t.Dict[int, Reading], t.List[Problem]]:
        """A fresh reading of every selected GPU, through the verification's own NVML session, and every reason one is
        not free. The first reading of that session reads each UUID again: it must be the one the first reading had."""
        left_alone = dict(plan.left_alone)
        left_alone.update((pid, self._respawn_text(pid)) for pid in self._candidates)
        left_alone.update((pid, self._detached_text(pid)) for pid in self._detached)
        self._described.clear()  # a fresh reading means fresh process states too
        first = not self._uuids
        after = {index: self.read(index, self._uuids.get(index)) for index in indices}
        problems: t.List[Problem] = []
        for index in indices:
            if first and None not in (after[index].uuid, before[index].uuid) and after[index].uuid != before[index].uuid:
                problems.append(Problem(index, "GPU %d: the verification's NVML session reads it as %s, the first reading as %s: "
                                        "the GPUs were renumbered during the run" % (index, after[index].uuid, before[index].uuid), False))
            if after[index].uuid is not None:
                self._uuids.setdefault(index, after[index].uuid)
            problems += judge(after[index], self.spec.memory_threshold_mib, signalled, left_alone, self.describe, self.excluded,
                              self.spec.ignore_foreign, index in settling, self.spec.keep_live_jobs, self._on_purpose)
        problems += self._running_respawns(after, indices, self.clock())
        return after, problems

    def _running_respawns(self, after: t.Mapping[int, Reading], indices: t.Sequence[int], now: float) -> t.List[Problem]:
        """A respawn this run does not end and that still runs keeps the GPUs of its predecessors from counting as free,
        memory or not (its CUDA context may come a moment later): waitable for RESPAWN_WINDOW_S after it was seen (it
        may exit, or exec a program that ``match`` takes), then a failure. One that holds memory is judged as a holder.
        A cluster daemon's new child is only reported while it holds nothing (a node keeps a pool of idle workers)."""
        listed = {holder.pid for reading in after.values() for holder in reading.holders}
        problems = []
        for pid, candidate in list(self._candidates.items()):
            parent = self._parents.get(candidate["info"]["ppid"])
            if pid in listed or (parent is not None and matches_any(self.spec.cluster_daemons, parent["name"], parent["cmdline"])):
                continue
            if not self._running(pid, candidate["info"]["create_time"]):
                continue
            gpus = self._parent_gpus.get(candidate["info"]["ppid"]) or list(indices)
            text = "pid %d (%s) %s; it holds no GPU memory yet" % (pid, candidate["info"]["name"], self._respawn_text(pid))
            problems += [Problem(gpu, "GPU %d: %s" % (gpu, text), now < candidate["seen"] + RESPAWN_WINDOW_S)
                         for gpu in gpus if gpu in after]
        return problems

    def _window(self, now: float, free_since: float, quiet_since: float) -> float:
        """Seconds the GPUs must still read free before they count as verified (0: now). With ``settle: auto``, also
        RESPAWN_WINDOW_S after a process the ended tree left as it ended (_detached) was first seen, while it runs."""
        if self.spec.settle != AUTO:
            return float(self.spec.settle) - (now - free_since)
        waits = [RESPAWN_WINDOW_S - (now - entry["seen"]) for pid, entry in self._detached.items()
                 if now - entry["seen"] < RESPAWN_WINDOW_S and self._running(pid, entry["info"]["create_time"])]
        if any(self._parent_alive(pid) for pid in self._parents):
            waits.append(RESPAWN_WINDOW_S - (now - max([quiet_since] + [c["seen"] for c in self._candidates.values()])))
        if self._stopped_at is not None and _containers.may_restart(self._held):
            # a runtime that applies a restart policy does so as the container exits: read the container again after that
            waits.append(RESPAWN_WINDOW_S - (now - self._stopped_at))
        return max(waits + [0.0])

    def _running(self, pid: int, create_time: t.Optional[float]) -> bool:
        try:
            proc = self.psutil.Process(pid)
            return abs(proc.create_time() - (create_time or 0.0)) < 0.05 and proc.status() != self.psutil.STATUS_ZOMBIE
        except (self.psutil.NoSuchProcess, self.psutil.AccessDenied):
            return False

    def _respawn_text(self, pid: int) -> str:
        candidate = self._candidates[pid]
        ppid = candidate["info"]["ppid"]
        parent = self._parents.get(ppid) or self.describe(ppid)
        return "forked by PID %s (%s) in the lineage of what this run ended, after the ladder began: a respawn; not ended (%s): " \
            "stop what respawns it" % (ppid, label(parent), candidate["why"])

    def _forker(self, pid: int) -> t.Tuple[t.Optional[int], t.Optional[float], int]:
        """Where a DETACHED process came from: (the process of the ended tree, how far the start of the orphan at the
        top of its chain came from that process's exit (None: proven all the way), that orphan). Up the proven
        parents first; from an orphan, the target of its cgroup whose exit came nearest its start (nearest_exit)."""
        while pid in self._detached and self._detached[pid]["parent"] is not None:
            pid = self._detached[pid]["parent"]
        if pid not in self._detached:
            return self._origin_of(pid), None, pid
        entry = self._detached[pid]
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

    def _detached_text(self, pid: int) -> str:
        forker, offset, top = self._forker(pid)
        via = "" if top == pid else "forked by PID %d, which " % top
        if forker is None:
            how = "%sstarted while what this run ended was ending, with its parent gone, in the cgroup of a target" % via
        else:
            row = self._targets.get(forker)
            who = "PID %d (%s)" % (forker, label(row._asdict() if row is not None else self._parents.get(forker) or self.describe(forker)))
            if offset is None:
                how = "forked by %s in the lineage of what this run ended, then out of it" % who
            else:
                how = "%sstarted %.3f s %s %s ended, with its parent gone, in its cgroup: most likely forked by it as it ended" % (
                    via, abs(offset), "before" if offset <= 0 else "after", who)
        return "%s: a respawn that left the tree (a daemon); not ended (with its parent gone nothing proves it is the tree's): " \
            "stop what respawns it, or end it" % how

    def _running_detached(self) -> t.List[int]:
        return [pid for pid, entry in sorted(self._detached.items()) if self._running(pid, entry["info"]["create_time"])]

    def _lineage(self) -> t.Dict[str, t.Any]:
        """The result's ``respawn_watch``."""
        parents = [{"pid": pid, "name": row["name"], "cmdline": row["cmdline"], "alive": self._parent_alive(pid)}
                   for pid, row in sorted(self._parents.items())]
        candidates = []
        for pid, candidate in sorted(self._candidates.items()):
            info = candidate["info"]
            candidates.append({"pid": pid, "name": info["name"], "cmdline": info["cmdline"], "parent": info["ppid"],
                               "running": self._running(pid, info["create_time"]), "reason": self._respawn_text(pid),
                               "forked_by": info["ppid"], "detached": False})
        for pid in self._running_detached():
            info = self._detached[pid]["info"]
            candidates.append({"pid": pid, "name": info["name"], "cmdline": info["cmdline"], "parent": info["ppid"], "running": True,
                               "reason": self._detached_text(pid), "forked_by": self._forker(pid)[0], "detached": True})
        return {"settle": self.spec.settle, "parents": parents, "candidates": candidates, "waited_s": self._waited}

    def _stop_containers(self) -> None:
        """Stop every container that runs targets through its runtime (its -t: ``grace``, at most the time left), then,
        with ``container_restart: disable``, set its restart policy to no."""
        seconds = _containers.stop_seconds(self.spec.grace, self.start + self.spec.timeout - self.clock())
        _containers.stop(self._held, self.runtimes, seconds, self.clock)
        if self.spec.container_restart == CONTAINER_RESTART_DISABLE:
            _containers.disable_restart(self._held, self.runtimes)
        self._stopped_at = self.clock()

    def _stopped_pids(self) -> t.Dict[int, t.Tuple[str, bool]]:
        """The targets of the stopped containers, each with why NVML may still list it and whether waiting may help (the
        verification takes them for this run's, as a signalled target)."""
        found: t.Dict[int, t.Tuple[str, bool]] = {}
        for container in self._held:
            if container.stop_error is not None:
                why = (container.stop_error, False)
            else:
                why = ("its %s was stopped through %s, yet NVML still lists it" % (container.label(), container.runtime), True)
            found.update((pid, why) for pid in container.pids)
        return found

    def _container_problems(self, after: t.Mapping[int, Reading]) -> t.List[Problem]:
        """After the verification: a container that still runs after its stop (when NVML no longer names its holders), one
        its runtime started again, one whose restart policy could not be set to no. Each fails the GPUs it held."""
        problems: t.List[Problem] = []
        listed = {index: {holder.pid for holder in reading.holders} for index, reading in after.items()}
        for container in self._held:
            if container.stop_error is not None:
                problems += [Problem(gpu, "GPU %d: %s %s: %s" % (gpu, container.label(), container.holding(), container.stop_error), False)
                             for gpu in container.gpus if gpu in after and not listed[gpu] & set(container.pids)]
            if container.policy_error is not None:
                problems += [Problem(gpu, "GPU %d: %s was stopped, but its restart policy (%s) is not no: %s" % (
                    gpu, container.label(), container.restart_policy, container.policy_error), False) for gpu in container.gpus if gpu in after]
        for container, text in _containers.running_again(self._held, self.runtimes):
            problems += [Problem(gpu, "GPU %d: %s" % (gpu, text), False) for gpu in container.gpus if gpu in after]
        return problems

    def _container_fact(self, pid: int) -> t.Optional[t.Dict[str, t.Any]]:
        """The container of ``pid`` (runtime, id, name, image; pod_uid for Kubernetes), None when it runs in none."""
        for container in self._held:
            if pid in container.pids:
                return container.fact()
        ref = self.container_of(pid)
        if ref is None:
            return None
        found = _containers.HeldContainer(ref)
        if ref.runtime != KUBERNETES:
            found.state, _error = self.runtimes.inspect(ref.runtime, ref.container_id)
        return found.fact()

    def _evidence(self, pids: t.Iterable[int]) -> t.Dict[str, t.Any]:
        """The result's ``evidence``: each process left (and its container), the device holders, the Xid lines."""
        return {
            "survivors": [evidence.survivor(self.psutil, pid, self._container_fact(pid)) for pid in sorted(pids)],
            "device_holders": device_holders(self.psutil),
            "xid": evidence.xid_lines(),
        }

    def _refused_result(self, before: t.Mapping[int, Reading], plan: Plan) -> t.Dict[str, t.Any]:
        """A container refuses the run (see _reclaim/containers.py): it fails before it signals or stops anything, naming
        each refused container. A GPU it holds is not free; nor is one with any other holder (none was ended)."""
        refused = [container for container in self._held if container.refused]
        problems: t.List[Problem] = []
        for container in refused:
            problems += [Problem(gpu, "GPU %d: %s" % (gpu, container.refused), False) for gpu in container.gpus if gpu in before]
        blamed = {problem.gpu for problem in problems}
        for index in sorted(before):
            if index in blamed:
                continue
            if before[index].holders:
                problems.append(Problem(index, "GPU %d: not reclaimed: the run refused a container before it signalled anything" % index, False))
            else:
                problems += judge(before[index], self.spec.memory_threshold_mib, {}, plan.left_alone, self.describe, self.excluded,
                                  self.spec.ignore_foreign, False, self.spec.keep_live_jobs, self._on_purpose)
        left, busy = self._left_alone(before, set(), plan)
        gpus = [_gpu_entry(before[index], before[index], problems, self._before_described, self.describe) for index in sorted(before)]
        for entry in gpus:
            entry["left_alone"] = busy.get(entry["index"], [])
        return {
            "gpus": gpus, "killed": [], "warnings_list": plan.warnings, "elapsed_s": round(self.clock() - self.start, 3),
            "foreign": self._foreign, "left_alone": left, "respawn_watch": self._lineage(),
            "reading_after": {"fresh_session": False, "session_opened_s": None}, "changed": False, "verified": False,
            "survivors": [], "containers_refused": [dict(container.entry(), reason=container.refused) for container in refused],
            "containers_stopped": [],
            "msg": "refused before signalling or stopping anything: %s" % "; ".join(t.cast(str, container.refused) for container in refused),
            "evidence": self._evidence(pid for container in refused for pid in container.pids),
        }

    def _check_result(self, before: t.Mapping[int, Reading], plan: Plan) -> t.Dict[str, t.Any]:
        """Check mode: what a real run would signal, what it would leave and why it would fail."""
        states = {tg.pid: self._state(tg.pid) for tg in plan.targets}
        would = [tg for tg in plan.targets if states[tg.pid] != "zombie"]
        refused = [container for container in self._held if container.refused]
        # a refused container's holders stay, named with the refusal; a container to stop takes its targets with it
        left_alone = dict(plan.left_alone)
        for container in self._held:
            if container.refused:
                left_alone.update((pid, container.refused) for pid in container.pids)
            else:
                states.update((pid, self._state(pid)) for pid in container.pids)
        predictions = {index: predict(before[index], self.spec.memory_threshold_mib, states, left_alone, self.describe, self.excluded,
                                      self.spec.ignore_foreign, self.spec.keep_live_jobs, self._on_purpose) for index in sorted(before)}
        left, busy = self._left_alone(before, set(states), plan)
        gpus = []
        for index in sorted(before):
            entry = _gpu_entry(before[index], None, [], self._before_described, self.describe)
            entry["predicted_memory_used_mib_after"] = predictions[index].used_mib
            entry["processes_would_remain"] = [{"pid": h.pid, "name": self._before_described.get(h.pid, self.describe(h.pid))["name"],
                                                "used_memory_mib": h.used_memory_mib} for h in predictions[index].remaining]
            entry["left_alone"] = busy.get(index, [])
            gpus.append(entry)
        would_fail = [text for index in sorted(before) for text in predictions[index].failures]
        warnings = plan.warnings + ["a real run would fail: " + text for text in would_fail]
        stopping = [] if refused else self._held
        if refused:
            msg = "check mode: a real run would refuse before it signals or stops anything: %s" % "; ".join(
                t.cast(str, container.refused) for container in refused)
        else:
            msg = "check mode: would end %d process(es)%s on GPU %s%s%s" % (
                len(would), " and stop %d container(s) through their runtime (%s)" % (
                    len(stopping), ", ".join(container.label() for container in stopping)) if stopping else "",
                _indices(before), _busy_text(busy, left, "would keep"), "; a real run would fail: " + "; ".join(would_fail) if would_fail else "")
        return {
            "gpus": gpus, "killed": [], "warnings_list": warnings + self._restart_warnings(stopping),
            "elapsed_s": round(self.clock() - self.start, 3), "changed": bool(would or stopping) and not refused, "verified": None,
            "would_kill": [_target_entry(tg) for tg in would], "would_fail": would_fail, "foreign": self._foreign, "left_alone": left,
            "would_stop_containers": [container.entry() for container in stopping],
            "containers_refused": [dict(container.entry(), reason=container.refused) for container in refused],
            "msg": msg,
        }

    def _restart_warnings(self, containers: t.Sequence[_containers.HeldContainer]) -> t.List[str]:
        """For each container stopped (check mode: to stop) whose runtime may start it again by itself, when and how."""
        warnings = []
        for container in containers:
            policy = container.after.restart_policy if container.after is not None and container.after.restart_policy else container.restart_policy
            again = starts_again(container.runtime, policy)
            if again is None:
                continue
            if self.runtimes.can_disable_restart(container.runtime):
                how = "set container_restart: disable (%s update --restart=no), or remove the container" % container.runtime
            else:
                how = "remove the container (this %s cannot change a restart policy), or recreate it with --restart=no" % container.runtime
            warnings.append("%s stays stopped until its runtime starts it again: %s; %s, to keep it from taking GPU %s again" % (
                container.label(), again, how, ", ".join(str(gpu) for gpu in container.gpus)))
        return warnings

    def _left_alone(self, readings: t.Mapping[int, Reading], ours: t.Container[int],
                    plan: Plan) -> t.Tuple[t.List[t.Dict[str, t.Any]], t.Dict[int, t.List[int]]]:
        """The result's ``left_alone`` (each holder of ``readings`` that this run left alone on purpose, with the rule
        that did and why) and, per GPU index, the PIDs of those that hold it."""
        entries: t.Dict[int, t.Dict[str, t.Any]] = {}
        busy: t.Dict[int, t.List[int]] = {}
        for index in sorted(readings):
            for holder in left_alone_on(readings[index], ours, plan.left_alone, self.describe, self.excluded, self.spec.ignore_foreign,
                                        self._on_purpose):
                info = self.describe(holder.pid)
                entry = entries.setdefault(holder.pid, {
                    "pid": holder.pid, "name": info["name"], "cmdline": info["cmdline"], "username": info["username"], "gpus": [],
                    "used_memory_mib": 0, "rule": plan.on_purpose[holder.pid], "why": plan.left_alone[holder.pid]})
                entry["gpus"].append(index)
                entry["used_memory_mib"] = add_mib(entry["used_memory_mib"], holder.used_memory_mib)
                busy.setdefault(index, []).append(holder.pid)
        return [entries[pid] for pid in sorted(entries)], busy

    def _state(self, pid: int) -> t.Optional[str]:
        if self._table is not None and pid in self._table.info:
            return self._table.info[pid].get("status")
        return self.describe(pid)["state"]

    def _result(self, before: t.Mapping[int, Reading], after: t.Mapping[int, Reading], plan: Plan,
                outcomes: t.Sequence[Outcome], problems: t.Sequence[Problem]) -> t.Dict[str, t.Any]:
        gpus = [_gpu_entry(before[index], after[index], problems, self._before_described, self.describe) for index in sorted(before)]
        left, busy = self._left_alone(after, {o.target.pid for o in outcomes}, plan)
        for entry in gpus:
            entry["left_alone"] = busy.get(entry["index"], [])
        listed = {holder.pid for reading in after.values() for holder in reading.holders}
        # a zombie that NVML still lists has not let go of its memory: a survivor, not a kill
        stuck = {o.target.pid for o in outcomes if o.ended == "zombie" and o.target.pid in listed}
        ended = [o for o in outcomes if o.ended is not None and o.target.pid not in stuck]
        result: t.Dict[str, t.Any] = {
            "gpus": gpus,
            "killed": [_killed_entry(o) for o in ended],
            "warnings_list": plan.warnings,
            "elapsed_s": round(self.clock() - self.start, 3),
            "foreign": self._foreign,
            "left_alone": left,
            "respawn_watch": self._lineage(),
            "reading_after": {"fresh_session": self._fresh_at is not None, "session_opened_s": self._fresh_at},
        }
        survivors = [o for o in outcomes if o.ended is None or o.target.pid in stuck]
        result["containers_stopped"] = [container.stopped_entry() for container in self._held]
        result["containers_refused"] = []
        # the containers stopped that stay stopped (one started again is named among the problems)
        stopped = [c for c in self._held if c.stop_error is None and c.after is not None and c.after.running is False]
        result["warnings_list"] = list(plan.warnings) + self._restart_warnings(stopped)
        result["changed"] = any(o.signal is not None for o in outcomes) or any(container.stopped for container in self._held)
        result["verified"] = not problems and not survivors
        if result["verified"]:
            # a process the tree left as it ended that still runs, holding nothing after the window: said, not a failure
            # (a daemon's new process on the same host, started at that moment, looks the same)
            result["warnings_list"] += [
                "pid %d (%s) holds no selected GPU after the respawn watch, but still runs: %s" % (
                    pid, self._detached[pid]["info"]["name"], self._detached_text(pid)) for pid in self._running_detached()]
        result["survivors"] = [dict(_target_entry(o.target), error=o.error, signal=o.signal, state=self.describe(o.target.pid)["state"])
                               for o in survivors]
        signalled = sum(1 for o in ended if o.signal is not None)
        unsignalled = len(ended) - signalled
        count = "ended %d process(es)%s" % (len(ended), " (%d exited once their launcher or tree was signalled)" % unsignalled if unsignalled else "")
        if self._held:
            count += ", stopped %d of %d container(s) through their runtime%s" % (
                len(stopped), len(self._held), " (%s)" % ", ".join(c.label() for c in stopped) if stopped else "")
        if result["verified"]:
            freed = sum(g["freed_mib"] or 0 for g in gpus)
            free = [index for index in sorted(before) if index not in busy]
            result["msg"] = "%s%s: %s, %d MiB came back" % (
                "GPU %s verified free by fresh NVML readings" % ", ".join(str(index) for index in free) if free else "no GPU read free",
                _busy_text(busy, left, "kept"), count, freed)
            return result
        texts = [p.text for p in problems] + ["pid %d (%s, %s, state %s): %s" % (
            o.target.pid, o.target.name, o.target.role, self.describe(o.target.pid)["state"], o.error or "survived every signal")
            for o in survivors if o.target.pid not in listed]
        result["msg"] = "GPUs not freed (%s): %s" % (count, "; ".join(texts))
        result["evidence"] = self._evidence(_problem_pids(after, problems) | {o.target.pid for o in survivors})
        return result


def _why_left(outcome: Outcome) -> t.Tuple[str, bool]:
    """Why a target is still listed by NVML, and whether waiting may help."""
    if outcome.error is not None:
        return outcome.error, False
    if outcome.ended == "zombie" and outcome.signal is None:
        return "a zombie before any signal: its parent has not reaped it and the driver still holds its memory", True
    if outcome.ended not in (None, "exited", "zombie"):
        return outcome.ended, True
    return "still there after every signal", True


def _indices(readings: t.Mapping[int, Reading]) -> str:
    return ", ".join(str(index) for index in sorted(readings))


def _busy_text(busy: t.Mapping[int, t.List[int]], left: t.Sequence[t.Mapping[str, t.Any]], verb: str) -> str:
    """"; GPU 0, 3 kept busy by 2 holder(s) left alone on purpose (left_alone)", or nothing when none is."""
    if not busy:
        return ""
    return "; GPU %s %s busy by %d holder(s) left alone on purpose (left_alone)" % (", ".join(str(index) for index in sorted(busy)), verb, len(left))


def _problem_pids(after: t.Mapping[int, Reading], problems: t.Sequence[Problem]) -> t.Set[int]:
    gpus = {p.gpu for p in problems}
    return {holder.pid for index in gpus for holder in after[index].holders}


def _target_entry(target: t.Any) -> t.Dict[str, t.Any]:
    return {"pid": target.pid, "name": target.name, "cmdline": target.cmdline, "username": target.username,
            "role": target.role, "gpus": target.gpus}


def _killed_entry(outcome: Outcome) -> t.Dict[str, t.Any]:
    return dict(_target_entry(outcome.target), signal=outcome.signal, seconds_to_exit=outcome.seconds, ended=outcome.ended)


def _gpu_entry(before: Reading, after: t.Optional[Reading], problems: t.Sequence[Problem],
               described_before: t.Mapping[int, t.Dict[str, t.Any]], describe: t.Callable[[int], t.Dict[str, t.Any]]) -> t.Dict[str, t.Any]:
    used_before = None if before.memory is None else before.memory.used_mib
    used_after = None if after is None or after.memory is None else after.memory.used_mib
    entry: t.Dict[str, t.Any] = {
        "index": before.index,
        "uuid": before.uuid or (after.uuid if after else None),
        "memory_used_mib_before": used_before,
        "memory_used_mib_after": used_after,
        "freed_mib": None if used_before is None or used_after is None else max(0, used_before - used_after),
        "processes_before": [{"pid": h.pid, "name": described_before[h.pid]["name"], "used_memory_mib": h.used_memory_mib}
                             for h in before.holders],
        "error": before.error or (after.error if after else None),
    }
    if after is not None:
        entry["processes_left"] = [dict(pid=h.pid, used_memory_mib=h.used_memory_mib, **{k: describe(h.pid)[k] for k in ("name", "state", "visible")})
                                   for h in after.holders]
        entry["problems"] = [p.text for p in problems if p.gpu == before.index]
        entry["verified"] = not entry["problems"]
    return entry
