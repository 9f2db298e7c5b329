# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-server lock file: exclusive, re-entrant for its run, named holder, stale takeover, takeover of a run whose
ansible-playbook process is gone (judged on its controller), release by token only."""

from __future__ import annotations

import json
import multiprocessing
import os
import pwd
import subprocess
import sys
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.lock import (
    LockHeld, acquire, controller_identity, holder_verdict, leftover_workers, process_start, release)


def test_first_run_takes_the_lock_and_records_its_owner(tmp_path):
    path = str(tmp_path / "sub" / "vllm-8000.lock")
    outcome = acquire(path, "alice running 'restart'", "run-a", 3600, now=1000.0)
    assert outcome.acquired and outcome.warning is None
    data = json.loads(open(path).read())
    assert data["owner"] == "alice running 'restart'" and data["token"] == "run-a" and data["since"] == 1000.0


def test_same_run_locks_again_without_acquiring(tmp_path):
    path = str(tmp_path / "l")
    acquire(path, "a", "run-a", 3600, now=1000.0)
    again = acquire(path, "a", "run-a", 3600, now=1001.0)
    assert not again.acquired and again.holder["token"] == "run-a"


def test_second_run_fails_naming_the_holder_and_the_age(tmp_path):
    path = str(tmp_path / "l")
    acquire(path, "alice running 'restart'", "run-a", 3600, now=1000.0)
    with pytest.raises(LockHeld) as info:
        acquire(path, "bob", "run-b", 3600, now=1042.0)
    text = str(info.value)
    assert "alice running 'restart'" in text and "run-a" in text and "for 42 s" in text and path in text
    assert json.loads(open(path).read())["token"] == "run-a"  # untouched


def test_stale_lock_is_taken_over_with_a_warning(tmp_path):
    path = str(tmp_path / "l")
    acquire(path, "alice", "run-a", 60, now=1000.0)
    outcome = acquire(path, "bob", "run-b", 60, now=1061.0)
    assert outcome.acquired and "stale" in outcome.warning and "alice" in outcome.warning
    assert json.loads(open(path).read())["token"] == "run-b"


def test_unreadable_lock_counts_as_held(tmp_path):
    path = tmp_path / "l"
    path.write_text("not json")
    with pytest.raises(LockHeld, match="unreadable lock file"):
        acquire(str(path), "bob", "run-b", 1e9)


def test_release_only_by_its_own_token(tmp_path):
    path = str(tmp_path / "l")
    acquire(path, "alice", "run-a", 3600)
    other = release(path, "run-b")
    assert not other.released and "held by alice" in other.warning
    mine = release(path, "run-a")
    assert mine.released
    assert not (tmp_path / "l").exists()
    assert not release(path, "run-a").released  # nothing left: not an error


# --- who holds it: the controller's identity, and whether the holder's ansible-playbook process is gone ---

HERE = {"host": "ctl-01", "user": "alice", "pid": 4242, "pid_start": "ticks:500", "boot_id": "b-1", "machine_id": "m-1",
        "pid_namespace": "pid:[4026531836]"}


def _holder(**controller):
    return {"owner": "alice", "token": "run-a", "since": 1000.0, "play": "Restart vLLM servers, rolling",
            "controller": dict(dict(HERE, pid=1234, pid_start="ticks:100"), **controller)}


def _gone(pid):
    raise ProcessLookupError(pid)


def test_holder_whose_playbook_pid_is_gone_on_this_controller_is_gone():
    gone, why = holder_verdict(_holder(), HERE, probe=_gone)
    assert gone and "PID 1234 no longer runs on ctl-01" in why


def test_holder_whose_playbook_pid_still_runs_with_its_start_time_is_alive():
    seen = []
    gone, why = holder_verdict(_holder(), HERE, probe=lambda pid: seen.append(pid) or "ticks:100")
    assert not gone and "still runs" in why and seen == [1234]


def test_holder_whose_pid_was_reused_by_a_later_process_is_gone():
    gone, why = holder_verdict(_holder(), HERE, probe=lambda pid: "ticks:900")
    assert gone and "now another process" in why and "ticks:900" in why


def test_holder_pid_alive_but_start_unreadable_counts_as_alive():
    assert not holder_verdict(_holder(), HERE, probe=lambda pid: None)[0]


@pytest.mark.parametrize("change, needle", [
    ({"host": "ctl-02"}, "came from controller ctl-02"),
    ({"machine_id": "m-2"}, "machine id"),
    ({"boot_id": "b-0"}, "boot"),
    ({"pid_namespace": "pid:[4026532000]"}, "PID namespace"),
])
def test_holder_from_another_controller_is_never_judged_gone_here(change, needle):
    probed = []
    gone, why = holder_verdict(_holder(**change), HERE, probe=lambda pid: probed.append(pid) or _gone(pid))
    assert not gone and needle in why
    assert not probed, "a PID of another controller means nothing here and must not be looked up"


def test_old_lock_without_controller_or_pid_is_not_judged():
    assert not holder_verdict({"owner": "bob running 'x'", "token": "t", "since": 1.0}, HERE, probe=_gone)[0]
    assert not holder_verdict(_holder(pid=None), HERE, probe=_gone)[0]
    assert not holder_verdict(_holder(pid=True), HERE, probe=_gone)[0]


def test_real_process_alive_then_gone_then_start_time_tells_reuse():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        here = controller_identity(os.getpid(), "ctl-01")
        holder = {"token": "run-a", "controller": controller_identity(child.pid, "ctl-01")}
        assert holder["controller"]["pid_start"].startswith("ticks:")
        assert not holder_verdict(holder, here)[0]
        reused = dict(holder, controller=dict(holder["controller"], pid_start="ticks:1"))
        assert holder_verdict(reused, here)[0]
    finally:
        child.kill()
        child.wait()
    gone, why = holder_verdict(holder, here)
    assert gone and "no longer runs" in why
    with pytest.raises(ProcessLookupError):
        process_start(child.pid)


def test_zombie_playbook_counts_as_gone():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open("/proc/%d/stat" % child.pid) as handle:
                if handle.read().rpartition(")")[2].split()[0] == "Z":
                    break
            time.sleep(0.02)
        with pytest.raises(ProcessLookupError):
            process_start(child.pid)
    finally:
        child.wait()


def test_identity_names_the_user_without_user_in_the_environment(monkeypatch):
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    identity = controller_identity(os.getpid(), "ctl-01")
    assert identity["user"] == pwd.getpwuid(os.getuid()).pw_name
    assert identity["host"] == "ctl-01" and identity["pid"] == os.getpid()
    assert identity["pid_start"] == process_start(os.getpid())


# --- taking over exactly the holder that is gone ---

def test_takeover_replaces_exactly_the_named_holder(tmp_path):
    path = str(tmp_path / "l")
    acquire(path, "alice", "run-a", 3600, now=1000.0, details={"controller": HERE, "play": "p"})
    outcome = acquire(path, "bob", "run-b", 3600, now=1010.0, takeover="run-a", details={"play": "q"})
    assert outcome.acquired and outcome.took_over["token"] == "run-a" and outcome.took_over["controller"] == HERE
    data = json.loads(open(path).read())
    assert data["token"] == "run-b" and data["play"] == "q" and data["since_utc"] == "1970-01-01 00:16:50 UTC"


def test_takeover_of_a_token_that_no_longer_holds_is_refused(tmp_path):
    path = str(tmp_path / "l")
    acquire(path, "carol", "run-c", 3600, now=1000.0)
    with pytest.raises(LockHeld) as info:
        acquire(path, "bob", "run-b", 3600, now=1010.0, takeover="run-a")
    assert info.value.holder["token"] == "run-c" and "carol" in str(info.value)
    assert json.loads(open(path).read())["token"] == "run-c"


def test_takeover_when_the_lock_is_already_gone_just_locks(tmp_path):
    path = str(tmp_path / "l")
    outcome = acquire(path, "bob", "run-b", 3600, takeover="run-a")
    assert outcome.acquired and outcome.took_over is None


def _race(path, token, start, results):
    while time.time() < start:
        time.sleep(0.001)
    try:
        outcome = acquire(path, token, token, 3600, takeover="run-dead")
        results.put((token, outcome.acquired))
    except LockHeld:
        results.put((token, False))


def test_racing_takeovers_of_one_holder_let_exactly_one_run_in(tmp_path):
    path = str(tmp_path / "l")
    for _round in range(5):
        if os.path.exists(path):
            os.unlink(path)
        acquire(path, "dead", "run-dead", 3600)
        context = multiprocessing.get_context("fork")
        results = context.Queue()
        start = time.time() + 0.3
        racers = [context.Process(target=_race, args=(path, "run-%d" % i, start, results)) for i in range(8)]
        for racer in racers:
            racer.start()
        won = [token for token, acquired in (results.get(timeout=30) for _racer in racers) if acquired]
        for racer in racers:
            racer.join(timeout=30)
        assert len(won) == 1, won
        assert json.loads(open(path).read())["token"] == won[0]


def test_refusal_names_user_controller_pid_play_since_and_both_overrides(tmp_path):
    path = str(tmp_path / "vllm-8000.lock")
    acquire(path, "ignored", "run-a", 7200, now=1_700_000_000.0,
            details={"controller": dict(HERE, pid=1234), "play": "Restart vLLM servers, rolling"})
    with pytest.raises(LockHeld) as info:
        acquire(path, "bob", "run-b", 7200, now=1_700_000_065.0)
    text = str(info.value)
    for needle in ("alice on controller ctl-01 (ansible-playbook PID 1234) running 'Restart vLLM servers, rolling'",
                   "since 2023-11-14 22:13:20 UTC (for 65 s)", "`-e vllm_server_lock_stale_after=<seconds>`", "`rm %s`" % path):
        assert needle in text, text
    assert info.value.holder["controller"]["pid"] == 1234


FORKING_MAIN = """
import os, sys, time
child = os.fork()
if child == 0:
    os.setsid()  # as an ansible task worker does
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
time.sleep(60)
"""


def test_task_workers_left_by_a_killed_playbook_are_found_until_they_end():
    main = subprocess.Popen([sys.executable, "-c", FORKING_MAIN, "ansible-playbook-lookalike"], stdout=subprocess.PIPE, text=True)
    worker = int(main.stdout.readline())
    try:
        there = controller_identity(main.pid, "ctl-01")
        assert there["argv_sha"]
        assert leftover_workers(there, os.getpid()) == [worker]  # its parent still runs: found all the same (same run)
        main.kill()
        main.wait()
        assert holder_verdict({"token": "t", "controller": there}, controller_identity(os.getpid(), "ctl-01"))[0]
        assert leftover_workers(there, os.getpid()) == [worker]  # orphaned: the task it runs goes on
        assert leftover_workers(dict(there, argv_sha="0" * 16), os.getpid()) == []
    finally:
        os.kill(worker, 9)
    deadline = time.monotonic() + 10
    while leftover_workers(there, os.getpid()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftover_workers(there, os.getpid()) == []
