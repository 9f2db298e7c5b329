# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-server lock file: exclusive, re-entrant for its run, named holder, stale takeover, takeover of a run whose
ansible-playbook process is gone (judged on its controller), release by token only."""

from __future__ import annotations

import json
import multiprocessing
import os
import time

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.lock import LockHeld, acquire, release


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


# --- who holds it: a controller's identity, as the action plugin records it (plugin_utils/_lock_controller.py) ---

HERE = {"host": "ctl-01", "user": "alice", "pid": 4242, "pid_start": "ticks:500", "boot_id": "b-1", "machine_id": "m-1",
        "pid_namespace": "pid:[4026531836]"}


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
