# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_lock as Ansible runs it: bad input fails naming the option, before the lock is taken; the status it reads under
the lock (the server's generation, the listener on its port) and the lock released when that listener may not be
taken over. And its documentation: it documents its argument spec, and the suboptions of status.generate,
status.listener and status.decide word for word as vllm_process documents its own options of those names (one argument
spec serves both: _server/status.py), and status.container's as vllm_process documents the same suboptions of
container. A doc fragment cannot hold them once for both: Ansible merges a fragment into a module's options one level
deep, vllm_lock nests them under status, and a fragment's text must be a literal string (ansible-test's yamllint
sanity test reads it from the source)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.modules import vllm_lock, vllm_process
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import (
    assert_documented_as_specified, call_main, documented_options,
)
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.vllm_answers import DEAD_BODY

psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.usefixtures("captured")

KEYS = ("type", "elements", "default", "choices", "required")


@pytest.mark.parametrize("args, needle", [
    ({"path": "/tmp/l", "token": "  "}, "token"),
    ({"path": "/tmp/l", "token": "t", "stale_after": 0}, "stale_after"),
    ({"path": "/tmp/l", "token": "t", "state": "open"}, "state"),
])
def test_bad_input_names_the_option(args, needle):
    result = call_main(vllm_lock, args)
    assert result["failed"] and needle in result["msg"], result


def test_the_lock_reads_generation_under_it(api_server, recorded_server, tmp_path):
    url = api_server["url"]
    api_server["answers"] = [(500, DEAD_BODY)]
    status = {"state_file": recorded_server, "config_hash": "h1", "health_url": url + "/health",
              "generate": {"url": url, "model": "m", "timeout": 10}}
    result = call_main(vllm_lock, {"path": str(tmp_path / "l"), "token": "t1", "status": status})
    assert result["acquired"] and result["status"]["generates"] is False, result
    assert "EngineDeadError" in result["status"]["generation"]["answer"] and api_server["asked"] == 1
    call_main(vllm_lock, {"path": str(tmp_path / "l"), "token": "t1", "state": "unlocked"})


@pytest.mark.parametrize("args, needle", [
    ({"token": "t", "status": {"state_file": "/tmp/x.json", "generate": {"url": "h:1"}}}, "status.generate.url"),
    ({"token": "t", "status": {"state_file": "/tmp/x.json", "generate": {"url": "http://h:1", "timeout": 1e9}}},
     "status.generate.timeout"),
])
def test_a_bad_generate_option_is_named(args, needle, tmp_path):
    lock = tmp_path / "never.lock"
    result = call_main(vllm_lock, dict(args, path=str(lock)))
    assert result["failed"] and needle in result["msg"], result
    assert not lock.exists()  # refused before the lock


def test_the_lock_status_reads_the_listener(hand_started, tmp_path):
    """The lock's status reads the server that listens on the port (vllm_listener's reading), in its own call."""
    _shell, server, port = hand_started
    lock = call_main(vllm_lock, {"path": str(tmp_path / "s.lock"), "token": "t1",
                                 "status": {"state_file": str(tmp_path / "s.json"), "listener": {"port": port}}})
    assert lock["acquired"] and lock["status"]["listener"]["pid"] == server and lock["status"]["running"] is False


def test_the_lock_refuses_a_listener_it_may_not_take_over_and_releases_itself(hand_started, tmp_path):
    """The lock's status reading judges the listener: one that is not vLLM fails the task naming it, nothing is stopped
    and the lock just taken is released."""
    _shell, server, port = hand_started
    lock = tmp_path / "s.lock"
    result = call_main(vllm_lock, {"path": str(lock), "token": "t1",
                                   "status": {"state_file": str(tmp_path / "s.json"), "listener": {"port": port, "match": ["^nginx"]},
                                              "decide": {"state": "started"}}})
    assert result["failed"] and result["msg"].startswith("vllm_server: nothing was stopped: port %d is held by PID %d" % (port, server))
    assert not lock.exists() and result["released"] and not result["acquired"]
    assert result["status"]["takeover"]["pid"] == server and result["status"]["reason"] == "no managed server ran"
    assert psutil.pid_exists(server) and psutil.Process(server).status() != psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("module", [vllm_lock, vllm_process], ids=["vllm_lock", "vllm_process"])
def test_documented_options_are_the_argument_spec(module):
    assert_documented_as_specified(documented_options(module.DOCUMENTATION), module.ARGUMENT_SPEC, keys=KEYS)


def test_status_suboptions_are_documented_as_vllm_process_documents_its_own():
    process = documented_options(vllm_process.DOCUMENTATION)
    status = documented_options(vllm_lock.DOCUMENTATION)["status"]["suboptions"]
    for name in ("generate", "listener", "decide", "adapters"):
        assert set(status[name]["suboptions"]) == set(process[name]["suboptions"]), name
        for key, option in process[name]["suboptions"].items():
            if (name, key) == ("listener", "unit"):
                # the option that names the server's unit: unit in vllm_process, status.unit in vllm_lock
                option = dict(option, description=option["description"].replace("O(unit)", "O(status.unit)"))
            assert status[name]["suboptions"][key] == option, (name, key)
    # status.container reads a container: the name and runtime of vllm_process's container, documented alike
    assert set(status["container"]["suboptions"]) == {"name", "runtime"}
    for key, option in status["container"]["suboptions"].items():
        assert option == process["container"]["suboptions"][key], ("container", key)


def test_a_lock_released_by_another_task_of_the_run_is_not_released_twice(tmp_path):
    lock = tmp_path / "l"
    assert call_main(vllm_lock, {"path": str(lock), "token": "t1"})["acquired"] and lock.exists()
    # the token the ready step released is this one: nothing is done (here the lock still holds: nothing touched it)
    same = call_main(vllm_lock, {"path": str(lock), "token": "t1", "state": "unlocked", "released_token": "t1"})
    assert same["released"] is False and "already released" in same["msg"] and lock.exists()
    # another run's token released earlier says nothing of this one: released
    other = call_main(vllm_lock, {"path": str(lock), "token": "t1", "state": "unlocked", "released_token": "t0"})
    assert other["released"] is True and not lock.exists()


def test_the_lock_makes_the_preflight_s_reading_from_the_plan_and_its_reading(tmp_path, monkeypatch):
    """preflight: gpu_reclaim's code in check mode, in the lock's module run, with the options the role's reclaim gets
    (from the plan's keys and the reading under the lock); a reading that cannot run leaves the lock taken."""
    from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
    from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim import run as reclaim_run
    asked = []

    def run_reclaim(params, check_mode, diff, libraries, find_cli):
        asked.append((dict(params), check_mode))
        return {"msg": "would free", "changed": False, "would_fail": []}, [], False

    monkeypatch.setattr(reclaim_run, "run_reclaim", run_reclaim)
    monkeypatch.setattr(_deps.PYNVML, "module", object())
    plan = {"state": "stopped", "gpu_words": ["0", "1"], "port": 8000, "api_key_arg": False, "env_names": [], "secret_env": [],
            "reclaim": {"match": None, "orphans_only": True, "grace": 2, "timeout": 20, "memory_threshold_mib": 1024}}
    lock = tmp_path / "l"
    args = {"path": str(lock), "token": "t1", "status": {"state_file": str(tmp_path / "vllm-8000.json")}, "preflight": plan}
    result = call_main(vllm_lock, args)
    assert result["acquired"] and not result["failed"], result
    assert result["preflight"] == {"msg": "would free", "changed": False, "would_fail": [], "failed": False, "warnings": []}
    # nothing runs: no owner; the state stopped asks for no secured reading
    assert asked == [({"gpus": ["0", "1"], "orphans_only": True, "grace": 2, "timeout": 20, "idle_threshold_mib": 1024,
                       "containers": "refuse", "managed_containers": []}, True)]
    lock.unlink()
    monkeypatch.setattr(_deps.PYNVML, "module", None)
    result = call_main(vllm_lock, args)
    assert result["acquired"] and not result["failed"] and result["preflight"]["failed"], result
    assert "nvidia-ml-py" in result["preflight"]["msg"] and lock.exists()


def test_vllm_process_lock_is_vllm_locks_task(hand_started, tmp_path):
    """vllm_process's lock (the role's lock, through vllm_lock's action): vllm_lock's result for the same options, the
    same lock file (released by vllm_lock), and a bad option named under lock. before any lock is taken."""
    _shell, server, port = hand_started
    lock = tmp_path / "s.lock"
    options = {"path": str(lock), "token": "t1", "status": {"state_file": str(tmp_path / "s.json"), "listener": {"port": port}}}
    result = call_main(vllm_process, {"state_file": str(tmp_path / "s.json"), "lock": options})
    assert result["acquired"] and result["token"] == "t1" and lock.exists(), result
    assert result["status"]["listener"]["pid"] == server and "env_keys" not in result
    assert call_main(vllm_lock, {"path": str(lock), "token": "t1", "state": "unlocked"})["released"] and not lock.exists()
    never = tmp_path / "never.lock"
    bad = call_main(vllm_process, {"state_file": str(tmp_path / "s.json"), "lock": {"path": str(never), "stale_after": "soon"}})
    assert bad["failed"] and bad["msg"].startswith("lock.") and "stale_after" in bad["msg"] and not never.exists(), bad
    bad = call_main(vllm_process, {"state_file": str(tmp_path / "s.json"), "lock": {"path": str(never), "token": "t", "stale_after": 0}})
    assert bad["failed"] and "stale_after" in bad["msg"] and not never.exists(), bad
