# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim: read every holder, end them (launchers first), then prove the GPUs free with fresh NVML readings.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils import _reclaim_evidence as evidence
from ansible_collections.gpuops.fleet.plugins.module_utils._nvml import NvmlSession
from ansible_collections.gpuops.fleet.plugins.module_utils._nvml_errors import NvmlError
from ansible_collections.gpuops.fleet.plugins.module_utils._process_tree import Plan, plan_targets
from ansible_collections.gpuops.fleet.plugins.module_utils._processes import describe_process
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim_spec import ReclaimSpec, matches_any
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim_verify import Problem, Reading, judge, read_gpu
from ansible_collections.gpuops.fleet.plugins.module_utils._selection import resolve_gpus
from ansible_collections.gpuops.fleet.plugins.module_utils._signal_ladder import Outcome, run_ladder

VERIFY_POLL_S = 0.02


class Reclaim:
    """One reclaim run. ``run()`` returns the module result (without ``changed``'s check-mode twist applied twice)."""

    def __init__(self, session: NvmlSession, psutil: t.Any, spec: ReclaimSpec, check_mode: bool,
                 clock: t.Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self.psutil = psutil
        self.spec = spec
        self.check_mode = check_mode
        self.clock = clock
        self.start = clock()
        self._described: t.Dict[int, t.Dict[str, t.Any]] = {}
        self._before_described: t.Dict[int, t.Dict[str, t.Any]] = {}

    def describe(self, pid: int) -> t.Dict[str, t.Any]:
        if pid not in self._described:
            self._described[pid] = describe_process(self.psutil, pid)
        return self._described[pid]

    def excluded(self, info: t.Dict[str, t.Any]) -> bool:
        return matches_any(self.spec.exclude, info["name"], info["cmdline"])

    def run(self) -> t.Dict[str, t.Any]:
        indices = resolve_gpus(self.spec.gpus, self.session.count, self.session.inventory)
        before = {index: read_gpu(self.session, index) for index in indices}
        plan = self._plan(before, set(indices))
        self._before_described = dict(self._described)
        if self.check_mode:
            return self._result(before, None, plan, [], [])
        outcomes = run_ladder(self.psutil, plan.targets, self.spec.signals, self.spec.grace)
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
        plan = plan_targets(self.psutil, self.spec, holders, selected, others)
        plan.warnings.extend(unread)
        return plan

    def _verify(self, before: t.Mapping[int, Reading], plan: Plan, outcomes: t.Sequence[Outcome]) -> t.Tuple[t.Dict[int, Reading], t.List[Problem]]:
        """Poll fresh NVML readings until every selected GPU is free, only lasting problems remain, or ``timeout``."""
        indices = sorted(before)
        signalled = {o.target.pid: _why_left(o) for o in outcomes if o.signal is not None or o.error is not None or o.ended == "zombie"}
        sent = {o.target.pid for o in outcomes if o.signal is not None}
        settling = {index for index in indices if any(holder.pid in sent for holder in before[index].holders)}
        deadline = self.start + self.spec.timeout
        while True:
            self._described.clear()  # a fresh reading means fresh process states too
            after = {index: read_gpu(self.session, index, before[index].uuid) for index in indices}
            problems: t.List[Problem] = []
            for index in indices:
                problems += judge(after[index], self.spec.memory_threshold_mib, signalled, plan.left_alone,
                                  self.describe, self.excluded, self.spec.ignore_foreign, index in settling)
            if not problems or not any(p.waitable for p in problems) or self.clock() >= deadline:
                return after, problems
            time.sleep(VERIFY_POLL_S)

    def _result(self, before: t.Mapping[int, Reading], after: t.Optional[t.Mapping[int, Reading]], plan: Plan,
                outcomes: t.Sequence[Outcome], problems: t.Sequence[Problem]) -> t.Dict[str, t.Any]:
        gpus = [_gpu_entry(before[index], None if after is None else after[index], problems, self._before_described, self.describe)
                for index in sorted(before)]
        listed = set() if after is None else {holder.pid for reading in after.values() for holder in reading.holders}
        # a zombie that NVML still lists has not let go of its memory: a survivor, not a kill
        stuck = {o.target.pid for o in outcomes if o.ended == "zombie" and o.target.pid in listed}
        result: t.Dict[str, t.Any] = {
            "gpus": gpus,
            "killed": [_killed_entry(o) for o in outcomes if o.ended is not None and o.signal is not None and o.target.pid not in stuck],
            "warnings_list": plan.warnings,
            "elapsed_s": round(self.clock() - self.start, 3),
        }
        if after is None:
            result.update(changed=bool(plan.targets), verified=None, would_kill=[_target_entry(tg) for tg in plan.targets])
            result["would_fail"] = self._lasting_problems(before, plan)
            result["warnings_list"] = plan.warnings + ["a real run would fail: " + text for text in result["would_fail"]]
            result["msg"] = "check mode: would end %d process(es) on GPU %s" % (len(plan.targets), _indices(before))
            return result
        survivors = [o for o in outcomes if o.ended is None or o.target.pid in stuck]
        result["changed"] = any(o.signal is not None for o in outcomes)
        result["verified"] = not problems and not survivors
        result["survivors"] = [dict(_target_entry(o.target), error=o.error, signal=o.signal, state=self.describe(o.target.pid)["state"])
                               for o in survivors]
        if result["verified"]:
            freed = sum(g["freed_mib"] or 0 for g in gpus)
            result["msg"] = "GPU %s verified free by a fresh NVML reading: ended %d process(es), %d MiB came back" % (
                _indices(before), len(result["killed"]), freed)
            return result
        texts = [p.text for p in problems] + ["pid %d (%s, %s, state %s): %s" % (
            o.target.pid, o.target.name, o.target.role, self.describe(o.target.pid)["state"], o.error or "survived every signal")
            for o in survivors if o.target.pid not in listed]
        result["msg"] = "GPUs not freed: " + "; ".join(texts)
        result["evidence"] = {
            "survivors": [evidence.survivor(self.psutil, pid) for pid in sorted(_problem_pids(after, problems) | {o.target.pid for o in survivors})],
            "device_holders": evidence.device_holders(self.psutil),
            "xid": evidence.xid_lines(),
        }
        return result

    def _lasting_problems(self, before: t.Mapping[int, Reading], plan: Plan) -> t.List[str]:
        """Check mode: what no signal of this run can fix (as if every target went), so a real run would fail on it."""
        going = {tg.pid: ("would be signalled", True) for tg in plan.targets}
        texts = []
        for index in sorted(before):
            settling = any(holder.pid in going for holder in before[index].holders)
            texts += [p.text for p in judge(before[index], self.spec.memory_threshold_mib, going, plan.left_alone,
                                            self.describe, self.excluded, self.spec.ignore_foreign, settling) if not p.waitable]
        return texts


def _why_left(outcome: Outcome) -> t.Tuple[str, bool]:
    """Why a target is still listed by NVML, and whether waiting may help."""
    if outcome.error is not None:
        return outcome.error, False
    if outcome.signal is None:
        return "a zombie before any signal: its parent has not reaped it and the driver still holds its memory", True
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
