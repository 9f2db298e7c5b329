# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""gpu_reclaim's lineage watch: where a process started during the run stands to what the run ends.

A process that is not in the plan's process table started after it. Each one is sorted once (sort_new):

- END: a respawn this run ends: a child of a target or a member of a target's process group (with ``kill_tree``),
  or a child of a live parent of a target that the run may end (see reclaim.py _may_end_respawn).
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

import typing as t

END = "end"
KEEP = "keep"
DETACHED = "detached"
UNRELATED = "unrelated"

Rule = t.Callable[[int, t.Mapping[str, t.Any]], t.Optional[str]]


class Known(t.NamedTuple):
    """What the run knows of its lineage when it sorts new processes."""

    parents: t.Collection[int]  # live parents of targets that could respawn one (reclaim.py _respawners)
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
