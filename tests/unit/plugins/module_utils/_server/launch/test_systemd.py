# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The systemd launch backend against a fake systemctl on PATH (its calls logged, its units in a file, a real
`sleep` as each started unit's main process): the files it writes and their modes, the unit rewritten and systemd
reloaded only on a change, a unit systemd does not know, check mode, the stop and the takeover of another unit."""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server import record as record_module
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import systemd
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.process import LaunchSpec, ServerError, Target
from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch.takeover import stop_takeover
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_systemctl import FakeModule, FakeSystemctl
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import LoopbackServer

psutil = pytest.importorskip("psutil")

UNIT = "gpuops-vllm-8000.service"
CONTENT = "[Service]\nExecStart=/usr/bin/vllm serve m --api-key ${GPUOPS_SECRET_ARG_5}\n"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    found = FakeSystemctl(str(tmp_path / "systemctl"), str(tmp_path / "etc-systemd"))
    monkeypatch.setenv("PATH", found.bin + os.pathsep + os.environ["PATH"])
    try:
        yield found
    finally:
        found.end_all()


@pytest.fixture
def where(tmp_path):
    state = tmp_path / "state"
    return {"state_file": str(state / "vllm-8000.json"), "env_file": str(state / "vllm-8000.env")}


def spec(where, content=CONTENT, env=None, enabled=True):
    argv = ["vllm", "serve", "m", "--api-key", "sk-1"]
    return LaunchSpec(argv=argv, env=dict(env if env is not None else {"NCCL_PROTO": "LL", "HF_TOKEN": 'a"b$c`d\\e'}),
                      shown_argv=["vllm", "serve", "m", "--api-key", "********"], metadata={"name": "vllm-8000"},
                      systemd={"content": content, "env_file": where["env_file"], "exec_env": {"GPUOPS_SECRET_ARG_5": "sk-1"},
                               "enabled": enabled})


def launch(fake, where, module=None, **kwargs):
    return systemd.launch(module or FakeModule(), psutil, Target(where["state_file"], UNIT, "h1"), spec(where, **kwargs),
                          unit_dir=fake.unit_dir)


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def mode_of(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_first_launch_writes_private_files_before_their_content_then_starts_and_enables(fake, where, monkeypatch):
    seen = []

    def watching(real):
        def write(path, content, mode=0o644, prefix=".gpuops."):
            if os.path.exists(path):
                seen.append((os.path.basename(path), mode_of(path), os.path.getsize(path)))
            return real(path, content, mode=mode, prefix=prefix)
        return write
    monkeypatch.setattr(systemd, "write_atomic", watching(systemd.write_atomic))
    monkeypatch.setattr(record_module, "write_atomic", watching(record_module.write_atomic))

    result = launch(fake, where)
    unit_path = os.path.join(fake.unit_dir, UNIT)
    # the env file and the record existed, 0600 and empty, when their content was written
    assert ("vllm-8000.env", 0o600, 0) in seen and ("vllm-8000.json", 0o600, 0) in seen, seen
    assert mode_of(where["env_file"]) == 0o600 and mode_of(where["state_file"]) == 0o600
    assert mode_of(os.path.dirname(where["state_file"])) == 0o755 and mode_of(unit_path) == 0o644
    with open(unit_path, encoding="utf-8") as handle:
        assert handle.read() == CONTENT
    with open(where["env_file"], encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    assert lines[0] == "# Ansible managed" and "vllm-8000" in lines[1]
    assert lines[3:] == ['HF_TOKEN="a\\"b\\$c\\`d\\\\e"', 'NCCL_PROTO="LL"', 'GPUOPS_SECRET_ARG_5="sk-1"']
    assert fake.verbs() == ["daemon-reload", "reset-failed %s" % UNIT, "enable %s" % UNIT, "start %s" % UNIT]
    main = fake.units()[UNIT]["MainPID"]
    assert result["launched"] and result["changed"] and result["running"] and result["pid"] == main and result["unit_changed"]
    assert result["create_time"] == psutil.Process(main).create_time()
    with open(where["state_file"], encoding="utf-8") as handle:
        recorded = json.load(handle)
    assert recorded == {"unit": UNIT, "config_hash": "h1", "argv": ["vllm", "serve", "m", "--api-key", "********"],
                        "env_keys": ["HF_TOKEN", "NCCL_PROTO"], "env_file": where["env_file"]}
    assert "sk-1" not in json.dumps(recorded)


def test_the_unit_is_rewritten_and_systemd_reloaded_only_on_a_change(fake, where):
    launch(fake, where)
    systemd.stop(FakeModule(), psutil, Target(where["state_file"], UNIT, "h1"))
    unit_path = os.path.join(fake.unit_dir, UNIT)
    inode = os.stat(unit_path).st_ino
    calls = len(fake.verbs())
    again = launch(fake, where)
    assert again["launched"] and not again["unit_changed"] and os.stat(unit_path).st_ino == inode
    assert "daemon-reload" not in fake.verbs()[calls:] and "start %s" % UNIT in fake.verbs()[calls:]
    # enabled already: no enable again
    assert "enable %s" % UNIT not in fake.verbs()[calls:]
    systemd.stop(FakeModule(), psutil, Target(where["state_file"], UNIT, "h1"))
    calls = len(fake.verbs())
    changed = launch(fake, where, content=CONTENT + "Restart=on-failure\n", enabled=False)
    assert changed["unit_changed"] and fake.verbs()[calls:][0] == "daemon-reload" and "disable %s" % UNIT in fake.verbs()[calls:]


def test_a_running_unit_with_this_configuration_is_left_alone_and_another_refused(fake, where):
    first = launch(fake, where)
    calls = len(fake.verbs())
    same = launch(fake, where)
    assert not same["changed"] and same["pid"] == first["pid"] and fake.verbs()[calls:] == []
    with pytest.raises(ServerError) as caught:
        systemd.launch(FakeModule(), psutil, Target(where["state_file"], UNIT, "h2"), spec(where), unit_dir=fake.unit_dir)
    assert "another configuration" in str(caught.value) and "stop it first" in str(caught.value)


def test_bad_environment_names_fail_before_anything_is_written(fake, where):
    with pytest.raises(ServerError) as caught:
        launch(fake, where, env={"GOOD": "1", "1BAD": "x", "A-B": "y"})
    assert str(caught.value) == ('vllm_server_env / vllm_server_host_env: ["1BAD", "A-B"] are not environment variable names '
                                 '(letters, digits and _, not starting with a digit)')
    assert not os.path.exists(os.path.dirname(where["state_file"])) and fake.calls() == []


def test_check_mode_writes_and_starts_nothing(fake, where):
    result = launch(fake, where, module=FakeModule(check_mode=True))
    assert result["changed"] and result["running"] and result["unit_changed"] and not result["launched"]
    assert result["msg"] == "would launch vllm serve m --api-key ******** as unit %s" % UNIT
    assert not os.path.exists(os.path.dirname(where["state_file"])) and os.listdir(fake.unit_dir) == []
    assert fake.verbs() == []


def test_stop_ends_the_units_processes_and_disables_it_when_asked(fake, where):
    started = launch(fake, where)
    target = Target(where["state_file"], UNIT, "h1")
    preview = systemd.stop(FakeModule(check_mode=True), psutil, target, disable=True)
    assert preview["changed"] and preview["msg"] == "would stop unit %s (PID %s) and disable it" % (UNIT, str(started["pid"]))
    assert psutil.pid_exists(started["pid"]) and fake.units()[UNIT]["ActiveState"] == "active"
    calls = len(fake.verbs())
    stopped = systemd.stop(FakeModule(), psutil, target, disable=True)
    assert fake.verbs()[calls:] == ["stop %s" % UNIT, "disable %s" % UNIT]
    assert [entry["pid"] for entry in stopped["stopped"]] == [started["pid"]] and stopped["stopped"][0]["name"] == "sleep"
    assert stopped["changed"] and not stopped["running"] and stopped["pid"] is None
    assert stopped["msg"] == "stopped unit %s (PID %s) and disabled it" % (UNIT, str(started["pid"]))
    # the record describes the unit: it stays
    assert os.path.exists(where["state_file"])
    again = systemd.stop(FakeModule(), psutil, target, disable=True)
    assert not again["changed"] and again["stopped"] == []


def test_a_unit_systemd_does_not_know_is_no_error(fake, where):
    result = systemd.stop(FakeModule(), psutil, Target(where["state_file"], "nothing.service"), disable=True)
    assert not result["changed"] and "does not know" in result["msg"] and fake.verbs() == []
    # systemctl's own "not loaded" is tolerated where asked
    rc, _out, err = systemd.systemctl(FakeModule(), "reset-failed", "nothing.service", tolerate_unknown=True)
    assert rc == 5 and "not loaded" in err
    with pytest.raises(ServerError):
        systemd.systemctl(FakeModule(), "start", "nothing.service")


def test_status_reads_the_unit_the_record_health_and_a_crash_loop(fake, where):
    target = Target(where["state_file"], UNIT, "h1")
    fake.set_unit(UNIT, ActiveState="activating", SubState="auto-restart", NRestarts=2, Result="exit-code", ExecMainCode=1,
                  ExecMainStatus=1)
    os.makedirs(os.path.dirname(where["state_file"]))
    with open(where["state_file"], "w", encoding="utf-8") as handle:
        json.dump({"unit": UNIT, "config_hash": "h1"}, handle)
    module = FakeModule()
    looping = systemd.status(module, psutil, target, "http://127.0.0.1:9/health")
    # the operator is told, naming the unit, and where to look
    assert module.warnings == ["unit %s: %s (journalctl -u %s shows why)" % (UNIT, looping["crash_loop"], UNIT)]
    assert looping["running"] and looping["config_matches"] and looping["healthy"] is False and looping["mode"] == "systemd"
    assert looping["crash_loop"].startswith("crash loop: 2 restarts, last exit status 1 (Result=exit-code)")
    server = LoopbackServer(lambda handler, body: (200, b""))
    try:
        quiet = FakeModule()
        healthy = systemd.status(quiet, psutil, target._replace(config_hash="h2"), server.url + "/health")
    finally:
        server.close()
    assert not quiet.warnings
    assert healthy["healthy"] and healthy["health"] == "HTTP 200" and healthy["crash_loop"] == "" and healthy["config_matches"] is False


def test_takeover_of_another_units_server_stops_and_disables_the_unit_first(fake):
    fake.set_unit("other.service", ActiveState="active", UnitFileState="enabled")
    # the server taken over: a child of a shell that stays (its parent is never signalled)
    shell = subprocess.Popen(["bash", "-c", "sleep 60 & echo $!; wait; sleep 60"], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(shell.stdout.readline())
        created = psutil.Process(pid).create_time()
        result = stop_takeover(FakeModule(), psutil, {"pid": pid, "create_time": created, "how": "systemd", "unit": "other.service"},
                               stop_timeout=5)
        assert fake.verbs() == ["stop other.service", "disable other.service"]
        assert result["unit_disabled"] and result["changed"] and [entry["pid"] for entry in result["stopped"]] == [pid]
        assert gone(pid)
        assert shell.poll() is None, "the shell that started the server was ended"
    finally:
        if shell.poll() is None:
            shell.kill()
        shell.wait()
