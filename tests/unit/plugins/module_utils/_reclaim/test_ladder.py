# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The escalation ladder on a fake process table and a fake clock: who got which signal, when each ended."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.ladder import POLL_S, run_ladder
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.plan import Target
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_psutil import FakeClock, FakePsutil, IGNORES_TERM, KILL, Row, TERM

LADDER = [("SIGTERM", TERM), ("SIGKILL", KILL)]


@pytest.fixture
def clock():
    return FakeClock()


def target(row, role="holder"):
    return Target(row.pid, row.create_time, row.name, row.cmdline, row.username, role, 0, [0])


def ladder(clock, rows, signals=None, grace=10.0):
    psutil = FakePsutil(rows, clock)
    outcomes = run_ladder(psutil, [target(row) for row in rows], signals or LADDER, grace, clock=clock, sleep=clock.sleep)
    return psutil, outcomes


def test_term_ends_everyone_and_kill_is_never_sent(clock):
    rows = [Row(pid, 1, "VLLM::Worker_TP%d" % pid) for pid in range(100, 108)]
    psutil, outcomes = ladder(clock, rows)
    assert psutil.signals == [(pid, TERM) for pid in range(100, 108)]
    assert [(o.target.pid, o.signal, o.ended, o.error) for o in outcomes] == [(pid, "SIGTERM", "exited", None) for pid in range(100, 108)]
    assert clock.now <= POLL_S, "nobody waits for a grace once every process is gone"


def test_signals_are_sent_in_the_order_given_launchers_first(clock):
    launcher, engine, worker = Row(10, 1, "python3"), Row(11, 10, "VLLM::EngineCore"), Row(12, 11, "VLLM::Worker_TP0")
    psutil = FakePsutil([worker, engine, launcher], clock)
    targets = [target(launcher, "launcher"), target(engine, "descendant"), target(worker)]
    outcomes = run_ladder(psutil, targets, LADDER, 10.0, clock=clock, sleep=clock.sleep)
    assert [pid for pid, _number in psutil.signals] == [10, 11, 12]
    assert [o.target.pid for o in outcomes] == [10, 11, 12]


def test_escalation_records_the_signal_that_ended_each(clock):
    polite, stubborn = Row(100, 1, "VLLM::Worker_TP0"), Row(101, 1, "VLLM::Worker_TP1", on_signal=IGNORES_TERM)
    psutil, outcomes = ladder(clock, [polite, stubborn], grace=2.0)
    assert psutil.signalled(100) == [TERM]
    assert psutil.signalled(101) == [TERM, KILL]
    by_pid = {o.target.pid: o for o in outcomes}
    assert (by_pid[100].signal, by_pid[100].ended) == ("SIGTERM", "exited")
    assert (by_pid[101].signal, by_pid[101].ended) == ("SIGKILL", "exited")
    assert by_pid[100].seconds <= POLL_S
    assert 2.0 <= by_pid[101].seconds <= 2.0 + 2 * POLL_S, "KILL comes after one grace, not before"


def test_early_exit_does_not_wait_for_the_grace_and_slow_ones_do_not_hold_up_fast_ones(clock):
    fast = Row(100, 1, "fast", on_signal={TERM: ("exit", 0.1)})
    slow = Row(101, 1, "slow", on_signal={TERM: ("exit", 2.5)})
    psutil, outcomes = ladder(clock, [slow, fast], grace=30.0)
    by_pid = {o.target.pid: o for o in outcomes}
    assert 0.1 <= by_pid[100].seconds <= 0.1 + 2 * POLL_S
    assert 2.5 <= by_pid[101].seconds <= 2.5 + 2 * POLL_S
    assert clock.now <= 2.5 + 2 * POLL_S, "the ladder ends when the slowest process has exited, not at the grace"
    assert KILL not in psutil.signalled(101)


def test_survivor_of_every_signal_is_reported_after_each_grace(clock):
    rows = [Row(100, 1, "stuck", status="disk-sleep", on_signal={})]
    psutil, outcomes = ladder(clock, rows, grace=1.5)
    assert psutil.signalled(100) == [TERM, KILL]
    assert [(o.signal, o.seconds, o.ended, o.error) for o in outcomes] == [("SIGKILL", None, None, None)]
    assert 3.0 <= clock.now <= 3.0 + 2 * POLL_S, "one grace per step, then give up"


def test_zombie_counts_as_ended(clock):
    rows = [Row(100, 1, "VLLM::Worker_TP0", on_signal={TERM: ("zombie", 0.2)})]
    psutil, outcomes = ladder(clock, rows)
    assert [(o.signal, o.ended) for o in outcomes] == [("SIGTERM", "zombie")]
    assert psutil.signalled(100) == [TERM], "a zombie is not signalled again"


def test_zombie_before_any_signal_is_not_signalled(clock):
    rows = [Row(100, 1, "VLLM::Worker_TP0", status="zombie")]
    psutil, outcomes = ladder(clock, rows)
    assert psutil.signals == []
    assert [(o.signal, o.ended) for o in outcomes] == [(None, "zombie")]


def test_access_denied_is_an_error_and_others_still_go(clock):
    root_owned = Row(100, 1, "VLLM::Worker_TP0", username="root", denied=True)
    ours = Row(101, 1, "VLLM::Worker_TP1")
    psutil, outcomes = ladder(clock, [root_owned, ours])
    by_pid = {o.target.pid: o for o in outcomes}
    assert by_pid[100].ended is None and by_pid[100].signal is None
    assert by_pid[100].error == "permission denied sending SIGTERM (run as root or as the process owner)"
    assert (by_pid[101].signal, by_pid[101].ended, by_pid[101].error) == ("SIGTERM", "exited", None)
    assert psutil.signals == [(101, TERM)]


def test_access_denied_on_a_later_step_keeps_the_signal_already_sent(clock):
    row = Row(100, 1, "VLLM::Worker_TP0", on_signal={})
    psutil = FakePsutil([row], clock)

    def deny_after_first_grace(seconds):
        clock.sleep(seconds)
        row.denied = clock.now >= 1.0

    outcomes = run_ladder(psutil, [target(row)], LADDER, 1.0, clock=clock, sleep=deny_after_first_grace)
    assert psutil.signals == [(100, TERM)]
    assert [(o.signal, o.ended, o.error) for o in outcomes] == [
        ("SIGTERM", None, "permission denied sending SIGKILL (run as root or as the process owner)")]


def test_reused_pid_is_never_signalled(clock):
    # planned at start time 1000.0; the PID now names a process started later
    reused = Row(100, 1, "bash", create_time=1234.5)
    psutil = FakePsutil([reused], clock)
    planned = Target(100, 1000.0, "VLLM::Worker_TP0", ["VLLM::Worker_TP0"], "vllm", "holder", 0, [0])
    outcomes = run_ladder(psutil, [planned], LADDER, 10.0, clock=clock, sleep=clock.sleep)
    assert psutil.signals == []
    assert [(o.signal, o.ended) for o in outcomes] == [(None, "exited before any signal was sent")]
    assert 100 in psutil.table, "the new process is left running"


def test_pid_reused_between_term_and_kill_is_not_killed(clock):
    row = Row(100, 1, "VLLM::Worker_TP0", on_signal={})
    psutil = FakePsutil([row], clock)

    def reuse_pid_during_grace(seconds):
        clock.sleep(seconds)
        psutil.table[100] = Row(100, 1, "postgres", create_time=5000.0, on_signal={})

    outcomes = run_ladder(psutil, [target(row)], LADDER, 1.0, clock=clock, sleep=reuse_pid_during_grace)
    assert psutil.signals == [(100, TERM)], "KILL must not reach the process that took the PID"
    assert [(o.signal, o.ended) for o in outcomes] == [("SIGTERM", "exited")]


def test_process_gone_before_the_ladder_is_reported_exited_unsignalled(clock):
    psutil = FakePsutil([], clock)
    planned = Target(100, 1000.0, "VLLM::Worker_TP0", ["VLLM::Worker_TP0"], "vllm", "holder", 0, [0])
    outcomes = run_ladder(psutil, [planned], LADDER, 10.0, clock=clock, sleep=clock.sleep)
    assert [(o.signal, o.seconds, o.ended, o.error) for o in outcomes] == [(None, 0.0, "exited before any signal was sent", None)]
    assert clock.slept == []


def test_ladder_of_other_signals(clock):
    rows = [Row(100, 1, "w", on_signal={TERM: ("exit", 0.5)})]
    psutil, outcomes = ladder(clock, rows, signals=[("SIGINT", 2), ("SIGTERM", TERM)], grace=1.0)
    assert psutil.signalled(100) == [2, TERM]
    assert [(o.signal, o.ended) for o in outcomes] == [("SIGTERM", "exited")]


def test_deadline_cuts_every_step_to_its_share(clock):
    """grace 20, timeout 3: TERM waits 1.5 s (half the time left), KILL the rest; over by 3 s, not 22 s."""
    rows = [Row(100, 1, "stubborn", on_signal=IGNORES_TERM)]
    psutil = FakePsutil(rows, clock)
    outcomes = run_ladder(psutil, [target(row) for row in rows], LADDER, 20.0, clock=clock, sleep=clock.sleep, deadline=3.0)
    assert psutil.signalled(100) == [TERM, KILL]
    assert [(o.signal, o.ended) for o in outcomes] == [("SIGKILL", "exited")]
    assert 1.5 - 2 * POLL_S <= outcomes[0].seconds <= 1.5 + 2 * POLL_S
    assert clock.now <= 3.0


def test_survivor_past_the_deadline_is_given_up_on_time(clock):
    rows = [Row(100, 1, "immortal", on_signal={})]
    psutil = FakePsutil(rows, clock)
    outcomes = run_ladder(psutil, [target(row) for row in rows], LADDER, 20.0, clock=clock, sleep=clock.sleep, deadline=3.0)
    assert [(o.signal, o.ended) for o in outcomes] == [("SIGKILL", None)]
    assert clock.now <= 3.0 + 2 * POLL_S


def test_worker_that_exits_with_its_launcher_is_reported(clock):
    """The launcher ends its workers itself on SIGTERM, before this run reaches them: they are still in the result."""
    launcher = Row(100, 1, "vllm", on_signal={TERM: ("exit", 0.0)})
    workers = [Row(pid, 100, "VLLM::Worker_TP%d" % (pid - 101), on_signal={}) for pid in (101, 102)]
    holder = {}

    def launcher_shutdown(pid):
        if pid == 100:
            for worker in workers:
                holder["psutil"].table.pop(worker.pid, None)

    psutil = holder["psutil"] = FakePsutil([launcher] + workers, clock, launcher_shutdown)
    outcomes = run_ladder(psutil, [target(launcher, "launcher")] + [target(w) for w in workers], LADDER, 1.0, clock=clock, sleep=clock.sleep)
    assert psutil.signals == [(100, TERM)]
    assert [(o.target.pid, o.signal, o.ended) for o in outcomes] == [
        (100, "SIGTERM", "exited"),
        (101, None, "exited after its launcher was signalled"),
        (102, None, "exited after its launcher was signalled")]


def test_processes_forked_during_the_ladder_are_signalled(clock):
    child = Row(200, 1, "respawned", on_signal={TERM: ("exit", 0.0)})
    holder = Row(100, 1, "holder", on_signal={TERM: ("exit", 0.0), KILL: ("exit", 0.0)}, spawn=child)
    psutil = FakePsutil([holder], clock)

    def discover(known):
        return [Target(pid, psutil.table[pid].create_time, psutil.table[pid].name, [], "vllm", "respawned", 1, [])
                for pid in psutil.pids() if pid not in known]

    outcomes = run_ladder(psutil, [target(holder)], LADDER, 1.0, clock=clock, sleep=clock.sleep, discover=discover)
    assert [(o.target.pid, o.target.role, o.signal, o.ended) for o in outcomes] == [
        (100, "holder", "SIGTERM", "exited"), (200, "respawned", "SIGTERM", "exited")]
    assert 200 not in psutil.table
