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
from ansible_collections.gpuops.fleet.plugins.module_utils._host.devices import device_holders
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim import evidence
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import NvmlSession
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.errors import NvmlError
from ansible_collections.gpuops.fleet.plugins.module_utils._host.process_table import ProcessTable, protected_pids
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import Plan, Target, plan_targets
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import describe_process, trim_cmdline
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.owner import GetSid, Verdict, getsid, label
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import ReclaimSpec, is_excluded
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.verify import Problem, Reading, drop_exited, judge, predict, read_gpu
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.selection import resolve_gpus
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.ladder import Outcome, run_ladder

VERIFY_POLL_S = 0.02


def _getpgid(pid: int) -> t.Optional[int]:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


class Reclaim:
    """One reclaim run. ``run()`` returns the module result, with the warnings as ``warnings_list``."""

    def __init__(self, session: NvmlSession, psutil: t.Any, spec: ReclaimSpec, check_mode: bool,
                 clock: t.Callable[[], float] = time.monotonic, getpgid: t.Optional[t.Callable[[int], t.Optional[int]]] = None,
                 sid_of: t.Optional[GetSid] = None) -> None:
        self.session = session
        self.psutil = psutil
        self.spec = spec
        self.check_mode = check_mode
        self.clock = clock
        self.getpgid = getpgid or _getpgid
        self.sid_of = sid_of or getsid
        self.start = clock()
        self._described: t.Dict[int, t.Dict[str, t.Any]] = {}
        self._before_described: t.Dict[int, t.Dict[str, t.Any]] = {}
        self._table: t.Optional[ProcessTable] = None
        self._protected: t.Set[int] = set()
        self._pgids: t.Set[int] = set()
        self._planning = True
        self._foreign: t.List[t.Dict[str, t.Any]] = []
        self._holder_gpus: t.Dict[int, t.List[int]] = {}

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
            self._table = ProcessTable(self.psutil)  # after the NVML reading: every holder listed was started before it
        before = {index: drop_exited(self.session, raw[index], self.describe) for index in indices}
        plan = self._plan(before, set(indices))
        self._foreign = [self._foreign_entry(pid, verdict) for pid, verdict in sorted(plan.foreign.items())]
        self._planning = False
        self._before_described = dict(self._described)
        if self.check_mode:
            return self._check_result(before, plan)
        outcomes = run_ladder(self.psutil, plan.targets, self.spec.signals, self.spec.grace, clock=self.clock,
                              deadline=self.start + self.spec.timeout, discover=self._discover)
        after, problems = self._verify(before, plan, outcomes)
        return self._result(before, after, plan, outcomes, problems)

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
        # a process the targets fork during the ladder shares their process group (unless it is one of ours)
        ours = {self.getpgid(pid) for pid in self._protected if pid > 1}
        self._pgids = {pgid for pgid in (self.getpgid(tg.pid) for tg in plan.targets) if pgid not in ours and pgid not in (None, 0, 1)}
        return plan

    def _foreign_entry(self, pid: int, verdict: Verdict) -> t.Dict[str, t.Any]:
        """A holder left alone as someone else's job (orphans_only): what the caller needs to name it."""
        info = self.describe(pid)
        gpus = sorted(self._holder_gpus.get(pid, []))
        parent = None
        if verdict.parent is not None:
            pinfo = self.describe(verdict.parent)
            parent = {"pid": verdict.parent, "name": pinfo["name"], "cmdline": pinfo["cmdline"], "username": pinfo["username"]}
        return {
            "pid": pid, "name": info["name"], "cmdline": info["cmdline"], "username": info["username"], "gpus": gpus,
            "parent": parent, "launcher": verdict.top if verdict.top != pid else None,
            "reason": "PID %d %s on GPU %s belongs to live PID %s (%s), not to this server: not ended" % (
                pid, info["name"] or "?", ", ".join(str(g) for g in gpus) or "?", verdict.parent, label(parent)),
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

    def _discover(self, known: t.Set[int]) -> t.List[Target]:
        """Processes started since the plan's process table whose parent is a target or that share a target's
        process group: what a target forked during the ladder (a respawn)."""
        if self._table is None or not self.spec.kill_tree:
            return []
        found: t.List[Target] = []
        for pid in self.psutil.pids():
            if pid in known or pid in self._protected or pid in self._table.info:
                continue
            try:
                proc = self.psutil.Process(pid)
                info = proc.as_dict(attrs=["name", "cmdline", "username", "create_time", "ppid"], ad_value=None)
            except self.psutil.NoSuchProcess:
                continue
            if info["ppid"] not in known and self.getpgid(pid) not in self._pgids:
                continue
            trim_cmdline(info["cmdline"])
            if is_excluded(self.spec, info["name"], info["cmdline"]):
                continue
            found.append(Target(pid, info["create_time"], info["name"], info["cmdline"], info["username"], "respawned", 1, []))
        return found

    def _verify(self, before: t.Mapping[int, Reading], plan: Plan, outcomes: t.Sequence[Outcome]) -> t.Tuple[t.Dict[int, Reading], t.List[Problem]]:
        """Poll fresh NVML readings until every selected GPU is free in two readings ``settle`` seconds apart, only
        lasting problems remain, or ``timeout`` (the settle reading may come up to ``settle`` after it)."""
        indices = sorted(before)
        # every target is ours: one NVML still lists after it exited (signalled or not) is the driver lagging behind
        signalled = {o.target.pid: _why_left(o) for o in outcomes}
        settling = {index for index in indices if any(holder.pid in signalled for holder in before[index].holders)}
        deadline = self.start + self.spec.timeout
        free_since: t.Optional[float] = None
        while True:
            self._described.clear()  # a fresh reading means fresh process states too
            after = {index: self.read(index, before[index].uuid) for index in indices}
            problems: t.List[Problem] = []
            for index in indices:
                problems += judge(after[index], self.spec.memory_threshold_mib, signalled, plan.left_alone,
                                  self.describe, self.excluded, self.spec.ignore_foreign, index in settling)
            now = self.clock()
            if not problems:
                if free_since is None:
                    free_since = now
                if now - free_since >= self.spec.settle:
                    return after, problems
                time.sleep(min(VERIFY_POLL_S * 5, max(0.0, self.spec.settle - (now - free_since))))
                continue
            free_since = None
            if not any(p.waitable for p in problems) or now >= deadline:
                return after, problems
            time.sleep(VERIFY_POLL_S)

    def _check_result(self, before: t.Mapping[int, Reading], plan: Plan) -> t.Dict[str, t.Any]:
        """Check mode: what a real run would signal, what it would leave and why it would fail."""
        states = {tg.pid: self._state(tg.pid) for tg in plan.targets}
        would = [tg for tg in plan.targets if states[tg.pid] != "zombie"]
        predictions = {index: predict(before[index], self.spec.memory_threshold_mib, states, plan.left_alone,
                                      self.describe, self.excluded, self.spec.ignore_foreign) for index in sorted(before)}
        gpus = []
        for index in sorted(before):
            entry = _gpu_entry(before[index], None, [], self._before_described, self.describe)
            entry["predicted_memory_used_mib_after"] = predictions[index].used_mib
            entry["processes_would_remain"] = [{"pid": h.pid, "name": self._before_described.get(h.pid, self.describe(h.pid))["name"],
                                                "used_memory_mib": h.used_memory_mib} for h in predictions[index].remaining]
            gpus.append(entry)
        would_fail = [text for index in sorted(before) for text in predictions[index].failures]
        warnings = plan.warnings + ["a real run would fail: " + text for text in would_fail]
        return {
            "gpus": gpus, "killed": [], "warnings_list": warnings, "elapsed_s": round(self.clock() - self.start, 3),
            "changed": bool(would), "verified": None, "would_kill": [_target_entry(tg) for tg in would], "would_fail": would_fail,
            "foreign": self._foreign,
            "msg": "check mode: would end %d process(es) on GPU %s%s" % (
                len(would), _indices(before), "; a real run would fail: " + "; ".join(would_fail) if would_fail else ""),
        }

    def _state(self, pid: int) -> t.Optional[str]:
        if self._table is not None and pid in self._table.info:
            return self._table.info[pid].get("status")
        return self.describe(pid)["state"]

    def _result(self, before: t.Mapping[int, Reading], after: t.Mapping[int, Reading], plan: Plan,
                outcomes: t.Sequence[Outcome], problems: t.Sequence[Problem]) -> t.Dict[str, t.Any]:
        gpus = [_gpu_entry(before[index], after[index], problems, self._before_described, self.describe) for index in sorted(before)]
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
        }
        survivors = [o for o in outcomes if o.ended is None or o.target.pid in stuck]
        result["changed"] = any(o.signal is not None for o in outcomes)
        result["verified"] = not problems and not survivors
        result["survivors"] = [dict(_target_entry(o.target), error=o.error, signal=o.signal, state=self.describe(o.target.pid)["state"])
                               for o in survivors]
        signalled = sum(1 for o in ended if o.signal is not None)
        unsignalled = len(ended) - signalled
        count = "ended %d process(es)%s" % (len(ended), " (%d exited once their launcher or tree was signalled)" % unsignalled if unsignalled else "")
        if result["verified"]:
            freed = sum(g["freed_mib"] or 0 for g in gpus)
            result["msg"] = "GPU %s verified free by fresh NVML readings: %s, %d MiB came back" % (_indices(before), count, freed)
            return result
        texts = [p.text for p in problems] + ["pid %d (%s, %s, state %s): %s" % (
            o.target.pid, o.target.name, o.target.role, self.describe(o.target.pid)["state"], o.error or "survived every signal")
            for o in survivors if o.target.pid not in listed]
        result["msg"] = "GPUs not freed (%s): %s" % (count, "; ".join(texts))
        result["evidence"] = {
            "survivors": [evidence.survivor(self.psutil, pid) for pid in sorted(_problem_pids(after, problems) | {o.target.pid for o in survivors})],
            "device_holders": device_holders(self.psutil),
            "xid": evidence.xid_lines(),
        }
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
