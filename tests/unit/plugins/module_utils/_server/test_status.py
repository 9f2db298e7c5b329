# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""status.read_server: one reading in every mode, the listener taken over or not, a refusal, the decision."""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError
from ansible_collections.gpuops.fleet.plugins.module_utils._server.status import TakeoverRefused, check_options, read_server, taken_over

psutil = pytest.importorskip("psutil")

KEYS = {"mode", "running", "pid", "create_time", "config_hash", "config_matches", "healthy", "health", "generates",
        "generation", "crash_loop", "record"}


class Module:
    check_mode = False


def listener_of(info):
    calls = []

    def read(psutil_, port, match=None, unit=None, stop_units=False):
        calls.append((port, match, unit, stop_units))
        return info
    read.calls = calls
    return read


@pytest.fixture
def record(tmp_path):
    """A process record of this test's own process (it runs), config hash h1."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"pid": os.getpid(), "create_time": psutil.Process().create_time(), "config_hash": "h1"}))
    return str(path)


def test_a_listener_that_is_the_running_server_is_not_taken_over(record):
    me = {"pid": os.getpid(), "how": "shell", "refusal": None}
    read = listener_of(me)
    reading = read_server(Module(), psutil, {"state_file": record, "config_hash": "h1", "listener": {"port": 8000, "stop_units": True},
                                             "decide": {"state": "started", "force": False}}, read)
    assert KEYS <= set(reading) and reading["mode"] == "process" and reading["running"] and reading["pid"] == os.getpid()
    assert reading["listener"] == me and reading["takeover"] is None
    # no /health asked: not healthy, so the decision says so
    assert reading["reason"] == "it does not answer /health (no answer)"
    assert read.calls == [(8000, None, None, True)]


def test_another_listener_is_taken_over_and_no_server_ran(tmp_path):
    other = {"pid": 4242, "how": "tmux", "refusal": None}
    reading = read_server(Module(), psutil, {"state_file": str(tmp_path / "none.json"), "listener": {"port": 8000},
                                             "decide": {"state": "started"}}, listener_of(other))
    assert reading["takeover"] == other and reading["running"] is False
    assert reading["reason"] == "no managed server ran"


def test_a_refused_listener_fails_naming_it_with_the_reading(tmp_path):
    other = {"pid": 4242, "how": "systemd", "refusal": "port 8000 is held by the vLLM server PID 4242 (...)"}
    with pytest.raises(TakeoverRefused) as caught:
        read_server(Module(), psutil, {"state_file": str(tmp_path / "none.json"), "listener": {"port": 8000}}, listener_of(other))
    assert str(caught.value) == "vllm_server: nothing was stopped: port 8000 is held by the vLLM server PID 4242 (...)"
    assert caught.value.result["takeover"] == other and caught.value.result["running"] is False


def test_own_unit_and_the_unit_passed_to_the_listener(tmp_path, monkeypatch):
    """In the systemd mode the listener is judged against the server's own unit."""
    read = listener_of({"pid": 7, "how": "own_unit", "refusal": None})
    from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import systemd  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(systemd, "show", lambda module, unit: {"LoadState": "loaded", "ActiveState": "inactive", "MainPID": "0"})
    reading = read_server(Module(), psutil, {"mode": "systemd", "unit": "u.service", "state_file": str(tmp_path / "r.json"),
                                             "listener": {"port": 1}}, read)
    assert read.calls[0][2] == "u.service" and reading["takeover"] is None and reading["mode"] == "systemd"


@pytest.mark.parametrize("listener, reading, taken", [
    (None, {"running": True, "pid": 1}, False),
    ({"pid": 5, "how": "own_unit"}, {"running": False, "pid": None}, False),
    ({"pid": 5, "how": "shell"}, {"running": True, "pid": 5}, False),
    ({"pid": 5, "how": "shell"}, {"running": True, "pid": 6}, True),
    ({"pid": 5, "how": "shell"}, {"running": False, "pid": 5}, True),
])
def test_taken_over(listener, reading, taken):
    assert (taken_over(listener, reading) is not None) is taken


@pytest.mark.parametrize("options, needle", [
    ({"mode": "systemd"}, "status.unit"),
    ({"listener": {"port": 0}}, "status.listener.port"),
    ({"generate": {"url": "h:1", "timeout": 1}}, "status.generate.url"),
])
def test_bad_options_are_named(options, needle):
    with pytest.raises(SpecError) as caught:
        check_options(options, "status.")
    assert needle in str(caught.value)
