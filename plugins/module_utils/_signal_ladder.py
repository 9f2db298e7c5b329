# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The escalation ladder: signal, wait up to ``grace`` for each process to exit, escalate.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._process_tree import Target

POLL_S = 0.01


class Outcome(t.NamedTuple):
    """How one target ended. ``signal``: the last signal sent before it exited (None: it was gone before any);
    ``ended``: exited, zombie (exited, not yet reaped by its parent) or None while it survives;
    ``error``: why a signal could not be sent (permission), else None."""

    target: Target
    signal: t.Optional[str]
    seconds: t.Optional[float]
    ended: t.Optional[str]
    error: t.Optional[str]


def _ended(psutil: t.Any, proc: t.Any) -> t.Optional[str]:
    """'exited' / 'zombie' once the process has exited; None while it runs (a reused PID counts as exited)."""
    try:
        if not proc.is_running():
            return "exited"
        return "zombie" if proc.status() == psutil.STATUS_ZOMBIE else None
    except psutil.NoSuchProcess:
        return "exited"


def _attach(psutil: t.Any, target: Target) -> t.Any:
    """The psutil handle of the target, or None if its PID is gone or now names another process."""
    try:
        proc = psutil.Process(target.pid)
    except psutil.NoSuchProcess:
        return None
    return proc if abs(proc.create_time() - target.create_time) < 0.05 else None


def run_ladder(psutil: t.Any, targets: t.Sequence[Target], signals: t.Sequence[t.Tuple[str, int]], grace: float,
               clock: t.Callable[[], float] = time.monotonic, sleep: t.Callable[[float], None] = time.sleep) -> t.List[Outcome]:
    """Send each signal to every target still running, in order (launchers first), then wait up to
    ``grace`` for them; a process that exits early does not hold up the others. Identity (start time)
    is checked right before every signal, so a reused PID is never signalled."""
    start = clock()
    outcomes: t.Dict[int, Outcome] = {}
    pending: t.List[t.Tuple[Target, t.Any]] = []
    for target in targets:
        proc = _attach(psutil, target)
        if proc is None:
            outcomes[target.pid] = Outcome(target, None, 0.0, "exited", None)
        else:
            pending.append((target, proc))
    last: t.Dict[int, str] = {}
    for name, number in signals:
        if not pending:
            break
        still: t.List[t.Tuple[Target, t.Any]] = []
        for target, proc in pending:
            ended = _ended(psutil, proc)
            if ended:
                outcomes[target.pid] = Outcome(target, last.get(target.pid), round(clock() - start, 3), ended, None)
                continue
            try:
                proc.send_signal(number)  # psutil refuses a PID whose start time changed
            except psutil.NoSuchProcess:
                outcomes[target.pid] = Outcome(target, last.get(target.pid), round(clock() - start, 3), "exited", None)
                continue
            except psutil.AccessDenied:
                outcomes[target.pid] = Outcome(target, last.get(target.pid), None, None,
                                               "permission denied sending %s (run as root or as the process owner)" % name)
                continue
            last[target.pid] = name
            still.append((target, proc))
        pending = still
        deadline = clock() + grace
        while pending:
            running = []
            for target, proc in pending:
                ended = _ended(psutil, proc)
                if ended:
                    outcomes[target.pid] = Outcome(target, last[target.pid], round(clock() - start, 3), ended, None)
                else:
                    running.append((target, proc))
            pending = running
            if not pending or clock() >= deadline:
                break
            sleep(POLL_S)
    for target, _proc in pending:
        outcomes[target.pid] = Outcome(target, last.get(target.pid), None, None, None)
    return [outcomes[target.pid] for target in targets]
