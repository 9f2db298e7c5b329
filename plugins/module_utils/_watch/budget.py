# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_watch): the metrics endpoint of a GPU host (docs/watch.md). It may import the flat files of
# module_utils, _http, _host, _gpu, _reclaim, _server and _report (whose reading and classification it shows); never a
# module or a plugin, and no other package imports it.

"""The remediation budget: whether an event about a host (an orphan holding memory, an engine dead, a server down) may
start a remediation now. Pure decisions over an injected clock; every decision and every end of a remediation is one
JSON line of audit.

The rules, in order, for an event of a host:
1. a host whose remediations failed ``max_failures`` times in a row (within ``failure_window_s``) needs a person:
   nothing more runs for it until ``release(host)``;
2. a condition with no playbook (a crash loop, a lost GPU) needs a person;
3. a host already being remediated is left to that run;
4. at most one remediation per host per ``window_s``;
5. at most ``max_hosts`` hosts at once (a fleet-wide failure must not restart the whole fleet);
6. otherwise: remediate (with ``dry_run``: say so and run nothing; the window still counts, so a dry run shows the
   pace a real one would keep).

Not wired to ansible-rulebook yet: a later event source and rulebook (extensions/eda/) are to call decide() for each
event and finished() when the playbook ends.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import math
import sys
import time
import typing as t

REMEDIATE = "remediate"
DRY_RUN = "dry_run"
SKIP = "skip"
PERSON = "person"

# the condition of an event -> the playbook that remediates it (a condition not here needs a person)
PLAYBOOKS = {"orphaned_gpu_memory": "gpuops.fleet.gpu_cleanup", "engine_dead": "gpuops.fleet.restart_vllm",
             "server_down": "gpuops.fleet.restart_vllm"}


def _stdout(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Policy(t.NamedTuple):
    window_s: float = 3600.0  # at most one remediation per host in this many seconds
    max_hosts: int = 1  # hosts remediated at once
    max_failures: int = 2  # failed remediations in a row of one host before a person is needed
    failure_window_s: float = 86400.0  # failures older than this are forgotten
    dry_run: bool = False

    def check(self) -> "Policy":
        """This policy, or ValueError naming the field and its value."""
        for name in ("window_s", "failure_window_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError("%s: %r must be a number of seconds above 0" % (name, value))
        for name in ("max_hosts", "max_failures"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError("%s: %r must be a whole number, 1 or more" % (name, value))
        if not isinstance(self.dry_run, bool):
            raise ValueError("dry_run: %r must be true or false" % (self.dry_run,))
        return self


class Decision(t.NamedTuple):
    action: str  # REMEDIATE, DRY_RUN, SKIP or PERSON
    host: str
    condition: str
    playbook: t.Optional[str]
    reason: str


class Budget:
    """The state of the remediations: which hosts run one, when each last started, each host's failures in a row."""

    def __init__(self, policy: Policy, clock: t.Callable[[], float] = time.time,
                 audit: t.Optional[t.Callable[[str], None]] = None) -> None:
        self.policy = policy.check()
        self._clock = clock
        self._audit = audit or _stdout
        self.running: t.Dict[str, float] = {}
        self.started: t.Dict[str, float] = {}
        self.failures: t.Dict[str, t.List[float]] = {}
        self.person_needed: t.Dict[str, str] = {}

    def _write(self, event: str, host: str, **fields: t.Any) -> None:
        line = dict(fields, event=event, host=host, at=round(self._clock(), 3), dry_run=self.policy.dry_run,
                    running=sorted(self.running))
        self._audit(json.dumps(line, sort_keys=True, default=str))

    def _recent_failures(self, host: str, now: float) -> t.List[float]:
        kept = [when for when in self.failures.get(host, []) if now - when < self.policy.failure_window_s]
        self.failures[host] = kept
        return kept

    def _verdict(self, host: str, condition: str, now: float) -> t.Tuple[str, str]:
        policy = self.policy
        if host in self.person_needed:
            return PERSON, "a person is needed: %s" % self.person_needed[host]
        failed = self._recent_failures(host, now)
        if len(failed) >= policy.max_failures:
            why = "%d remediations in a row failed" % len(failed)
            self.person_needed[host] = why
            return PERSON, "a person is needed: %s" % why
        if condition not in PLAYBOOKS:
            return PERSON, "no playbook remediates %s" % condition
        if host in self.running:
            return SKIP, "a remediation of this host runs since %.0f" % self.running[host]
        last = self.started.get(host)
        if last is not None and now - last < policy.window_s:
            return SKIP, "remediated %.0f s ago; at most one per %g s (next at %.0f)" % (now - last, policy.window_s, last + policy.window_s)
        if len(self.running) >= policy.max_hosts:
            return SKIP, "%d host(s) already remediated at once (%s), at most %d" % (
                len(self.running), ", ".join(sorted(self.running)), policy.max_hosts)
        return (DRY_RUN, "dry run: would run %s" % PLAYBOOKS[condition]) if policy.dry_run else (REMEDIATE, "run %s" % PLAYBOOKS[condition])

    def decide(self, host: str, condition: str, evidence: t.Optional[t.Mapping[str, t.Any]] = None) -> Decision:
        """What to do about ``condition`` on ``host`` now; a REMEDIATE counts as running until finished(host)."""
        now = self._clock()
        action, reason = self._verdict(host, condition, now)
        if action == REMEDIATE:
            self.running[host] = now
        if action in (REMEDIATE, DRY_RUN):
            self.started[host] = now
        decision = Decision(action, host, condition, PLAYBOOKS.get(condition) if action in (REMEDIATE, DRY_RUN) else None, reason)
        self._write("decision", host, condition=condition, evidence=dict(evidence or {}), action=action, reason=reason,
                    playbook=decision.playbook)
        return decision

    def finished(self, host: str, ok: bool, detail: str = "") -> bool:
        """A remediation of ``host`` ended; whether the host now needs a person (its failures in a row reached the limit)."""
        now = self._clock()
        self.running.pop(host, None)
        if ok:
            self.failures.pop(host, None)
        else:
            self.failures.setdefault(host, []).append(now)
        failed = self._recent_failures(host, now)
        if len(failed) >= self.policy.max_failures:
            self.person_needed[host] = "%d remediations in a row failed" % len(failed)
        self._write("finished", host, ok=ok, detail=detail, failures=len(failed), person_needed=host in self.person_needed)
        return host in self.person_needed

    def release(self, host: str, who: str) -> None:
        """A person took care of ``host``: its failures are forgotten and it may be remediated again."""
        self.person_needed.pop(host, None)
        self.failures.pop(host, None)
        self._write("released", host, by=who)
