# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim's readings of the selected GPUs, and the judgement of a fresh one: free, or why not.

The memory half of that judgement is _gpu/state.py's (memory_held: more than the threshold in use holds the GPU, whoever
holds it). Its holder half is not is_held's ("a listed holder holds it"): here each holder is classified first (this
run's, signalled; another namespace's, maybe ignored; excluded; left alone on purpose; unverifiable), some of them hold
the GPU only through their memory, and each that does hold it is a reason of its own, in words.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import Holder, Memory, NvmlSession, renew
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.errors import NvmlError
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.state import memory_held
from ansible_collections.gpuops.fleet.plugins.module_utils._host.pid_trust import UNVERIFIABLE
from ansible_collections.gpuops.fleet.plugins.module_utils._host.processes import START_TIME_TOLERANCE_S
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.ladder import Outcome, run_ladder
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.lineage import RESPAWN_WINDOW_S, Watch
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import Descriptions
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import AUTO, ReclaimSpec, excluder

VERIFY_POLL_S = 0.02
# why NVML may still list a process that this run ended (or stopped with its container), and whether waiting may help
Signalled = t.Mapping[int, t.Tuple[str, bool]]


class Reading(t.NamedTuple):
    """One GPU read through NVML; ``error`` set (and the rest empty) when the GPU does not answer."""

    index: int
    uuid: t.Optional[str]
    memory: t.Optional[Memory]
    holders: t.List[Holder]
    error: t.Optional[str]


class Problem(t.NamedTuple):
    """Why a GPU is not free. ``waitable``: it may still resolve (a signalled process, memory coming back)."""

    gpu: int
    text: str
    waitable: bool


def read_gpu(session: NvmlSession, index: int, uuid: t.Optional[str] = None,
             describe: t.Optional[t.Callable[[int], t.Dict[str, t.Any]]] = None) -> Reading:
    """A fresh reading of one GPU: memory and every holder (compute, graphics and MPS lists).

    ``uuid``: known from an earlier reading, so a polling loop does not ask NVML for it again.
    ``describe``: with it, a listed PID that this namespace does not have is checked against a second NVML
    reading; one that NVML no longer lists exited during the reading and is dropped (it is not foreign).
    """
    try:
        uuid = uuid or session.uuid(index)
        reading = Reading(index, uuid, session.memory(index), session.holders(index), None)
    except NvmlError as exc:
        return Reading(index, None, None, [], "GPU %d: %s" % (index, exc))
    return reading if describe is None else drop_exited(session, reading, describe)


def drop_exited(session: NvmlSession, reading: Reading, describe: t.Callable[[int], t.Dict[str, t.Any]]) -> Reading:
    """Re-read a GPU whose list has a PID this namespace does not have: a PID NVML no longer lists exited during the
    reading and is dropped; one it still lists is another namespace's (or a driver teardown's)."""
    if reading.error is not None or all(describe(h.pid)["visible"] for h in reading.holders):
        return reading
    try:
        listed = {h.pid for h in session.holders(reading.index)}
    except NvmlError as exc:
        return Reading(reading.index, None, None, [], "GPU %d: %s" % (reading.index, exc))
    return reading._replace(holders=[h for h in reading.holders if describe(h.pid)["visible"] or h.pid in listed])


def _mib(value: t.Optional[int]) -> str:
    return "%s MiB" % ("N/A" if value is None else value)


# What a holder of a selected GPU is, for check mode and for the real run alike (classify() decides, once)
ENDED = "ended"  # this run signals it: check mode counts its memory as freed; after the run it must be gone
STUCK = "stuck"  # no signal ends it: a zombie, or this run's process gone from /proc while NVML still lists it
FOREIGN = "foreign"  # not visible in this PID namespace (a container's process?)
FOREIGN_IGNORED = "foreign, ignored"  # the same, with ignore_foreign: its memory is not counted
UNVERIFIABLE_HOLDER = UNVERIFIABLE  # the local process with NVML's PID may be another one (see _host/pid_trust.py)
EXCLUDED = "excluded"  # matches exclude (or is always excluded, spec.py): never a reason by itself, only its memory is
PROTECTED = "protected"  # left alone, but by no rule of this run (a respawn or a detached process it watched, ...)
KEPT = "kept"  # left alone on purpose by a rule of this run (plan.py's on_purpose); live_jobs: keep accepts it on its GPU
UNACCOUNTED = "unaccounted"  # neither this run's nor left alone: appeared during the run, or no rule ends it
NO_PROCESS = "memory without a process"  # the GPU's memory above idle_threshold_mib with no holder to blame
HOLDER_CLASSES = (ENDED, STUCK, FOREIGN, FOREIGN_IGNORED, UNVERIFIABLE_HOLDER, EXCLUDED, KEPT, PROTECTED, UNACCOUNTED)

# pid -> start time (psutil's create_time) of each holder the plan left alone on purpose
OnPurpose = t.Mapping[int, t.Optional[float]]


def is_on_purpose(on_purpose: t.Optional[OnPurpose], pid: int, info: t.Mapping[str, t.Any]) -> bool:
    """``pid`` is a holder the plan left alone on purpose, and the same process (its start time known and unchanged)."""
    if not on_purpose or pid not in on_purpose:
        return False
    created, now = on_purpose[pid], info.get("create_time")
    return created is not None and now is not None and abs(now - created) <= START_TIME_TOLERANCE_S


def classify(info: t.Dict[str, t.Any], ours: bool, state: t.Optional[str], left_alone: t.Optional[str],
             excluded: t.Callable[[t.Dict[str, t.Any]], bool], ignore_foreign: bool, on_purpose: bool = False) -> str:
    """The class of one GPU holder (one of HOLDER_CLASSES). ``info``: its description (describe()); ``ours``: this run
    signals it (check mode: would); ``state``: its process state when it is ours; ``left_alone``: why the plan leaves it
    alone, if it does; ``on_purpose``: by a rule of this run (is_on_purpose). A zombie is never KEPT: no job runs there."""
    if ours:
        if not info["visible"] or state == "zombie":
            return STUCK
        return ENDED
    if not info["visible"]:
        return FOREIGN_IGNORED if ignore_foreign else FOREIGN
    if left_alone is not None and left_alone.startswith(UNVERIFIABLE):
        return UNVERIFIABLE_HOLDER
    if excluded(info):
        return EXCLUDED
    if on_purpose and left_alone is not None:
        return STUCK if info["state"] == "zombie" else KEPT
    if left_alone is not None:
        return PROTECTED
    if info["state"] == "zombie":
        return STUCK
    return UNACCOUNTED


def judge(reading: Reading, threshold_mib: int, signalled: t.Mapping[int, t.Tuple[str, bool]], left_alone: t.Mapping[int, str],
          describe: t.Callable[[int], t.Dict[str, t.Any]], excluded: t.Callable[[t.Dict[str, t.Any]], bool],
          ignore_foreign: bool, settling: bool = True, keep: bool = False, on_purpose: t.Optional[OnPurpose] = None) -> t.List[Problem]:
    """Every reason this GPU is not free; an empty list means verified free (with ``keep``: or busy only with holders
    left alone on purpose).

    ``settling``: this run signalled a holder of this GPU, so memory held by no process may still come back.
    An excluded holder is never a reason by itself, but its GPU counts as free only at most ``threshold_mib``.
    ``on_purpose``: the holders the plan left alone by a rule of this run (is_on_purpose); each is a reason, unless
    ``keep`` (live_jobs: keep): then what they hold is theirs (an excluded one's too), and a GPU that only they hold fails
    only when its memory beyond theirs is above ``threshold_mib`` (held by no process, or by an excluded holder that
    appeared during the run).
    """
    if reading.error is not None or reading.memory is None:
        return [Problem(reading.index, reading.error or "GPU %d: no memory reading" % reading.index, False)]
    problems: t.List[Problem] = []
    discounted = 0
    counted_holders = 0
    counted_mib: t.Optional[int] = 0
    kept: t.List[str] = []
    live: t.List[str] = []  # with keep: the holders left alone on purpose, accepted
    live_mib: t.Optional[int] = 0
    # not _gpu/state.py's is_held: a holder here is a reason only by its class (see the module doc)
    for holder in reading.holders:
        info = describe(holder.pid)
        where = "GPU %d: pid %d" % (reading.index, holder.pid)
        mib = _mib(holder.used_memory_mib)
        if not (excluded(info) and info["visible"]) and not (ignore_foreign and not info["visible"] and holder.pid not in signalled):
            counted_mib = add_mib(counted_mib, holder.used_memory_mib)
        accepted = is_on_purpose(on_purpose, holder.pid, info)
        kind = classify(info, holder.pid in signalled, info["state"], left_alone.get(holder.pid), excluded, ignore_foreign, accepted)
        if kind == FOREIGN_IGNORED:
            discounted += holder.used_memory_mib or 0
            continue
        if keep and accepted and kind in (KEPT, EXCLUDED):
            live.append("pid %d (%s, %s)" % (holder.pid, info["name"], mib))
            live_mib = add_mib(live_mib, holder.used_memory_mib)
            continue
        if kind == EXCLUDED:
            # left alone on purpose; it keeps the GPU busy only if the memory says so (judged below)
            kept.append("pid %d (%s, excluded, %s)" % (holder.pid, info["name"], mib))
            continue
        counted_holders += 1
        label = "%s (%s, state %s) holds %s" % (where, info["name"], info["state"], mib)
        if holder.pid in signalled and not info["visible"]:
            # ours, and gone from /proc: NVML lags behind, or the driver's teardown is stuck; never another namespace's
            problems.append(Problem(reading.index, "%s exited after a signal but NVML still lists it with %s: "
                                    "the driver has not released its memory" % (where, mib), True))
        elif holder.pid in signalled:
            why, waitable = signalled[holder.pid]
            problems.append(Problem(reading.index, label + ": " + why, waitable))
        elif kind == FOREIGN:
            problems.append(Problem(reading.index, "%s holds %s but is not visible in this PID namespace (a container's process?): "
                                    "run on the host PID namespace (e.g. not inside a container), or set ignore_foreign" % (where, mib), False))
        elif kind == UNVERIFIABLE_HOLDER:
            # NVML's number may be another namespace's process: the local one is not named as the holder
            problems.append(Problem(reading.index, "%s holds %s: %s" % (where, mib, left_alone[holder.pid]), False))
        elif kind in (PROTECTED, KEPT):
            problems.append(Problem(reading.index, label + ": not signalled: " + left_alone[holder.pid], False))
        elif kind == STUCK:
            problems.append(Problem(reading.index, _zombie(where, info, mib), False))
        else:
            problems.append(Problem(reading.index, label + ": appeared during the reclaim (respawned by a launcher left alive?)", False))
    used = reading.memory.used_mib - discounted
    if live and counted_holders == 0:
        # busy only with holders left alone on purpose (keep): what they hold is theirs; the rest is judged as without them
        rest = None if live_mib is None else used - live_mib
        if memory_held(rest, threshold_mib):
            problems.append(Problem(reading.index, "GPU %d: %d MiB used, %d MiB of it beyond what the holders left alone hold (%s), above "
                                    "idle_threshold_mib %d: %s" % (reading.index, used, rest, ", ".join(live), threshold_mib,
                                                                   _beyond(kept)), settling))
        return problems
    rest = used if counted_holders == 0 else (None if counted_mib is None else used - counted_mib)
    if kept and not live and memory_held(rest, threshold_mib):
        problems.append(Problem(reading.index, "GPU %d: %d MiB used (above idle_threshold_mib %d) while excluded holders keep it: %s" % (
            reading.index, used, threshold_mib, ", ".join(kept)), counted_holders > 0))
    elif counted_holders == 0 and memory_held(used, threshold_mib):
        problems.append(Problem(reading.index, "GPU %d: %d MiB used with no process holding it (above idle_threshold_mib %d): "
                                "memory held by no process, e.g. a driver teardown that did not finish" % (reading.index, used, threshold_mib),
                                settling))
    return problems


def _beyond(excluded_holders: t.Sequence[str]) -> str:
    """What holds the memory beyond that of the holders left alone on purpose."""
    if excluded_holders:
        return "excluded holders keep it (%s) or no process holds it" % ", ".join(excluded_holders)
    return "memory held by no process, e.g. a driver teardown that did not finish"


def add_mib(total: t.Optional[int], mib: t.Optional[int]) -> t.Optional[int]:
    """A sum of MiB that is None once one of its terms is not available."""
    return None if total is None or mib is None else total + mib


def left_alone_on(reading: Reading, ours: t.Container[int], left_alone: t.Mapping[int, str],
                  describe: t.Callable[[int], t.Dict[str, t.Any]], excluded: t.Callable[[t.Dict[str, t.Any]], bool],
                  ignore_foreign: bool, on_purpose: t.Optional[OnPurpose]) -> t.List[Holder]:
    """The holders of a reading that the plan left alone on purpose (KEPT, and EXCLUDED ones it saw): what keeps the GPU
    busy by the run's own choice. ``ours``: what the run signals (check mode: would)."""
    found = []
    for holder in reading.holders:
        info = describe(holder.pid)
        accepted = is_on_purpose(on_purpose, holder.pid, info)
        kind = classify(info, holder.pid in ours, info["state"], left_alone.get(holder.pid), excluded, ignore_foreign, accepted)
        if kind == KEPT or (kind == EXCLUDED and accepted):
            found.append(holder)
    return found


def _zombie(where: str, info: t.Mapping[str, t.Any], mib: str) -> str:
    return "%s (%s) holds %s but is a zombie: no signal ends it, its memory stays until its parent reaps it" % (where, info["name"], mib)


class Prediction(t.NamedTuple):
    """Check mode: what a real run would leave on one GPU."""

    used_mib: t.Optional[int]  # None when a going holder's memory is N/A
    remaining: t.List[Holder]
    failures: t.List[str]


def predict(reading: Reading, threshold_mib: int, going: t.Mapping[int, t.Optional[str]], left_alone: t.Mapping[int, str],
            describe: t.Callable[[int], t.Dict[str, t.Any]], excluded: t.Callable[[t.Dict[str, t.Any]], bool],
            ignore_foreign: bool, keep: bool = False, on_purpose: t.Optional[OnPurpose] = None) -> Prediction:
    """``going``: pid -> its state, for the holders a real run would signal. What would stay, and why a real run would fail
    (``keep`` and ``on_purpose`` as for judge())."""
    if reading.error is not None or reading.memory is None:
        return Prediction(None, [], [reading.error or "GPU %d: no memory reading" % reading.index])
    failures: t.List[str] = []
    remaining: t.List[Holder] = []
    used: t.Optional[int] = reading.memory.used_mib
    kept: t.List[str] = []
    live: t.List[str] = []  # with keep: the holders left alone on purpose, accepted
    live_mib: t.Optional[int] = 0
    for holder in reading.holders:
        info = describe(holder.pid)
        where = "GPU %d: pid %d" % (reading.index, holder.pid)
        accepted = is_on_purpose(on_purpose, holder.pid, info)
        kind = classify(info, holder.pid in going, going.get(holder.pid), left_alone.get(holder.pid), excluded, ignore_foreign, accepted)
        if kind in (ENDED, FOREIGN_IGNORED):
            used = None if used is None or holder.used_memory_mib is None else used - holder.used_memory_mib
            continue
        remaining.append(holder)
        mib = _mib(holder.used_memory_mib)
        if keep and accepted and kind in (KEPT, EXCLUDED):
            live.append("pid %d (%s, %s)" % (holder.pid, info["name"], mib))
            live_mib = add_mib(live_mib, holder.used_memory_mib)
        elif kind == FOREIGN:
            failures.append("%s holds %s but is not visible in this PID namespace (a container's process?)" % (where, mib))
        elif kind == UNVERIFIABLE_HOLDER:
            failures.append("%s holds %s: %s" % (where, mib, left_alone[holder.pid]))
        elif kind == STUCK:
            failures.append(_zombie(where, info, mib))
        elif kind == EXCLUDED:
            kept.append("pid %d (%s, excluded, %s)" % (holder.pid, info["name"], mib))
        elif kind in (PROTECTED, KEPT):
            failures.append("%s (%s) holds %s: not signalled: %s" % (where, info["name"], mib, left_alone[holder.pid]))
        else:
            failures.append("%s (%s) holds %s: no rule of this run ends it" % (where, info["name"], mib))
    if live and len(live) + len(kept) == len(remaining):
        # busy only with holders left alone on purpose (keep): what they hold is theirs; the rest is judged as without them
        rest = None if used is None or live_mib is None else used - live_mib
        if memory_held(rest, threshold_mib):
            failures.append("GPU %d: %d MiB would stay used, %d MiB of it beyond what the holders left alone hold (%s), above "
                            "idle_threshold_mib %d: %s" % (reading.index, used, rest, ", ".join(live), threshold_mib, _beyond(kept)))
    elif memory_held(used, threshold_mib):
        if kept and not live:
            failures.append("GPU %d: %d MiB would stay used (above idle_threshold_mib %d) while excluded holders keep it: %s" % (
                reading.index, used, threshold_mib, ", ".join(kept)))
        elif not remaining:
            failures.append("GPU %d: %d MiB would stay used with no process holding it (above idle_threshold_mib %d): "
                            "memory held by no process" % (reading.index, used, threshold_mib))
    return Prediction(used, remaining, failures)


def why_left(outcome: Outcome) -> t.Tuple[str, bool]:
    """Why a target is still listed by NVML, and whether waiting may help."""
    if outcome.error is not None:
        return outcome.error, False
    if outcome.ended == "zombie" and outcome.signal is None:
        return "a zombie before any signal: its parent has not reaped it and the driver still holds its memory", True
    if outcome.ended not in (None, "exited", "zombie"):
        return outcome.ended, True
    return "still there after every signal", True


class Verification:
    """Poll fresh NVML readings until every selected GPU reads free and stays so for the settle window, only
    lasting problems remain, or ``timeout`` (the last reading may come up to the window after it).

    Every poll also looks at the lineage of what was ended (lineage.py Watch.discover): a respawn found there is ended
    at once through the same ladder, and the window starts again. The window: ``settle`` seconds (a fixed number), or
    with ``settle: auto``, RESPAWN_WINDOW_S after the last change in the lineage, and only while a parent that could
    respawn a holder (lineage.py respawners) is alive or a process it forked that this run does not end still runs;
    otherwise the first free reading is the verification.

    Before the first of these readings the module's NVML session is shut down and a new one opened (see _gpu/nvml.py
    renew): what verifies does not rely on the session that planned and watched the ladder. ``fresh_at``: when that
    session was opened (seconds in; None when it could not be); ``waited``: how long the GPUs read free before they
    counted as verified."""

    def __init__(self, session: NvmlSession, psutil: t.Any, spec: ReclaimSpec, clock: t.Callable[[], float], start: float,
                 watch: Watch, describe: Descriptions, on_purpose: OnPurpose) -> None:
        self.session, self.psutil, self.spec, self.clock, self.start = session, psutil, spec, clock, start
        self.watch, self.describe, self.on_purpose = watch, describe, on_purpose
        self.deadline = start + spec.timeout
        self.fresh_at: t.Optional[float] = None
        self.waited = 0.0
        self._uuids: t.Dict[int, str] = {}  # index -> UUID, as the verification's session read it

    def run(self, before: t.Mapping[int, Reading], left_alone: t.Mapping[int, str], outcomes: t.Sequence[Outcome],
            stopped: Signalled, restart_at: t.Optional[float]) -> t.Tuple[t.Dict[int, Reading], t.List[Problem], t.List[Outcome]]:
        """The last readings, what keeps each GPU from being free, and every outcome (the respawns ended last). ``left_alone``:
        the plan's; ``stopped``: the targets of the containers stopped (containers.py stopped_pids); ``restart_at``: when
        their stops ended, if a runtime may start one again as it exits (the window then waits for it)."""
        indices = sorted(before)
        outcomes = list(outcomes)
        # every reading that verifies comes through an NVML session of its own, opened after the module's was shut down
        opened = round(self.clock() - self.start, 3)
        try:
            self.session = renew(self.session)
            self.fresh_at = opened
        except NvmlError as exc:
            after = {index: Reading(index, None, None, [], "GPU %d: %s" % (index, exc)) for index in indices}
            return after, [Problem(index, after[index].error or "", False) for index in indices], outcomes
        return self._poll(before, left_alone, outcomes, stopped, restart_at)

    def _poll(self, before: t.Mapping[int, Reading], left_alone: t.Mapping[int, str], outcomes: t.List[Outcome],
              stopped: Signalled, restart_at: t.Optional[float]) -> t.Tuple[t.Dict[int, Reading], t.List[Problem], t.List[Outcome]]:
        indices = sorted(before)
        free_since: t.Optional[float] = None
        quiet_since = self.clock()  # the ladder's end: the slowest target's exit, or its last signal
        signalled: t.Dict[int, t.Tuple[str, bool]] = {}
        settling: t.Set[int] = set()
        counted = -1
        while True:
            if self._end_respawns(outcomes):
                quiet_since, free_since = self.clock(), None
            if counted != len(outcomes):
                # every target is ours: one NVML still lists after it exited (signalled or not) is the driver lagging behind
                signalled = {o.target.pid: why_left(o) for o in outcomes}
                signalled.update(stopped)
                settling = {index for index in indices if any(holder.pid in signalled for holder in before[index].holders)}
                counted = len(outcomes)
            after, problems = self._judged(indices, before, left_alone, signalled, settling)
            now = self.clock()
            if not problems:
                if free_since is None:
                    free_since = now
                wait = self._window(now, free_since, quiet_since, restart_at)
                if wait <= 0 or now >= self.deadline:
                    self.waited = round(now - free_since, 3)
                    return after, problems, outcomes
                time.sleep(min(VERIFY_POLL_S, wait))
                continue
            free_since = None
            if not any(p.waitable for p in problems) or now >= self.deadline:
                return after, problems, outcomes
            time.sleep(VERIFY_POLL_S)

    def _end_respawns(self, outcomes: t.List[Outcome]) -> bool:
        """End at once, through the ladder, what the lineage of ``outcomes`` respawned since the last look (their outcomes
        join ``outcomes``); whether there was any."""
        if not outcomes or self.watch.table is None:
            return False
        found = self.watch.discover({o.target.pid for o in outcomes})
        if not found:
            return False
        began = self.clock()
        more = run_ladder(self.psutil, found, self.spec.signals, self.spec.grace, clock=self.clock,
                          deadline=self.deadline, discover=self.watch.discover)
        self.watch.note_exits(began, more)
        outcomes += more
        return True

    def _judged(self, indices: t.Sequence[int], before: t.Mapping[int, Reading], planned: t.Mapping[int, str], signalled: Signalled,
                settling: t.Set[int]) -> t.Tuple[t.Dict[int, Reading], t.List[Problem]]:
        """A fresh reading of every selected GPU, through the verification's own NVML session, and every reason one is
        not free. The first reading of that session reads each UUID again: it must be the one the first reading had."""
        left_alone = dict(planned)
        left_alone.update(self.watch.left_alone())
        self.describe.fresh()  # a fresh reading means fresh process states too
        first = not self._uuids
        after = {index: read_gpu(self.session, index, self._uuids.get(index), self.describe) for index in indices}
        problems: t.List[Problem] = []
        for index in indices:
            if first and None not in (after[index].uuid, before[index].uuid) and after[index].uuid != before[index].uuid:
                problems.append(Problem(index, "GPU %d: the verification's NVML session reads it as %s, the first reading as %s: "
                                        "the GPUs were renumbered during the run" % (index, after[index].uuid, before[index].uuid), False))
            if after[index].uuid is not None:
                self._uuids.setdefault(index, after[index].uuid)
            problems += judge(after[index], self.spec.memory_threshold_mib, signalled, left_alone, self.describe, excluder(self.spec),
                              self.spec.ignore_foreign, index in settling, self.spec.keep_live_jobs, self.on_purpose)
        listed = {holder.pid for reading in after.values() for holder in reading.holders}
        for gpus, text, waitable in self.watch.running_respawns(listed, self.clock()):
            problems += [Problem(gpu, "GPU %d: %s" % (gpu, text), waitable) for gpu in gpus or indices if gpu in after]
        return after, problems

    def _window(self, now: float, free_since: float, quiet_since: float, restart_at: t.Optional[float]) -> float:
        """Seconds the GPUs must still read free before they count as verified (0: now). With ``settle: auto``, as long
        as the lineage needs watching (Watch.waits), and RESPAWN_WINDOW_S after a container's stop whose runtime may
        start it again (a runtime that applies a restart policy does so as the container exits)."""
        if self.spec.settle != AUTO:
            return float(self.spec.settle) - (now - free_since)
        waits = self.watch.waits(now, quiet_since)
        if restart_at is not None:
            waits.append(RESPAWN_WINDOW_S - (now - restart_at))
        return max(waits + [0.0])
