# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim's result: what a run returns once it is checked (check mode), refused, or done and verified (or not).

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.containers import SHORT_ID, HeldContainer, Runtimes, restart_warnings
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.ladder import Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.lineage import Watch
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.owner import Verdict, label
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import Descriptions, Plan, Target
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import ReclaimSpec, excluder
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.verify import (
    OnPurpose,
    Problem,
    Reading,
    Verification,
    add_mib,
    judge,
    left_alone_on,
    predict,
)

Entry = t.Dict[str, t.Any]


class Seen(t.NamedTuple):
    """What every result of a run reads besides its readings: its rules, its plan, the processes it described, the
    holders it left alone on purpose (pid -> start time) and as someone else's (``foreign``: foreign_entry()), the
    containers its targets run in, the seconds since it began (``elapsed()``) and the evidence of the processes left."""

    spec: ReclaimSpec
    plan: Plan
    describe: Descriptions
    on_purpose: OnPurpose
    foreign: t.List[Entry]
    held: t.List[HeldContainer]
    runtimes: Runtimes
    elapsed: t.Callable[[], float]
    evidence: t.Callable[[t.Iterable[int]], Entry]


def foreign_entry(pid: int, verdict: Verdict, gpus: t.Sequence[int], describe: t.Callable[[int], Entry], box: t.Optional[Entry]) -> Entry:
    """A holder left alone as someone else's job (orphans_only): what the caller needs to name it (``box``: its
    container, None outside one)."""
    info = describe(pid)
    gpus = sorted(gpus)
    parent = None
    if verdict.parent is not None:
        pinfo = describe(verdict.parent)
        parent = {"pid": verdict.parent, "name": pinfo["name"], "cmdline": pinfo["cmdline"], "username": pinfo["username"]}
    inside = ""
    if box is not None:
        inside = " in the %s container %s" % (box["runtime"], box.get("name") or box["id"][:SHORT_ID])
        inside += " of pod %s" % box["pod_uid"] if box.get("pod_uid") else ""
    return {
        "pid": pid, "name": info["name"], "cmdline": info["cmdline"], "username": info["username"], "gpus": gpus,
        "parent": parent, "launcher": verdict.top if verdict.top != pid else None, "container": box,
        "reason": "PID %d %s on GPU %s%s belongs to live PID %s (%s), not to this server: not ended" % (
            pid, info["name"] or "?", ", ".join(str(g) for g in gpus) or "?", inside, verdict.parent, label(parent)),
    }


def left_alone(seen: Seen, readings: t.Mapping[int, Reading], ours: t.Container[int]) -> t.Tuple[t.List[Entry], t.Dict[int, t.List[int]]]:
    """The result's ``left_alone`` (each holder of ``readings`` that the run left alone on purpose, with the rule that
    did and why) and, per GPU index, the PIDs of those that hold it."""
    entries: t.Dict[int, Entry] = {}
    busy: t.Dict[int, t.List[int]] = {}
    plan = seen.plan
    for index in sorted(readings):
        for holder in left_alone_on(readings[index], ours, plan.left_alone, seen.describe, excluder(seen.spec), seen.spec.ignore_foreign,
                                    seen.on_purpose):
            info = seen.describe(holder.pid)
            entry = entries.setdefault(holder.pid, {
                "pid": holder.pid, "name": info["name"], "cmdline": info["cmdline"], "username": info["username"], "gpus": [],
                "used_memory_mib": 0, "rule": plan.on_purpose[holder.pid], "why": plan.left_alone[holder.pid]})
            entry["gpus"].append(index)
            entry["used_memory_mib"] = add_mib(entry["used_memory_mib"], holder.used_memory_mib)
            busy.setdefault(index, []).append(holder.pid)
    return [entries[pid] for pid in sorted(entries)], busy


def check_result(seen: Seen, before: t.Mapping[int, Reading]) -> Entry:
    """Check mode: what a real run would signal, what it would leave and why it would fail."""
    plan, describe = seen.plan, seen.describe
    states = {tg.pid: describe.state(tg.pid) for tg in plan.targets}
    would = [tg for tg in plan.targets if states[tg.pid] != "zombie"]
    refused = [container for container in seen.held if container.refused]
    # a refused container's holders stay, named with the refusal; a container to stop takes its targets with it
    kept = dict(plan.left_alone)
    for container in seen.held:
        if container.refused:
            kept.update((pid, container.refused) for pid in container.pids)
        else:
            states.update((pid, describe.state(pid)) for pid in container.pids)
    predictions = {index: predict(before[index], seen.spec.memory_threshold_mib, states, kept, describe, excluder(seen.spec),
                                  seen.spec.ignore_foreign, seen.spec.keep_live_jobs, seen.on_purpose) for index in sorted(before)}
    left, busy = left_alone(seen, before, set(states))
    gpus = []
    for index in sorted(before):
        entry = gpu_entry(before[index], None, [], describe.before, describe)
        entry["predicted_memory_used_mib_after"] = predictions[index].used_mib
        entry["processes_would_remain"] = [{"pid": h.pid, "name": describe.before.get(h.pid, describe(h.pid))["name"],
                                            "used_memory_mib": h.used_memory_mib} for h in predictions[index].remaining]
        entry["left_alone"] = busy.get(index, [])
        gpus.append(entry)
    would_fail = [text for index in sorted(before) for text in predictions[index].failures]
    warnings = plan.warnings + ["a real run would fail: " + text for text in would_fail]
    stopping = [] if refused else seen.held
    return {
        "gpus": gpus, "killed": [], "warnings_list": warnings + restart_warnings(stopping, seen.runtimes),
        "elapsed_s": seen.elapsed(), "changed": bool(would or stopping) and not refused, "verified": None,
        "would_kill": [target_entry(tg) for tg in would], "would_fail": would_fail, "foreign": seen.foreign, "left_alone": left,
        "would_stop_containers": [container.entry() for container in stopping],
        "containers_refused": [dict(container.entry(), reason=container.refused) for container in refused],
        "msg": _check_msg(before, would, stopping, refused, busy, left, would_fail),
    }


def _check_msg(before: t.Mapping[int, Reading], would: t.Sequence[Target], stopping: t.Sequence[HeldContainer],
               refused: t.Sequence[HeldContainer], busy: t.Mapping[int, t.List[int]], left: t.Sequence[Entry], would_fail: t.Sequence[str]) -> str:
    if refused:
        return "check mode: a real run would refuse before it signals or stops anything: %s" % "; ".join(
            t.cast(str, container.refused) for container in refused)
    return "check mode: would end %d process(es)%s on GPU %s%s%s" % (
        len(would), " and stop %d container(s) through their runtime (%s)" % (
            len(stopping), ", ".join(container.label() for container in stopping)) if stopping else "",
        _indices(before), _busy_text(busy, left, "would keep"), "; a real run would fail: " + "; ".join(would_fail) if would_fail else "")


def refused_result(seen: Seen, before: t.Mapping[int, Reading], respawn_watch: Entry) -> Entry:
    """A container refuses the run (see containers.py): it fails before it signals or stops anything, naming each
    refused container. A GPU it holds is not free; nor is one with any other holder (none was ended)."""
    refused = [container for container in seen.held if container.refused]
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
            problems += judge(before[index], seen.spec.memory_threshold_mib, {}, seen.plan.left_alone, seen.describe, excluder(seen.spec),
                              seen.spec.ignore_foreign, False, seen.spec.keep_live_jobs, seen.on_purpose)
    left, busy = left_alone(seen, before, set())
    gpus = [gpu_entry(before[index], before[index], problems, seen.describe.before, seen.describe) for index in sorted(before)]
    for entry in gpus:
        entry["left_alone"] = busy.get(entry["index"], [])
    return {
        "gpus": gpus, "killed": [], "warnings_list": seen.plan.warnings, "elapsed_s": seen.elapsed(),
        "foreign": seen.foreign, "left_alone": left, "respawn_watch": respawn_watch,
        "reading_after": {"fresh_session": False, "session_opened_s": None}, "changed": False, "verified": False,
        "survivors": [], "containers_refused": [dict(container.entry(), reason=container.refused) for container in refused],
        "containers_stopped": [],
        "msg": "refused before signalling or stopping anything: %s" % "; ".join(t.cast(str, container.refused) for container in refused),
        "evidence": seen.evidence(pid for container in refused for pid in container.pids),
    }


def run_result(seen: Seen, before: t.Mapping[int, Reading], after: t.Mapping[int, Reading], outcomes: t.Sequence[Outcome],
               problems: t.Sequence[Problem], watch: Watch, verification: Verification) -> Entry:
    """A real run's result: what it ended, stopped and left, and whether fresh readings verified the GPUs free."""
    gpus = [gpu_entry(before[index], after[index], problems, seen.describe.before, seen.describe) for index in sorted(before)]
    left, busy = left_alone(seen, after, {o.target.pid for o in outcomes})
    for entry in gpus:
        entry["left_alone"] = busy.get(entry["index"], [])
    listed = {holder.pid for reading in after.values() for holder in reading.holders}
    # a zombie that NVML still lists has not let go of its memory: a survivor, not a kill
    stuck = {o.target.pid for o in outcomes if o.ended == "zombie" and o.target.pid in listed}
    ended = [o for o in outcomes if o.ended is not None and o.target.pid not in stuck]
    result: Entry = {
        "gpus": gpus,
        "killed": [_killed_entry(o) for o in ended],
        "warnings_list": seen.plan.warnings,
        "elapsed_s": seen.elapsed(),
        "foreign": seen.foreign,
        "left_alone": left,
        "respawn_watch": watch.report(verification.waited),
        "reading_after": {"fresh_session": verification.fresh_at is not None, "session_opened_s": verification.fresh_at},
    }
    survivors = [o for o in outcomes if o.ended is None or o.target.pid in stuck]
    result["containers_stopped"] = [container.stopped_entry() for container in seen.held]
    result["containers_refused"] = []
    # the containers stopped that stay stopped (one started again is named among the problems)
    stopped = [c for c in seen.held if c.stop_error is None and c.after is not None and c.after.running is False]
    result["warnings_list"] = list(seen.plan.warnings) + restart_warnings(stopped, seen.runtimes)
    result["changed"] = any(o.signal is not None for o in outcomes) or any(container.stopped for container in seen.held)
    result["verified"] = not problems and not survivors
    if result["verified"]:
        # a process the tree left as it ended that still runs, holding nothing after the window: said, not a failure
        # (a daemon's new process on the same host, started at that moment, looks the same)
        result["warnings_list"] += [
            "pid %d (%s) holds no selected GPU after the respawn watch, but still runs: %s" % (
                pid, watch.detached[pid]["info"]["name"], watch.detached_text(pid)) for pid in watch.running_detached()]
    result["survivors"] = [dict(target_entry(o.target), error=o.error, signal=o.signal, state=seen.describe(o.target.pid)["state"])
                           for o in survivors]
    count = _count_text(ended, seen.held, stopped)
    if result["verified"]:
        result["msg"] = _verified_msg(before, gpus, busy, left, count)
        return result
    texts = [p.text for p in problems] + ["pid %d (%s, %s, state %s): %s" % (
        o.target.pid, o.target.name, o.target.role, seen.describe(o.target.pid)["state"], o.error or "survived every signal")
        for o in survivors if o.target.pid not in listed]
    result["msg"] = "GPUs not freed (%s): %s" % (count, "; ".join(texts))
    result["evidence"] = seen.evidence(_problem_pids(after, problems) | {o.target.pid for o in survivors})
    return result


def _count_text(ended: t.Sequence[Outcome], held: t.Sequence[HeldContainer], stopped: t.Sequence[HeldContainer]) -> str:
    """"ended 3 process(es)", with those that exited without a signal of their own and the containers stopped."""
    signalled = sum(1 for o in ended if o.signal is not None)
    unsignalled = len(ended) - signalled
    count = "ended %d process(es)%s" % (len(ended), " (%d exited once their launcher or tree was signalled)" % unsignalled if unsignalled else "")
    if held:
        count += ", stopped %d of %d container(s) through their runtime%s" % (
            len(stopped), len(held), " (%s)" % ", ".join(c.label() for c in stopped) if stopped else "")
    return count


def _verified_msg(before: t.Mapping[int, Reading], gpus: t.Sequence[Entry], busy: t.Mapping[int, t.List[int]],
                  left: t.Sequence[Entry], count: str) -> str:
    freed = sum(g["freed_mib"] or 0 for g in gpus)
    free = [index for index in sorted(before) if index not in busy]
    return "%s%s: %s, %d MiB came back" % (
        "GPU %s verified free by fresh NVML readings" % ", ".join(str(index) for index in free) if free else "no GPU read free",
        _busy_text(busy, left, "kept"), count, freed)


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


def target_entry(target: Target) -> Entry:
    return {"pid": target.pid, "name": target.name, "cmdline": target.cmdline, "username": target.username,
            "role": target.role, "gpus": target.gpus}


def _killed_entry(outcome: Outcome) -> Entry:
    return dict(target_entry(outcome.target), signal=outcome.signal, seconds_to_exit=outcome.seconds, ended=outcome.ended)


def gpu_entry(before: Reading, after: t.Optional[Reading], problems: t.Sequence[Problem],
              described_before: t.Mapping[int, Entry], describe: t.Callable[[int], Entry]) -> Entry:
    used_before = None if before.memory is None else before.memory.used_mib
    used_after = None if after is None or after.memory is None else after.memory.used_mib
    entry: Entry = {
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
