# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_reclaim's lineage watch (_reclaim/lineage.py): how a process started during the run is sorted, where a target's
orphans go, and which target's exit a process the tree left as it ended is laid at."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.lineage import (
    adopters, DETACHED, END, KEEP, Known, nearest_exit, sort_new, Sorted, UNRELATED)

# the plan: a reaper (40, a subreaper under PID 1) above a worker (300, group 300) that a supervisor (200) does not hold
WORKER, REAPER, SUPERVISOR = 300, 40, 200
KNOWN = Known(parents={SUPERVISOR}, targets={WORKER}, pgids={WORKER}, detached=set(), adopters={1, REAPER})
OURS = "/user.slice/user-1000.slice/session-3.scope"


def sort(rows, known=KNOWN, pgids=None, cgroups=None, kill_tree=True, parent_why=None):
    """sort_new over ``rows`` (pid -> ppid): each process in its own group unless ``pgids`` says otherwise, in OURS
    unless ``cgroups`` says otherwise."""
    pgids = pgids or {}
    cgroups = cgroups or {}
    return sort_new({pid: {"ppid": ppid} for pid, ppid in rows.items()}, known, lambda pid: pgids.get(pid, pid),
                    lambda _pid, _row: parent_why, lambda _pid, _row: None if kill_tree else "kill_tree is false",
                    lambda pid: cgroups.get(pid, OURS) == OURS)


def test_a_daemon_left_by_the_worker_is_detached_not_unrelated():
    """The worker's fork in a new session, its parent gone: now the reaper's child, in the worker's cgroup."""
    assert sort({301: REAPER}) == {301: Sorted(DETACHED, None, None)}
    assert sort({301: 1}) == {301: Sorted(DETACHED, None, None)}, "no subreaper above: PID 1 adopts it"


def test_a_daemons_second_fork_is_detached_through_its_parent_in_either_order():
    """301 (an orphan) forked 302 before it exited; 302 may be listed before 301 (a wrapped PID)."""
    assert sort({301: REAPER, 302: 301}) == {301: Sorted(DETACHED, None, None), 302: Sorted(DETACHED, None, 301)}
    assert sort({301: REAPER, 300_000: 301}) == {301: Sorted(DETACHED, None, None), 300_000: Sorted(DETACHED, None, 301)}
    known = KNOWN._replace(detached={301})
    assert sort({302: 301}, known) == {302: Sorted(DETACHED, None, 301)}, "a child of one found at an earlier scan"


def test_another_cgroup_or_a_live_strangers_child_is_unrelated():
    """A service PID 1 starts meanwhile lives in its own cgroup; a new process below a live stranger is its own."""
    assert sort({301: 1}, cgroups={301: "/system.slice/cron.service"}) == {301: Sorted(UNRELATED, None, None)}
    assert sort({301: 900}) == {301: Sorted(UNRELATED, None, None)}
    assert sort({301: 900, 302: 301}) == {301: Sorted(UNRELATED, None, None), 302: Sorted(UNRELATED, None, None)}


def test_proven_lineage_comes_first_and_is_ended_or_kept():
    # a child of the worker, or of its group, in its cgroup too: ended with kill_tree (a respawn), kept without
    assert sort({301: WORKER}) == {301: Sorted(END, None, WORKER)}
    assert sort({301: REAPER}, pgids={301: WORKER}) == {301: Sorted(END, None, None)}, "its group, though its parent is gone"
    assert sort({301: WORKER}, kill_tree=False) == {301: Sorted(KEEP, "kill_tree is false", WORKER)}
    # a child of a live parent of a target: that rule's verdict
    assert sort({301: SUPERVISOR}) == {301: Sorted(END, None, SUPERVISOR)}
    assert sort({301: SUPERVISOR}, parent_why="does not match `match`") == {301: Sorted(KEEP, "does not match `match`", SUPERVISOR)}


def test_a_child_of_a_respawn_found_in_the_same_scan_is_the_respawns():
    """301 (the worker's child, ended) forked 302 before the scan: 302 is in the lineage too, not unrelated."""
    assert sort({301: WORKER, 302: 301}) == {301: Sorted(END, None, WORKER), 302: Sorted(END, None, 301)}


def test_adopters_are_pid_1_and_every_ancestor_of_a_target():
    chains = {300: [40, 7, 1], 310: [41, 1], 320: []}
    assert adopters(chains.__getitem__, [300, 310, 320]) == {1, 7, 40, 41}
    assert adopters(chains.__getitem__, []) == {1}


@pytest.mark.parametrize("start, expected", [(10.0, 300), (10.004, 300), (10.02, 310), (9.0, 300), (99.0, 320)])
def test_the_nearest_exit_names_the_forker(start, expected):
    """A fork in a signal handler starts just before its forker's exit, a daemon's second fork just after it."""
    assert nearest_exit(start, {300: 10.005, 310: 10.02, 320: 12.0}) == expected


def test_the_nearest_exit_without_exits_or_on_a_tie():
    assert nearest_exit(10.0, {}) is None
    assert nearest_exit(10.0, {310: 10.5, 300: 9.5}) == 300
