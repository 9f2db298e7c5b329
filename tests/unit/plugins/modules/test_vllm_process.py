# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_process as Ansible runs it: bad input fails naming the option, before anything is touched; the process mode
(launch, idempotence, another configuration refused, stop; the status reading with its generation check); secrets kept
out of what it prints, its record and its log; the takeover of a server started by hand under a shell; the systemd
mode (a fake systemctl on PATH): status with the decision, the launch, the stop that disables, the same result keys as
the process mode, the options each mode needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import systemd
from ansible_collections.gpuops.fleet.plugins.modules import vllm_listener, vllm_process
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main, capture, environ_of, run_printed
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.vllm_answers import DEAD_BODY, GOOD_BODY
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_systemctl import FakeSystemctl

psutil = pytest.importorskip("psutil")

TOKEN = "hf_secret123"
KEY = "sk-secret456"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
UNIT = "gpuops-vllm-8000.service"
KEYS = {"mode", "running", "pid", "create_time", "config_hash", "config_matches", "healthy", "health", "generates", "generation",
        "crash_loop", "record", "launched", "stopped", "log_file", "env_keys", "secret_env_keys"}


@pytest.fixture
def fake(tmp_path, monkeypatch):
    capture(monkeypatch)
    found = FakeSystemctl(str(tmp_path / "systemctl"), str(tmp_path / "units"))
    monkeypatch.setenv("PATH", found.bin + os.pathsep + os.environ["PATH"])
    monkeypatch.setattr(systemd, "UNIT_DIR", found.unit_dir)
    try:
        yield found
    finally:
        found.end_all()


def test_systemd_mode_status_launch_status_stop(fake, tmp_path):
    base = {"mode": "systemd", "unit": UNIT, "state_file": str(tmp_path / "s.json"), "config_hash": "h1"}
    before = call_main(vllm_process, dict(base, state="status", decide={"state": "started"}))
    assert KEYS <= set(before) and before["mode"] == "systemd" and before["running"] is False
    assert before["reason"] == "no managed server ran" and not before["failed"]

    launch = dict(base, state="running", argv=["vllm", "serve", "m", "--api-key", "sk-1"], env={"NCCL_PROTO": "LL"},
                  systemd={"content": "[Service]\nExecStart=/bin/true\n", "env_file": str(tmp_path / "s.env"),
                           "exec_env": {"GPUOPS_SECRET_ARG_4": "sk-1"}})
    launched = call_main(vllm_process, launch)
    main = int(fake.units()[UNIT]["MainPID"])
    assert launched["launched"] and launched["pid"] == main and launched["unit_changed"] and KEYS <= set(launched), launched
    assert "sk-1" not in str(launched)

    after = call_main(vllm_process, dict(base, state="status", decide={"state": "started"}))
    # no /health asked: the running unit with this configuration is judged by it
    assert after["running"] and after["pid"] == main and after["config_matches"]
    assert after["reason"] == "it does not answer /health (no answer)"
    forced = call_main(vllm_process, dict(base, state="status", decide={"state": "restarted"}))
    assert forced["reason"] == "a restart was forced"

    stopped = call_main(vllm_process, dict(base, state="stopped", systemd={"disable": True}))
    assert [entry["pid"] for entry in stopped["stopped"]] == [main] and stopped["changed"]
    assert fake.units()[UNIT]["ActiveState"] == "inactive" and fake.units()[UNIT]["UnitFileState"] == "disabled"
    assert fake.verbs()[-2:] == ["stop %s" % UNIT, "disable %s" % UNIT]


@pytest.mark.parametrize("args, needle", [
    ({"mode": "systemd", "state": "status"}, "unit"),
    ({"mode": "systemd", "unit": UNIT, "state": "running", "argv": ["vllm"]}, "systemd.content"),
    ({"mode": "systemd", "unit": UNIT, "state": "running", "argv": ["vllm"], "systemd": {"content": "x"}}, "systemd.env_file"),
    ({"mode": "process", "state": "running", "argv": ["vllm"]}, "log_file"),
    ({"state": "status", "listener": {"port": 0}}, "listener.port"),
    ({"state": "status", "decide": {"state": "on"}}, "decide"),
    ({"mode": "container", "state": "status"}, "container.name"),
    ({"mode": "container", "state": "running", "argv": ["vllm"], "container": {"name": "c", "env_file": "/tmp/c.env"}}, "container.image"),
    ({"mode": "container", "state": "running", "argv": ["vllm"], "container": {"name": "c", "image": "i"}}, "container.env_file"),
    ({"mode": "container", "state": "status", "container": {"name": "c", "restart": "sometimes"}}, 'container.restart="sometimes"'),
])
def test_each_mode_names_the_option_it_lacks(fake, tmp_path, args, needle):
    result = call_main(vllm_process, dict(args, state_file=str(tmp_path / "s.json")))
    assert result["failed"] and needle in result["msg"], result
    assert fake.calls() == []


@pytest.mark.usefixtures("captured")
@pytest.mark.parametrize("args, needle", [
    ({"state": "running", "state_file": "/tmp/x.json", "log_file": "/tmp/x.log", "argv": []}, "argv"),
    ({"state": "running", "state_file": "/tmp/x.json", "argv": ["vllm"]}, "log_file"),
    ({"state": "started", "state_file": "/tmp/x.json"}, "state"),
    ({"state": "stopped", "state_file": "/tmp/x.json", "stop_timeout": -1}, "stop_timeout"),
    ({"state": "stopped", "state_file": "/tmp/x.json", "stop_timeout": 99999}, "stop_timeout"),
    ({"state": "stopped", "state_file": "/tmp/x.json", "takeover": {"pid": 4000, "create_time": 1.0, "container": {
        "runtime": "podman", "id": "hand-vllm"}}}, 'takeover.container.id: expected a container\'s full id (64 hexadecimal digits), got "hand-vllm"'),
])
def test_bad_input_names_the_option(args, needle):
    result = call_main(vllm_process, args)
    assert result["failed"] and needle in result["msg"], result


@pytest.mark.usefixtures("captured")
def test_malformed_record_is_refused_and_nothing_is_signalled(tmp_path):
    state = tmp_path / "vllm-8000.json"
    state.write_text(json.dumps({"pid": os.getpid()}))
    result = call_main(vllm_process, {"state": "stopped", "state_file": str(state)})
    assert result["failed"] and str(state) in result["msg"]
    assert state.exists()


@pytest.mark.usefixtures("captured")
def test_running_launches_then_is_idempotent_then_refuses_another_configuration_then_stops(tmp_path):
    state, log = str(tmp_path / "s.json"), str(tmp_path / "s.log")
    args = {"state": "running", "state_file": state, "log_file": log, "config_hash": "h1",
            "argv": [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"], "env": {"X": 1}}
    first = call_main(vllm_process, args)
    try:
        assert first["changed"] and first["launched"] and first["pid"]
        assert environ_of(first["pid"]).count(b"X=1") == 1
        again = call_main(vllm_process, args)
        assert not again["changed"] and again["pid"] == first["pid"]
        other = call_main(vllm_process, dict(args, config_hash="h2"))
        assert other["failed"] and "another configuration" in other["msg"]
        status = call_main(vllm_process, {"state": "status", "state_file": state, "config_hash": "h2"})
        assert status["running"] and status["config_matches"] is False
    finally:
        stopped = call_main(vllm_process, {"state": "stopped", "state_file": state})
    assert stopped["changed"] and [s["pid"] for s in stopped["stopped"]] == [first["pid"]]
    assert not os.path.exists(state)
    assert subprocess.run(["kill", "-0", str(first["pid"])], capture_output=True, check=False).returncode != 0 or \
        open("/proc/%d/stat" % first["pid"]).read().split(")")[1].split()[0] == "Z"


def test_status_with_generate_tells_a_dead_engine_behind_a_live_health(api_server, recorded_server):
    """The reading that decides whether a running server is left alone: it answers /health, and only a completion tells
    that its engine is dead. Nothing is asked of a server that differs or fails /health, nor with timeout 0."""
    url = api_server["url"]
    args = {"state": "status", "state_file": recorded_server, "config_hash": "h1", "health_url": url + "/health",
            "generate": {"url": url, "model": "m", "api_key": "k-secret", "timeout": 10}}
    api_server["answers"] = [(500, DEAD_BODY), (200, GOOD_BODY)]
    dead = call_main(vllm_process, args)
    assert dead["running"] and dead["healthy"] and dead["generates"] is False, dead
    assert dead["generation"]["status"] == 500 and dead["generation"]["problem"] == "HTTP 500"
    assert "EngineDeadError" in dead["generation"]["answer"] and "k-secret" not in json.dumps(dead)
    assert api_server["keys"] == ["Bearer k-secret"]
    good = call_main(vllm_process, args)
    assert good["generates"] is True and good["generation"]["tokens"] == 4 and api_server["asked"] == 2

    for other in ({"config_hash": "h2"}, {"health_url": "http://127.0.0.1:9/health"},
                  {"generate": dict(args["generate"], timeout=0)}, {"generate": None}):
        result = call_main(vllm_process, dict(args, **other))
        assert result["generates"] is None and result["generation"] is None, (other, result)
    assert api_server["asked"] == 2  # none of them sent a completion
    # the other states act on the record, whatever the server answers: no completion either
    call_main(vllm_process, dict(args, state="running", argv=["true"], log_file=recorded_server + ".log"))
    assert api_server["asked"] == 2


@pytest.mark.usefixtures("captured")
@pytest.mark.parametrize("args, needle", [
    ({"state_file": "/tmp/x.json", "generate": {"url": "127.0.0.1:8000"}}, "generate.url"),
    ({"state_file": "/tmp/x.json", "generate": {"url": "http://h:1", "timeout": -1}}, "generate.timeout"),
])
def test_a_bad_generate_option_is_named(args, needle):
    result = call_main(vllm_process, args)
    assert result["failed"] and needle in result["msg"], result


def test_process_launch_result_record_and_log_hold_no_secret(tmp_path, capsys):
    state, log = tmp_path / "s.json", tmp_path / "logs" / "s.log"
    args = {"state": "running", "state_file": str(state), "log_file": str(log), "config_hash": "h1",
            "argv": SLEEPER + ["--api-key", KEY, "--port", "8000"],
            "env": {"HF_TOKEN": TOKEN, "NCCL_PROTO": "LL", "MY_PAT": "pat-789", "VLLM_USE_V1": "1"}, "secret_env": ["MY_PAT"]}
    result, text = run_printed(vllm_process, args, capsys)
    pid = result.get("pid")
    try:
        assert result["launched"] and pid, text
        for secret in (TOKEN, KEY, "pat-789"):
            assert secret not in text
            assert secret not in state.read_text() and secret not in log.read_text()
        # the environment really reached the server
        environ = environ_of(pid)
        assert b"HF_TOKEN=" + TOKEN.encode() in environ and b"MY_PAT=pat-789" in environ
        # non-secret values stay readable: no "V********M" from a no_log value such as LL or 1
        invocation = result["invocation"]["module_args"]
        assert invocation["env"]["NCCL_PROTO"] == "LL" and invocation["env"]["VLLM_USE_V1"] == "1"
        assert invocation["argv"][-4:] == ["--api-key", "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER", "--port", "8000"]
        assert result["env_keys"] == ["HF_TOKEN", "MY_PAT", "NCCL_PROTO", "VLLM_USE_V1"]
        assert result["secret_env_keys"] == ["HF_TOKEN", "MY_PAT"]
        assert "launched PID %d" % pid in result["msg"]
        assert json.loads(state.read_text())["argv"][-4:] == ["--api-key", "********", "--port", "8000"]
        assert "--api-key ******** --port 8000" in log.read_text()
        assert os.stat(state).st_mode & 0o777 == 0o600 and os.stat(log).st_mode & 0o777 == 0o600

        status, text = run_printed(vllm_process, {"state": "status", "state_file": str(state)}, capsys)
        assert status["running"] and status["record"]["argv"][-3] == "********" and KEY not in text
    finally:
        if pid:
            stopped, _text = run_printed(vllm_process, {"state": "stopped", "state_file": str(state), "stop_timeout": 5}, capsys)
            assert stopped["changed"]


def test_an_older_log_readable_by_others_is_closed(tmp_path, capsys):
    state, log = tmp_path / "s.json", tmp_path / "s.log"
    log.write_text("earlier\n")
    os.chmod(log, 0o644)
    result, _text = run_printed(vllm_process, {"state": "running", "state_file": str(state), "log_file": str(log),
                                               "argv": SLEEPER}, capsys)
    try:
        assert result["launched"] and os.stat(log).st_mode & 0o777 == 0o600
        assert log.read_text().startswith("earlier\n")
    finally:
        run_printed(vllm_process, {"state": "stopped", "state_file": str(state), "stop_timeout": 5}, capsys)


@pytest.mark.usefixtures("captured")
def test_a_server_under_a_live_shell_is_taken_over_and_its_tree_stopped_but_not_its_shell(hand_started, tmp_path, monkeypatch):
    """The takeover as the role asks for it, with what vllm_listener found on the port: a wrong start time signals
    nothing; the right one stops the server and its tree, not the shell above it, and leaves the role's record alone."""
    shell, server, port = hand_started
    # the role's own unit, which systemd does not know (a fake systemctl): its stop finds nothing to do
    fake = FakeSystemctl(str(tmp_path / "systemctl"), str(tmp_path / "units"))
    monkeypatch.setenv("PATH", fake.bin + ":" + os.environ["PATH"])
    own = {"mode": "systemd", "unit": "gpuops-vllm-%d.service" % port}
    found = call_main(vllm_listener, {"port": port})["listener"]

    # another start time: nothing is signalled
    record = tmp_path / "s.json"
    # the role's record in systemd mode is its unit's configuration, no process record: a takeover neither reads nor touches it
    unit_record = json.dumps({"unit": "gpuops-vllm-%d.service" % port, "config_hash": "c0ffee", "argv": ["vllm", "serve"]})
    record.write_text(unit_record)
    wrong = call_main(vllm_process, {"state": "stopped", "state_file": str(record), **own,
                                     "takeover": {"pid": server, "create_time": found["create_time"] - 100}})
    assert not wrong["changed"] and psutil.pid_exists(server)
    stopped = call_main(vllm_process, {"state": "stopped", "state_file": str(record), "stop_timeout": 5, **own,
                                       "takeover": {"pid": server, "create_time": found["create_time"]}})
    assert stopped["changed"] and sorted(s["pid"] for s in stopped["stopped"]) == sorted([server] + found["tree"])
    assert stopped["takeover_stopped"]["stopped"] == stopped["stopped"] and stopped["takeover_stopped"]["unit_disabled"] is False
    for pid in [server] + found["tree"]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert shell.poll() is None, "the shell that started the server was ended"
    assert call_main(vllm_listener, {"port": port})["listener"] is None
    assert record.read_text() == unit_record


@pytest.mark.usefixtures("captured")
def test_a_stop_reclaims_in_the_same_run_and_a_reclaim_that_fails_leaves_the_stop_s_result(tmp_path, monkeypatch):
    """reclaim: gpu_reclaim's code after the stop, in this module run (the role's reclaim step judges it); a reclaim that
    cannot run (a missing library) is said in the reclaim's result, never by failing the stop that happened."""
    from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
    from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim import run as reclaim_run
    asked = []

    def run_reclaim(params, check_mode, diff, libraries, find_cli):
        asked.append((dict(params), check_mode))
        return {"msg": "reclaimed", "changed": True, "verified": True, "gpus": []}, ["a warning"], False

    monkeypatch.setattr(reclaim_run, "run_reclaim", run_reclaim)
    monkeypatch.setattr(_deps.PYNVML, "module", object())
    args = {"state": "stopped", "state_file": str(tmp_path / "vllm-8000.json"),
            "reclaim": {"gpus": ["0", "1"], "grace": 2, "timeout": 20, "containers": "refuse"}}
    result = call_main(vllm_process, args)
    assert not result["failed"], result
    assert result["reclaim"] == {"msg": "reclaimed", "changed": True, "verified": True, "gpus": [], "failed": False,
                                 "warnings": ["a warning"]}
    assert asked == [({"gpus": ["0", "1"], "grace": 2, "timeout": 20, "containers": "refuse"}, False)]

    monkeypatch.setattr(_deps.PYNVML, "module", None)
    result = call_main(vllm_process, args)
    assert not result["failed"], result
    assert result["reclaim"]["failed"] is True and "nvidia-ml-py" in result["reclaim"]["msg"] and len(asked) == 1
    # without the option, a stop reclaims nothing
    assert "reclaim" not in call_main(vllm_process, dict(args, reclaim=None))
