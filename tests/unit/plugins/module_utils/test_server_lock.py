# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-server lock file: exclusive, re-entrant for its run, named holder, stale takeover, release by token only."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server_lock import LockHeld, acquire, release


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
