# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_watch): see budget.py. The event source extensions/eda/plugins/event_source/gpuops_watch.py imports
# this file and budget.py; nothing else does.

"""Self-healing's decisions over the hosts' endpoints (docs/self-healing.md): which conditions one scrape shows, a
hold-down (a condition must be seen in ``hold_down`` scrapes in a row before anything is decided), the budget's
decision (budget.py), and the end of a remediation judged from the endpoint itself: the host shows none of the
conditions again (ok), or ``timeout_s`` passed with it still there (failed). Pure: the clock and the audit are injected.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._watch.budget import Budget, DRY_RUN, PERSON, Policy, REMEDIATE

Families = t.Dict[str, t.List[t.Tuple[t.Dict[str, str], float]]]
ENGINE_DEAD = "engine_dead"
SERVER_DOWN = "server_down"
ORPHAN = "orphaned_gpu_memory"


def _by_server(families: Families, name: str) -> t.Dict[str, t.Tuple[t.Dict[str, str], float]]:
    return {labels.get("server", ""): (labels, value) for labels, value in families.get(name, [])}


def conditions(families: Families) -> t.Dict[str, t.Dict[str, t.Any]]:
    """The conditions one scrape of a host's endpoint shows: {condition: evidence}. A reading that failed
    (gpuops_watch_reading_ok 0) shows none: what cannot be read is not acted on."""
    ok = families.get("gpuops_watch_reading_ok", [])
    if not ok or any(value != 1 for _labels, value in ok):
        return {}
    found: t.Dict[str, t.Dict[str, t.Any]] = {}
    info = _by_server(families, "gpuops_server_info")
    health = _by_server(families, "gpuops_server_health")
    generates = _by_server(families, "gpuops_server_generates")
    started = _by_server(families, "gpuops_server_start_time_seconds")
    for server, (_labels, up) in sorted(_by_server(families, "gpuops_server_up").items()):
        seen = {"server": server, "pid": info.get(server, ({}, 0))[0].get("pid"), "up": up,
                "health": health.get(server, ({}, 0))[1], "generates": generates.get(server, ({}, 0))[1],
                "start_time": started.get(server, ({}, None))[1]}
        if up != 1:
            found.setdefault(SERVER_DOWN, {"servers": []})["servers"].append(seen)
        elif seen["health"] == 1 and seen["generates"] != 1:
            found.setdefault(ENGINE_DEAD, {"servers": []})["servers"].append(seen)
    orphans = [dict(labels, mib=value) for labels, value in families.get("gpuops_gpu_holder_memory_mib", [])
               if labels.get("class") == "orphan" and value > 0]
    if orphans:
        found[ORPHAN] = {"holders": sorted(orphans, key=lambda h: (h.get("gpu", ""), h.get("pid", "")))}
    return found


# the order a host's conditions are remediated in: a restart replaces the server and reclaims its GPUs (orphans too)
ORDER = (ENGINE_DEAD, SERVER_DOWN, ORPHAN)


class Healer:
    """The source's state across scrapes: the hold-down counts, the remediations in flight, the budget."""

    def __init__(self, policy: Policy, hold_down: int = 2, timeout_s: float = 600.0,
                 clock: t.Callable[[], float] = time.time, audit: t.Optional[t.Callable[[str], None]] = None) -> None:
        if isinstance(hold_down, bool) or not isinstance(hold_down, int) or hold_down < 1:
            raise ValueError("hold_down: %r must be a whole number of scrapes, 1 or more" % (hold_down,))
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ValueError("timeout_s: %r must be a number of seconds above 0" % (timeout_s,))
        self.hold_down = hold_down
        self.timeout_s = float(timeout_s)
        self._clock = clock
        self.budget = Budget(policy, clock=clock, audit=audit)
        self.seen: t.Dict[t.Tuple[str, str], int] = {}
        self.pending: t.Dict[str, t.Dict[str, t.Any]] = {}  # host -> {condition, evidence, started}
        self.announced: t.Set[str] = set()

    def observe(self, host: str, found: t.Optional[t.Mapping[str, t.Mapping[str, t.Any]]]) -> t.List[t.Dict[str, t.Any]]:
        """One scrape of ``host`` (None: no answer, which neither counts nor clears anything); the events to emit."""
        if found is None:
            return []
        now = self._clock()
        for condition in ORDER:
            key = (host, condition)
            self.seen[key] = self.seen.get(key, 0) + 1 if condition in found else 0
        events: t.List[t.Dict[str, t.Any]] = []
        flight = self.pending.get(host)
        if flight is not None:
            if not found:
                self.pending.pop(host)
                self.budget.finished(host, True, "healed: the endpoint shows none of the conditions, %.1f s after the event"
                                     % (now - flight["started"]))
                return events
            if now - flight["started"] < self.timeout_s:
                return events
            self.pending.pop(host)
            person = self.budget.finished(host, False, "%s still seen %.0f s after the event" % (", ".join(sorted(found)), now - flight["started"]))
            if not person:
                return events
        for condition in ORDER:
            if self.seen[(host, condition)] < self.hold_down:
                continue
            evidence = dict(found[condition], scrapes=self.seen[(host, condition)])
            decision = self.budget.decide(host, condition, evidence)
            if decision.action == REMEDIATE:
                self.pending[host] = {"condition": condition, "evidence": evidence, "started": now}
            if decision.action == PERSON and host in self.announced:
                break
            if decision.action in (REMEDIATE, DRY_RUN, PERSON):
                if decision.action == PERSON:
                    self.announced.add(host)
                events.append({"gpuops_heal": {"action": "person_needed" if decision.action == PERSON else decision.action,
                                               "host": host, "condition": condition, "playbook": decision.playbook,
                                               "reason": decision.reason, "evidence": evidence, "at": round(now, 3)},
                               # ansible-rulebook limits a run_playbook to the event's meta.hosts
                               "meta": {"hosts": host}})
            break
        return events
