# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_watch against a fake systemctl (tests/unit/plugins/fake_systemctl.py): installed, enabled and started once; a
rerun asks nothing of systemd; a changed setting restarts it; check mode writes and starts nothing; absent disables,
stops and removes; bad options fail before anything is written, naming the option."""

from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.gpuops.fleet.plugins.modules import gpu_watch
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_systemctl import FakeSystemctl
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import (
    assert_documented_as_specified, call_main, capture, documented_options,
)

UNIT = "gpuops-watch.service"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    capture(monkeypatch)
    found = FakeSystemctl(str(tmp_path / "systemctl"), str(tmp_path / "units"))
    monkeypatch.setenv("PATH", found.bin + os.pathsep + os.environ["PATH"])
    try:
        yield found
    finally:
        found.end_all()


def args(fake, tmp_path, **more):
    return dict({"dir": str(tmp_path / "watch"), "unit_dir": fake.unit_dir, "python": sys.executable, "host": "gpu-node-01"}, **more)


def test_documented_as_specified():
    assert_documented_as_specified(documented_options(gpu_watch.DOCUMENTATION), gpu_watch.ARGUMENT_SPEC)


def test_install_rerun_change_and_remove(fake, tmp_path):
    first = call_main(gpu_watch, args(fake, tmp_path))
    assert first["changed"] and not first["failed"] and first["url"] == "http://0.0.0.0:9835/metrics"
    assert fake.verbs() == ["daemon-reload", "enable " + UNIT, "start " + UNIT]
    assert fake.units()[UNIT]["ActiveState"] == "active" and fake.units()[UNIT]["UnitFileState"] == "enabled"
    unit = os.path.join(fake.unit_dir, UNIT)
    assert "--host gpu-node-01" in open(unit, encoding="utf-8").read()
    assert any(path.endswith("_watch/serve.py") for path in first["files"])

    again = call_main(gpu_watch, args(fake, tmp_path))
    assert not again["changed"] and again["files"] == [] and fake.verbs() == ["daemon-reload", "enable " + UNIT, "start " + UNIT]

    moved = call_main(gpu_watch, args(fake, tmp_path, port=9900))
    assert moved["changed"] and fake.verbs()[3:] == ["daemon-reload", "restart " + UNIT]

    # a file of the code changed on the host (an older version's): rewritten, and the service restarted
    serve = os.path.join(str(tmp_path / "watch"), "lib", [p for p in first["files"] if p.endswith("serve.py")][0])
    with open(serve, "a", encoding="utf-8") as handle:
        handle.write("# stale\n")
    stale = os.path.join(str(tmp_path / "watch"), "lib", "old.py")
    open(stale, "w", encoding="utf-8").close()
    fixed = call_main(gpu_watch, args(fake, tmp_path, port=9900))
    assert fixed["changed"] and set(fixed["files"]) == {os.path.relpath(serve, str(tmp_path / "watch" / "lib")), "old.py"}
    assert not os.path.exists(stale) and fake.verbs()[5:] == ["restart " + UNIT]

    preview = call_main(gpu_watch, args(fake, tmp_path, state="absent", _ansible_check_mode=True))
    assert preview["changed"] and os.path.exists(unit) and len(fake.verbs()) == 6

    gone = call_main(gpu_watch, args(fake, tmp_path, state="absent"))
    assert gone["changed"] and not os.path.exists(unit) and not os.path.exists(str(tmp_path / "watch"))
    assert fake.verbs()[6:] == ["disable " + UNIT, "daemon-reload"]
    assert not call_main(gpu_watch, args(fake, tmp_path, state="absent"))["changed"]


def test_check_mode_writes_and_starts_nothing(fake, tmp_path):
    preview = call_main(gpu_watch, args(fake, tmp_path, _ansible_check_mode=True))
    assert preview["changed"] and preview["service"]["started"] and preview["service"]["enabled"]
    assert not os.path.exists(str(tmp_path / "watch")) and not os.listdir(fake.unit_dir) and fake.verbs() == []


@pytest.mark.parametrize("bad, option, said", [
    ({"port": 0}, "port", "port: 0 must be from 1 to 65535"),
    ({"listen": "all"}, "listen", "listen: 'all' is not an IP address"),
    ({"interval": 2}, "interval", "interval: 2.0 must be from 5 to 3600 seconds"),
    ({"state_dir": "/var/lib/my state"}, "state_dir", "state_dir: '/var/lib/my state' may hold only"),
    ({"environment": {"LD_LIBRARY_PATH": "/opt/x y"}}, "environment", "environment.LD_LIBRARY_PATH: '/opt/x y' may hold only"),
    ({"python": "/nonexistent/python"}, "python", "python: /nonexistent/python is not an executable Python"),
])
def test_a_bad_option_fails_before_anything_is_written(fake, tmp_path, bad, option, said):
    failed = call_main(gpu_watch, args(fake, tmp_path, **bad))
    assert failed["failed"] and failed["option"] == option and failed["msg"].startswith(said), failed
    assert not os.path.exists(str(tmp_path / "watch")) and not os.listdir(fake.unit_dir) and fake.verbs() == []
