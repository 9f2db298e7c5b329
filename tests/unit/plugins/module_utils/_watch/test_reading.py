# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The endpoint's reading between scrapes: one generation check per interval per server, start-ups counted, a systemd
server read from its unit, and the settings checked with their names."""

from __future__ import annotations

import argparse

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.generation import GenerationResult
from ansible_collections.gpuops.fleet.plugins.module_utils._watch import reading, serve


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Checks:
    def __init__(self, *answers):
        self.answers = list(answers)
        self.sent = []

    def __call__(self, url, model, timeout, key):
        self.sent.append((url, model, timeout, key))
        ok = self.answers.pop(0)
        return GenerationResult(ok, 4 if ok else 0, 0.1, 200 if ok else 500, "" if ok else "HTTP 500", "")


def test_one_check_per_interval_and_at_once_for_a_new_process():
    clock, checks = Clock(), Checks(True, False, True)
    prober = reading.Prober(30, 5, checks, clock)
    assert prober.result("a", (1, 1.0), "http://h:1", "m", "k") == (checks_result(True), 0)
    clock.now += 29.9
    found, age = prober.result("a", (1, 1.0), "http://h:1", "m", "k")
    assert found.ok and age == pytest.approx(29.9) and len(checks.sent) == 1  # reused: no request
    clock.now += 0.1
    assert not prober.result("a", (1, 1.0), "http://h:1", "m", "k")[0].ok and len(checks.sent) == 2
    clock.now += 1
    assert prober.result("a", (2, 5.0), "http://h:1", "m", "k")[0].ok and len(checks.sent) == 3  # a new process: at once
    assert checks.sent[0] == ("http://h:1", "m", 5, "k")


def checks_result(ok):
    return GenerationResult(ok, 4 if ok else 0, 0.1, 200 if ok else 500, "" if ok else "HTTP 500", "")


def test_startups_count_each_new_process_once():
    seen = reading.Startups()
    assert [seen.count("a", ident) for ident in [(1, 1.0), (1, 1.0), None, (1, 1.0), (2, 2.0), (3, 3.0)]] == [1, 1, 1, 1, 2, 3]
    assert seen.count("b", None) == 0


class FakePsutil:
    class Error(Exception):
        pass

    def __init__(self, cmdlines):
        self.cmdlines = cmdlines

    def Process(self, pid):  # noqa: N802 (psutil's name)
        fake = self

        class Proc:
            def cmdline(self):
                if pid not in fake.cmdlines:
                    raise fake.Error()
                return fake.cmdlines[pid]

            def create_time(self):
                return 77.0
        return Proc()


SETTINGS = reading.Settings(host="n1", interval=60, generate_timeout=5)


def test_a_running_healthy_server_is_asked_with_its_key_a_down_one_is_not():
    checks = Checks(True)
    prober = reading.Prober(60, 5, checks, Clock())
    psutil = FakePsutil({40: ["vllm", "serve", "m", "--api-key", "sk-1"]})
    entry = {"name": "vllm-8000", "pid": 40, "create_time": 77.0, "running": True, "healthy": True, "port": 8000, "model": "m"}
    state = reading.server_state(entry, SETTINGS, psutil, prober, reading.Startups())
    assert (state.up, state.health, state.generates, state.startups, state.mode) == (True, True, True, 1, "process")
    assert checks.sent == [("http://127.0.0.1:8000", "m", 5, "sk-1")]
    for changed in ({"healthy": False}, {"running": False, "healthy": None}, {"group": {"name": "g", "rank": 1}}):
        state = reading.server_state(dict(entry, **changed), SETTINGS, psutil, prober, reading.Startups())
        assert state.generates is None and len(checks.sent) == 1, changed
    down = reading.server_state(dict(entry, running=False), SETTINGS, psutil, prober, reading.Startups())
    assert (down.up, down.pid, down.start_time, down.startups) == (False, None, None, 0)


def test_a_systemd_server_is_read_from_its_unit():
    checks = Checks(True)
    asked = []

    def run(argv):
        asked.append(argv)
        return 0, "ActiveState=active\nSubState=running\nMainPID=40\nNRestarts=5\n", ""

    entry = {"name": "vllm-8000", "unit": "gpuops-vllm-8000.service", "running": None, "argv": ["vllm", "serve", "m", "--port=8001"]}
    state = reading.server_state(entry, SETTINGS, FakePsutil({40: ["vllm"]}), reading.Prober(60, 5, checks, Clock()), reading.Startups(),
                                 run, lambda url: url == "http://127.0.0.1:8001/health")
    assert asked[0][0] == "systemctl" and asked[0][-1] == "gpuops-vllm-8000.service"
    assert (state.mode, state.up, state.pid, state.restarts, state.health, state.generates, state.port) == (
        "systemd", True, 40, 5, True, True, "8001")


def args(**changed):
    found = serve.parser().parse_args([])
    for key, value in changed.items():
        setattr(found, key, value)
    return found


@pytest.mark.parametrize("changed, expected", [
    ({"listen": "localhost"}, "listen: 'localhost' is not an IP address"),
    ({"port": 0}, "port: 0 must be from 1 to 65535"),
    ({"port": 70000}, "port: 70000"),
    ({"interval": 1.0}, "interval: 1.0 must be from 5 to 3600 seconds"),
    ({"generate_timeout": 0.0}, "generate_timeout: 0.0"),
    ({"health_timeout": 61.0}, "health_timeout: 61.0"),
    ({"state_dir": "relative/dir"}, "state_dir: 'relative/dir' is not an absolute path"),
    ({"host": "two words"}, "host: 'two words'"),
])
def test_a_bad_setting_is_named_with_its_value(changed, expected):
    with pytest.raises(serve.SettingsError, match="^" + expected.replace("(", r"\(")):
        serve.check(args(**changed))


def test_good_settings_pass():
    serve.check(args())
    serve.check(args(listen="::1", port=9835, interval=5.0))
    assert isinstance(args(), argparse.Namespace)


def test_a_reading_that_fails_or_breaks_is_a_sample_saying_why(monkeypatch):
    watch = reading.Watch(SETTINGS, None, FakePsutil({}))
    monkeypatch.setattr(reading, "run_reading", lambda *a, **k: ({"msg": "NVML: driver not loaded"}, [], True))
    text = watch.text()
    assert 'gpuops_watch_reading_ok{host="n1"} 0' in text and 'error="NVML: driver not loaded"' in text
    assert "gpuops_gpus{" not in text

    def broken(*_args, **_kwargs):
        raise KeyError("gpus")
    monkeypatch.setattr(reading, "run_reading", broken)
    text = watch.text()
    assert 'gpuops_watch_reading_ok{host="n1"} 0' in text and "error=\"KeyError: 'gpus'\"" in text
    assert 'gpuops_watch_reading_duration_seconds{host="n1"}' in text
