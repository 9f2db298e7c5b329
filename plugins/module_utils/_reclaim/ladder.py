# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The escalation ladder: signal, wait up to ``grace`` (and never past the task's deadline) for each process
to exit, escalate. Processes that the targets fork meanwhile (a respawn) join the ladder.

Package rule (_reclaim): what gpu_reclaim decides and does. It imports the flat files of module_utils, _host, _gpu
and its own files: never _bench, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.looks import ZOMBIE, Looks
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import Target

POLL_S = 0.01
DISCOVER_EVERY_S = 0.05

# ``ended`` of a target that this run did not signal itself but that exited once the ladder had begun
AFTER_LAUNCHER = "exited after its launcher was signalled"
AFTER_TREE = "exited after the first signal of the task"
BEFORE_ANY = "exited before any signal was sent"


class Outcome(t.NamedTuple):
    """How one target ended. ``signal``: the last signal sent to it before it exited (None: it got none);
    ``ended``: exited, zombie (exited, not yet reaped by its parent), one of the texts above for a target that
    exited without a signal of its own, or None while it survives; ``error``: why a signal could not be sent."""

    target: Target
    signal: t.Optional[str]
    seconds: t.Optional[float]
    ended: t.Optional[str]
    error: t.Optional[str]


class _Ladder:
    def __init__(self, psutil: t.Any, clock: t.Callable[[], float], looks: Looks) -> None:
        self.psutil = psutil
        self.looks = looks
        self.clock = clock
        self.start = clock()
        self.outcomes: t.Dict[int, Outcome] = {}
        self.order: t.List[Target] = []
        self.known: t.Set[int] = set()
        self.last: t.Dict[int, str] = {}
        self.any_sent = False

    def seconds(self) -> float:
        return round(self.clock() - self.start, 3)

    def gone(self, target: Target, ended: str) -> None:
        signal_name = self.last.get(target.pid)
        if signal_name is None and ended == "exited":
            if not self.any_sent:
                ended = BEFORE_ANY
            else:
                ended = AFTER_TREE if target.role == "launcher" else AFTER_LAUNCHER
        self.outcomes[target.pid] = Outcome(target, signal_name, self.seconds(), ended, None)

    def ended(self, target: Target) -> t.Optional[str]:
        """'exited' / 'zombie' once the target has exited; None while it runs (a reused PID counts as exited). One look."""
        state = self.looks.state(target.pid)
        return "exited" if state is None else "zombie" if state == ZOMBIE else None

    def add(self, targets: t.Iterable[Target]) -> t.List[Target]:
        """The targets not seen before that still are the processes the plan saw (their start time checked)."""
        attached = []
        for target in targets:
            if target.pid in self.known:
                continue
            self.known.add(target.pid)
            self.order.append(target)
            if self.looks.attach(target.pid, target.create_time):
                attached.append(target)
            else:
                self.gone(target, "exited")
        return attached

    def send(self, pending: t.Sequence[Target], name: str, number: int) -> t.List[Target]:
        still = []
        for target in pending:
            ended = self.ended(target)  # the look right before the signal: the identity check
            if ended:
                self.gone(target, ended)
                continue
            try:
                self.looks.kill(target.pid, number)
            except self.psutil.NoSuchProcess:
                self.gone(target, "exited")
                continue
            except self.psutil.AccessDenied:
                self.outcomes[target.pid] = Outcome(target, self.last.get(target.pid), None, None,
                                                    "permission denied sending %s (run as root or as the process owner)" % name)
                continue
            self.last[target.pid] = name
            self.any_sent = True
            still.append(target)
        return still


def run_ladder(psutil: t.Any, targets: t.Sequence[Target], signals: t.Sequence[t.Tuple[str, int]], grace: float,
               clock: t.Callable[[], float] = time.monotonic, sleep: t.Callable[[float], None] = time.sleep,
               deadline: t.Optional[float] = None,
               discover: t.Optional[t.Callable[[t.Set[int]], t.List[Target]]] = None,
               looks: t.Optional[Looks] = None) -> t.List[Outcome]:
    """Send each signal to every target still running, in order (launchers first), then wait for them; a
    process that exits early does not hold up the others. Identity (start time) is checked right before every
    signal, so a reused PID is never signalled.

    ``deadline`` (on ``clock``): the task's end; each step waits at most ``grace`` and at most its share of the
    time left (time left / steps left), so the whole ladder ends by the deadline. ``discover(known pids)``:
    processes the targets forked meanwhile; they join at the current step. ``looks``: how the targets are looked
    at (_reclaim/looks.py: one read of /proc/PID/stat per target per round); a new one by default.
    Returns an outcome per target, the discovered ones last.
    """
    ladder = _Ladder(psutil, clock, looks or Looks(psutil))
    pending = ladder.add(targets)
    last_look = clock()
    for step, (name, number) in enumerate(signals):
        if not pending:
            break
        pending = ladder.send(pending, name, number)
        wait = grace
        if deadline is not None:
            wait = max(0.0, min(grace, (deadline - clock()) / (len(signals) - step)))
        step_end = clock() + wait
        while True:
            running = []
            for target in pending:
                ended = ladder.ended(target)
                if ended:
                    ladder.gone(target, ended)
                else:
                    running.append(target)
            exited = len(running) < len(pending)
            pending = running
            if discover is not None and (exited or not pending or clock() - last_look >= DISCOVER_EVERY_S):
                last_look = clock()
                found = ladder.add(discover(set(ladder.known)))
                pending += ladder.send(found, name, number)
            if not pending or clock() >= step_end:
                break
            sleep(POLL_S)
    for target in pending:
        ladder.outcomes[target.pid] = Outcome(target, ladder.last.get(target.pid), None, None, None)
    return [ladder.outcomes[target.pid] for target in ladder.order]
