# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_reclaim as Ansible runs it (patch_module_args), over a fake pynvml and a fake psutil whose exits free the memory:
the incident, check mode, failures and bad input; the deciding reading from an NVML session of its own; orphans_only and
owner (what check mode and a real run say of a live job's vLLM); the lineage watch and ``settle`` (a parent that
respawns what was ended, and no wait when nothing can)."""

from __future__ import annotations

import json

import threading
import time
import types

import pytest
import yaml
from ansible.module_utils import basic
from ansible.module_utils.common.warnings import get_deprecation_messages

from ansible_collections.gpuops.fleet.plugins.doc_fragments import nvml as nvml_fragment
from ansible_collections.gpuops.fleet.plugins.module_utils import _deps
from ansible_collections.gpuops.fleet.plugins.module_utils._gpu.nvml import NvmlSession
from ansible_collections.gpuops.fleet.plugins.module_utils._host import pid_trust as _pid_trust, process_table as _process_table
from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import ContainerRef
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim import containers as _containers, lineage as _lineage, reclaim as _reclaim
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.lineage import RESPAWN_WINDOW_S
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.run import run_reclaim
from ansible_collections.gpuops.fleet.plugins.module_utils._reclaim.spec import build_spec, SpecError
from ansible_collections.gpuops.fleet.plugins.modules import gpu_reclaim
from ansible_collections.gpuops.fleet.plugins.modules.gpu_reclaim import ARGUMENT_SPEC
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_psutil import FakePsutil, host_rows, KILL, ME, Row, TERM, vllm_server
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_pynvml import device, FakeNvml, MIB, proc
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_runtime import (
    DOCKER_ID, FakeContainer, FakeRuntimeCli, K8S_ID, POD_UID, PODMAN_ID)
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import (
    assert_documented_as_specified, call_main, capture, documented_options,
)

INCIDENT_MIB = 93029
MISSING_PID = 4194305  # above the largest pid_max: no process of this namespace has it
BYSTANDERS = {1, 50, 51, ME, 900, 901, 902}  # PID 1, the Ansible connection, this module, canary, "vllm" look-alike, driver helper
FAST = {"grace": 0.05, "timeout": 0.3}


class Host:
    """One fake GPU host: NVML devices and a process table; a process that exits gives its memory back."""

    def __init__(self, rows, held, gpus=8, memory_comes_back=True):
        self.lib = FakeNvml([device(i) for i in range(gpus)])
        for pid, gpu in held.items():
            self.hold(pid, gpu, INCIDENT_MIB)
        self.memory_comes_back = memory_comes_back
        self.psutil = FakePsutil(host_rows() + rows, time.monotonic, self.release)

    def hold(self, pid, gpu, mib):
        self.lib.devices[gpu]["compute"].append(proc(pid, mib))
        self.lib.devices[gpu]["used"] += mib

    def release(self, pid):
        for dev in self.lib.devices:
            gone = [p for p in dev["compute"] if p.pid == pid]
            dev["compute"] = [p for p in dev["compute"] if p.pid != pid]
            if self.memory_comes_back:
                dev["used"] -= sum(p.usedGpuMemory // MIB for p in gone)

    def used(self):
        return [dev["used"] for dev in self.lib.devices]


def run_module(monkeypatch, host, args):
    capture(monkeypatch)
    monkeypatch.setattr(_process_table, "os", types.SimpleNamespace(getpid=lambda: ME))
    monkeypatch.setattr(_reclaim, "_getpgid", lambda pid: host.psutil.getpgid(pid) if host else None)
    if host is not None:
        monkeypatch.setattr(_deps.PYNVML, "module", host.lib)
        monkeypatch.setattr(_deps.PSUTIL, "module", host.psutil)
    return call_main(gpu_reclaim, args)


@pytest.fixture(autouse=True)
def host_pid_namespace(monkeypatch):
    """These fake hosts run in the host PID namespace, whatever namespace pytest itself runs in."""
    monkeypatch.setattr(_pid_trust, "nested_pid_namespace", lambda status_path=None: False)


@pytest.fixture(autouse=True, name="cgroups")
def cgroups_fixture(monkeypatch):
    """The container of each fake PID (pid -> ContainerRef; none unless a test says so), never this machine's /proc."""
    refs = {}
    monkeypatch.setattr(_reclaim, "_container_of", refs.get)
    return refs


def device_files(monkeypatch, pids):
    """The fake host's evidence: these PIDs (and no other) have an NVIDIA device file open."""
    monkeypatch.setattr(_pid_trust, "holds_device_file", lambda pid, proc_root="/proc", prefix=None: pid in set(pids))


def incident(**worker):
    rows, held = vllm_server(1000, range(8), **worker)
    return Host(rows, held), held


def assert_bystanders_untouched(host):
    assert not BYSTANDERS & {pid for pid, _number in host.psutil.signals}
    assert BYSTANDERS <= set(host.psutil.table)


def test_incident_is_freed_verified_then_unchanged(monkeypatch):
    host, workers = incident()
    result = run_module(monkeypatch, host, {})
    assert not result.get("failed") and result["changed"] is True and result["verified"] is True
    killed = {k["pid"]: k for k in result["killed"]}
    assert set(killed) == {1000, 1001, 1002} | set(workers)
    assert killed[1000]["role"] == "launcher" and result["killed"][0]["pid"] == 1000
    assert killed[1013] == {"pid": 1013, "name": "VLLM::Worker_TP3", "cmdline": ["VLLM::Worker_TP3"], "username": "vllm",
                            "role": "holder", "gpus": [3], "signal": "SIGTERM", "seconds_to_exit": killed[1013]["seconds_to_exit"],
                            "ended": "exited"}
    assert [(g["index"], g["memory_used_mib_before"], g["memory_used_mib_after"], g["freed_mib"], g["processes_left"], g["verified"])
            for g in result["gpus"]] == [(i, INCIDENT_MIB, 0, INCIDENT_MIB, [], True) for i in range(8)]
    assert result["gpus"][3]["processes_before"] == [{"pid": 1013, "name": "VLLM::Worker_TP3", "used_memory_mib": INCIDENT_MIB}]
    assert "verified free" in result["msg"] and "ended 11 process(es)" in result["msg"]
    assert result["elapsed_s"] < 1 and result["survivors"] == [] and "evidence" not in result
    assert host.used() == [0] * 8
    assert_bystanders_untouched(host)

    again = run_module(monkeypatch, host, {})
    assert again["changed"] is False and again["verified"] is True and again["killed"] == []


def test_holder_gone_between_nvml_and_psutil_is_not_a_target(monkeypatch):
    """NVML gives no start time: a PID NVML stops listing once psutil has looked at it may belong to someone else now."""
    host, workers = incident()
    real_holders = NvmlSession.holders
    calls = {}

    def holders(session, index):
        calls[index] = calls.get(index, 0) + 1
        return [] if (index, calls[index]) == (0, 2) else real_holders(session, index)

    monkeypatch.setattr(NvmlSession, "holders", holders)
    result = run_module(monkeypatch, host, {"kill_tree": False})
    worker0 = min(workers)
    assert worker0 not in {pid for pid, _number in host.psutil.signals}
    assert {k["pid"] for k in result["killed"]} == set(workers) - {worker0}


def test_workers_ignoring_term_are_killed_and_say_so(monkeypatch):
    host, workers = incident(on_signal={KILL: ("exit", 0.0)})
    result = run_module(monkeypatch, host, {"grace": 0.05})
    assert result["verified"] is True
    by_pid = {k["pid"]: k for k in result["killed"]}
    assert {by_pid[pid]["signal"] for pid in workers} == {"SIGKILL"}
    assert by_pid[1000]["signal"] == "SIGTERM"
    assert all(host.psutil.signalled(pid) == [TERM, KILL] for pid in workers)


def test_check_mode_signals_nothing_and_lists_what_it_would_end(monkeypatch):
    host, workers = incident()
    result = run_module(monkeypatch, host, {"_ansible_check_mode": True, "_ansible_diff": True})
    assert host.psutil.signals == [] and host.used() == [INCIDENT_MIB] * 8
    assert result["changed"] is True and result["verified"] is None and not result.get("failed")
    assert [w["pid"] for w in result["would_kill"]][:1] == [1000]
    assert {w["pid"] for w in result["would_kill"]} == {1000, 1001, 1002} | set(workers)
    assert result["killed"] == [] and "processes_left" not in result["gpus"][0]
    assert result["diff"]["before"].splitlines()[0] == "GPU 0: %d MiB used, VLLM::Worker_TP0(pid 1010)" % INCIDENT_MIB
    assert result["diff"]["after"].splitlines()[0] == "GPU 0: 0 MiB used, no holder"


def test_check_mode_predicts_what_the_real_run_does(monkeypatch):
    """A zombie holder, an excluded holder above the threshold and memory held by no process next to a holder:
    check mode names each in would_fail, its diff keeps them, and its `changed` is the real run's."""
    rows, held = vllm_server(1000, [0, 1])
    rows.append(Row(3000, 1, "python3", ["python3", "keep-me.py"]))
    rows.append(Row(3001, 1, "python3", ["python3", "leftover.py"], status="zombie", on_signal={}))
    host = Host(rows, held, gpus=4)
    host.hold(3000, 2, 7000)
    host.hold(3001, 3, 5000)
    host.lib.devices[1]["used"] += 4096  # held by no process
    args = {"exclude": ["keep-me"], "timeout": 0.3, "grace": 0.05}
    check = run_module(monkeypatch, host, dict(args, _ansible_check_mode=True, _ansible_diff=True))
    assert host.psutil.signals == []
    fails = " | ".join(check["would_fail"])
    assert "GPU 1: 4096 MiB would stay used with no process holding it" in fails
    assert "GPU 2: 7000 MiB would stay used" in fails and "pid 3000" in fails
    assert "GPU 3: pid 3001 (python3) holds 5000 MiB but is a zombie" in fails
    assert 3001 not in {w["pid"] for w in check["would_kill"]}
    after = check["diff"]["after"].splitlines()
    assert after == ["GPU 0: 0 MiB used, no holder", "GPU 1: 4096 MiB used, no holder",
                     "GPU 2: 7000 MiB used, python3(pid 3000)", "GPU 3: 5000 MiB used, python3(pid 3001)"]
    real = run_module(monkeypatch, host, args)
    assert real["failed"] is True and real["changed"] is True and check["changed"] is True
    assert 3001 not in {pid for pid, _number in host.psutil.signals} and 3000 not in {pid for pid, _number in host.psutil.signals}


def test_zombie_only_check_mode_is_unchanged_like_the_real_run(monkeypatch):
    host = Host([Row(3001, 1, "python3", ["python3", "leftover.py"], status="zombie", on_signal={})], {}, gpus=1)
    host.hold(3001, 0, 5000)
    check = run_module(monkeypatch, host, {"_ansible_check_mode": True})
    real = run_module(monkeypatch, host, FAST)
    assert check["changed"] is False and real["changed"] is False and real["failed"] is True


def test_diff_shows_the_fresh_reading(monkeypatch):
    host, _workers = incident()
    result = run_module(monkeypatch, host, {"_ansible_diff": True, "gpus": ["7"]})
    assert result["diff"]["before"] == "GPU 7: %d MiB used, VLLM::Worker_TP7(pid 1017)\n" % INCIDENT_MIB
    assert result["diff"]["after"] == "GPU 7: 0 MiB used, no holder\n"


def test_check_mode_on_free_gpus_is_unchanged(monkeypatch):
    host = Host([], {})
    result = run_module(monkeypatch, host, {"_ansible_check_mode": True})
    assert result["changed"] is False and result["would_kill"] == []


def test_two_servers_only_the_selected_one_is_ended(monkeypatch):
    first, first_workers = vllm_server(1000, range(4))
    second, second_workers = vllm_server(5000, range(4, 8))
    host = Host(first + second, {**first_workers, **second_workers})
    result = run_module(monkeypatch, host, {"gpus": ["0", "1", "2", "3"]})
    assert result["verified"] is True and [g["index"] for g in result["gpus"]] == [0, 1, 2, 3]
    assert {k["pid"] for k in result["killed"]} == {1000, 1001, 1002} | set(first_workers)
    assert not any(pid >= 5000 for pid, _number in host.psutil.signals)
    assert host.used() == [0] * 4 + [INCIDENT_MIB] * 4
    assert result["warnings"] == []


def test_unreadable_gpu_outside_the_selection_is_warned_about(monkeypatch):
    first, first_workers = vllm_server(1000, range(4))
    second, second_workers = vllm_server(5000, range(4, 8))
    host = Host(first + second, {**first_workers, **second_workers})
    host.lib.devices[6]["lost"] = True
    result = run_module(monkeypatch, host, {"gpus": ["0", "1", "2", "3"]})
    assert result["verified"] is True
    assert len(result["warnings"]) == 1 and "GPU 6 (outside `gpus`) could not be read" in result["warnings"][0]


def test_selected_by_uuid(monkeypatch):
    host, _workers = incident()
    result = run_module(monkeypatch, host, {"gpus": [host.lib.devices[6]["uuid"].upper()]})
    assert [g["index"] for g in result["gpus"]] == [6] and result["verified"] is True


def test_survivor_fails_naming_it_with_its_state_and_evidence(monkeypatch):
    rows, held = vllm_server(1000, [0, 1])
    rows[-1].on_signal = {}
    rows[-1].status = "disk-sleep"
    host = Host(rows, held)
    result = run_module(monkeypatch, host, FAST)
    assert result["failed"] is True and result["verified"] is False and result["changed"] is True
    assert "GPU 1: pid 1011 (VLLM::Worker_TP1, state disk-sleep) holds %d MiB: still there after every signal" % INCIDENT_MIB in result["msg"]
    assert [(s["pid"], s["signal"]) for s in result["survivors"]] == [(1011, "SIGKILL")]
    returned = yaml.safe_load(gpu_reclaim.RETURN)
    documented = set(returned["killed"]["contains"]) - {"seconds_to_exit", "ended"} | set(returned["survivors"]["contains"])
    assert set(result["survivors"][0]) == documented, "the keys of killed but its outcome, and its own"
    assert [s["pid"] for s in result["evidence"]["survivors"]] == [1011]
    assert result["evidence"]["survivors"][0]["state"] == "disk-sleep"
    assert result["evidence"]["survivors"][0]["parents"] == [{"pid": 1, "name": "systemd"}], "its launchers are gone: adopted by PID 1"
    assert isinstance(result["evidence"]["device_holders"], list) and isinstance(result["evidence"]["xid"], list)
    assert result["gpus"][0]["verified"] is True and result["gpus"][1]["verified"] is False
    assert FAST["timeout"] <= result["elapsed_s"] < FAST["timeout"] + 0.5, "a survivor is waited for until timeout, not longer"


def test_memory_held_by_no_process_fails_after_waiting_for_it(monkeypatch):
    rows, held = vllm_server(1000, [0])
    host = Host(rows, held, gpus=1, memory_comes_back=False)
    result = run_module(monkeypatch, host, FAST)
    assert result["failed"] is True and result["changed"] is True
    assert result["msg"] == ("GPUs not freed (ended 4 process(es)): GPU 0: %d MiB used with no process holding it (above idle_threshold_mib 1024): "
                             "memory held by no process, e.g. a driver teardown that did not finish" % INCIDENT_MIB)
    assert result["elapsed_s"] >= FAST["timeout"]


def test_foreign_pid_fails_at_once_naming_gpu_and_mib(monkeypatch):
    host, workers = incident()
    host.hold(MISSING_PID, 2, 20000)
    device_files(monkeypatch, workers)
    result = run_module(monkeypatch, host, {"timeout": 1})
    assert result["failed"] is True and result["changed"] is True
    assert "GPU 2: pid %d holds 20000 MiB but is not visible in this PID namespace" % MISSING_PID in result["msg"]
    assert MISSING_PID not in {pid for pid, _number in host.psutil.signals}
    assert "held by no process" not in result["msg"], "the memory is held, by the foreign process"
    assert result["elapsed_s"] < 0.5, "nothing can change for a foreign PID: no reason to wait for the timeout"


def test_check_mode_says_what_a_real_run_could_not_fix(monkeypatch):
    host, workers = incident()
    host.hold(MISSING_PID, 2, 20000)
    device_files(monkeypatch, workers)
    result = run_module(monkeypatch, host, {"_ansible_check_mode": True})
    assert result["changed"] is True and not result.get("failed")
    assert len(result["would_fail"]) == 1 and "GPU 2: pid %d holds 20000 MiB but is not visible" % MISSING_PID in result["would_fail"][0]
    assert result["warnings"] == ["a real run would fail: " + result["would_fail"][0]]
    assert host.psutil.signals == [] and set(workers) <= set(host.psutil.table)
    clean = run_module(monkeypatch, incident()[0], {"_ansible_check_mode": True})
    assert clean["would_fail"] == [] and clean["warnings"] == []


def test_foreign_pid_ignored_on_request(monkeypatch):
    host, workers = incident()
    host.hold(MISSING_PID, 2, 20000)
    device_files(monkeypatch, workers)
    result = run_module(monkeypatch, host, {"ignore_foreign": True})
    assert not result.get("failed") and result["verified"] is True


def test_lost_gpu_fails_while_the_others_are_freed(monkeypatch):
    host, _workers = incident()
    host.lib.devices[5]["lost"] = True
    result = run_module(monkeypatch, host, FAST)
    assert result["failed"] is True and result["changed"] is True
    assert "GPU 5: " in result["msg"] and "GPU_IS_LOST" in result["msg"]
    assert result["gpus"][5]["error"] and result["gpus"][5]["verified"] is False
    assert [g["verified"] for g in result["gpus"] if g["index"] != 5] == [True] * 7
    assert host.used()[:5] + host.used()[6:] == [0] * 7


@pytest.mark.parametrize("code, words", [(9, "NVML_ERROR_DRIVER_NOT_LOADED"), (12, "libnvidia-ml.so.1")])
def test_nvml_that_cannot_be_opened_fails_without_signalling(monkeypatch, code, words):
    host, _workers = incident()
    host.lib.init_error = code
    result = run_module(monkeypatch, host, {})
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("cannot initialise NVML") and words in result["msg"]
    assert host.psutil.signals == []


@pytest.mark.parametrize("dep, package", [("PYNVML", "nvidia-ml-py"), ("PSUTIL", "psutil")])
def test_missing_library_names_the_package(monkeypatch, dep, package):
    host, _workers = incident()
    monkeypatch.setattr(_deps.PYNVML, "module", host.lib)
    monkeypatch.setattr(_deps.PSUTIL, "module", host.psutil)
    monkeypatch.setattr(getattr(_deps, dep), "module", None)
    result = run_module(monkeypatch, None, {})
    assert result["failed"] is True and package in result["msg"]
    assert host.psutil.signals == [] and host.lib.calls == []


def test_match_leaves_other_holders_and_fails_naming_them(monkeypatch):
    rows, held = vllm_server(1000, [0])
    rows.append(Row(3001, 1, "python3", ["python3", "train.py"]))
    host = Host(rows, {**held, 3001: 1}, gpus=2)
    result = run_module(monkeypatch, host, dict(FAST, match=["^VLLM::"]))
    assert result["failed"] is True
    assert "GPU 1: pid 3001 (python3, state sleeping) holds %d MiB: not signalled: does not match `match`" % INCIDENT_MIB in result["msg"]
    assert 3001 not in {pid for pid, _number in host.psutil.signals}
    assert result["gpus"][0]["verified"] is True


def test_permission_denied_is_the_reason_given(monkeypatch):
    rows, held = vllm_server(1000, [0], engine_core=False)
    rows[-1].denied = True
    host = Host(rows, held, gpus=1)
    result = run_module(monkeypatch, host, FAST)
    assert result["failed"] is True
    assert [s["error"] for s in result["survivors"]] == ["permission denied sending SIGTERM (run as root or as the process owner)"]
    assert "permission denied sending SIGTERM" in result["msg"], result["msg"]
    assert "appeared during the reclaim" not in result["msg"], "the process was there from the start"


def test_holder_already_a_zombie_is_not_called_a_respawn(monkeypatch):
    # a zombie that keeps its GPU memory (a thread stuck in the driver): never signalled, still named as what it is
    rows, held = vllm_server(1000, [0], engine_core=False)
    rows[-1].status = "zombie"
    host = Host(rows, held, gpus=1)
    result = run_module(monkeypatch, host, FAST)
    assert result["failed"] is True and host.psutil.signalled(1010) == []
    assert "pid 1010 (VLLM::Worker_TP0, state zombie)" in result["msg"]
    assert "appeared during the reclaim" not in result["msg"], "the process was there from the start"


class Untouchable:
    """Stands for pynvml or psutil where nothing may be read: any use fails the test."""

    def __getattr__(self, name):
        raise AssertionError("bad input must fail before %s is used" % name)


@pytest.mark.parametrize("args, option", [
    ({"signals": ["TERM", "SIGBOGUS"]}, "signals"),
    ({"signals": []}, "signals"),
    ({"grace": 0}, "grace"),
    ({"grace": -1}, "grace"),
    ({"timeout": -5}, "timeout"),
    ({"match": ["VLLM::(Worker"]}, "match"),
    ({"exclude": ["[x"]}, "exclude"),
    ({"idle_threshold_mib": -1}, "idle_threshold_mib"),
    ({"gpus": ["0", "GPU-nope"]}, "gpus"),
    ({"gpus": []}, "gpus"),
    ({"launcher_patterns": []}, "launcher_patterns"),
    # signals that do not end a process by default: they would freeze a tree with its memory held, or do nothing
    ({"signals": ["STOP"]}, "signals"),
    ({"signals": ["TERM", "SIGTSTP"]}, "signals"),
    ({"signals": ["ttin"]}, "signals"),
    ({"signals": ["TTOU", "KILL"]}, "signals"),
    ({"signals": ["CONT"]}, "signals"),
    ({"signals": ["CHLD"]}, "signals"),
    ({"signals": ["URG"]}, "signals"),
    ({"signals": ["WINCH"]}, "signals"),
    ({"signals": ["19"]}, "signals"),
    ({"signals": ["RTMIN"]}, "signals"),
    ({"signals": ["\u0661\u0665"]}, "signals"),  # Arabic-Indic "15"
    # GPU indices: ASCII digits only
    ({"gpus": ["\u00b2"]}, "gpus"),  # superscript two: str.isdigit() says yes, int() says no
    ({"gpus": ["\u0663"]}, "gpus"),  # Arabic-Indic three: int() reads it as 3
    ({"gpus": ["\uff11"]}, "gpus"),  # fullwidth one
    ({"gpus": ["1.0"]}, "gpus"),
    ({"gpus": ["0x1"]}, "gpus"),
    ({"gpus": ["9" * 5000]}, "gpus"),  # past Python's int() digit limit
    # bounds
    ({"grace": 601}, "grace"),
    ({"timeout": 3601}, "timeout"),
    ({"timeout": float("inf")}, "timeout"),
    ({"settle": -0.1}, "settle"),
    ({"settle": 61}, "settle"),
    ({"idle_threshold_mib": 2 ** 21}, "idle_threshold_mib"),
    # patterns that would match every process
    ({"match": [""]}, "match"),
    ({"exclude": ["  "]}, "exclude"),
    ({"launcher_patterns": ["^VLLM::", ""]}, "launcher_patterns"),
    ({"cluster_daemons": ["(raylet"]}, "cluster_daemons"),
])
def test_bad_input_fails_before_anything_is_read(monkeypatch, args, option):
    monkeypatch.setattr(_deps.PYNVML, "module", Untouchable())
    monkeypatch.setattr(_deps.PSUTIL, "module", Untouchable())
    result = run_module(monkeypatch, None, args)
    assert result["failed"] is True and result["msg"].startswith(option + ": ")
    assert "changed" not in result or result["changed"] is False
    values = args[option] if isinstance(args[option], list) else [args[option]]
    assert any(repr(value)[:40] in result["msg"] for value in values) or "empty" in result["msg"], result["msg"]


def test_the_old_threshold_name_is_a_deprecated_alias(monkeypatch, capfd):
    """memory_threshold_mib still works until 0.3.0: judged as idle_threshold_mib, with a deprecation naming it."""
    monkeypatch.setattr(_deps.PYNVML, "module", Untouchable())
    monkeypatch.setattr(_deps.PSUTIL, "module", Untouchable())
    result = run_module(monkeypatch, None, {"memory_threshold_mib": -7})
    assert result["failed"] is True and result["msg"].startswith("idle_threshold_mib: -7 must be"), result["msg"]
    # what AnsibleModule returns as the result's deprecations (the harness ends the run before it adds them); once a
    # controller-side test has loaded ansible.utils.display, ansible-core hands them to its display (stderr) instead
    said = json.dumps(get_deprecation_messages()) + capfd.readouterr().err
    assert "memory_threshold_mib" in said and "0.3.0" in said and "gpuops.fleet" in said, said


def test_every_list_of_processes_documents_a_process_alike():
    """killed, foreign and left_alone each list processes (survivors has the keys of killed): each documents a process's
    pid, name, cmdline and username in the same words (RETURN has no doc fragments, so the words are held alike here)."""
    returned = yaml.safe_load(gpu_reclaim.RETURN)
    for key in ("pid", "name", "cmdline", "username"):
        documented = [{k: v for k, v in returned[name]["contains"][key].items() if k != "sample"}
                      for name in ("killed", "foreign", "left_alone")]
        assert all(option == documented[0] for option in documented), (key, documented)


def test_documented_options_are_the_argument_spec_and_build_spec_defaults():
    """Each default is written once: DOCUMENTATION, the module's argument_spec and build_spec() must agree."""
    doc = documented_options(gpu_reclaim.DOCUMENTATION, nvml_fragment.ModuleDocFragment.DOCUMENTATION)
    assert_documented_as_specified(doc, ARGUMENT_SPEC)
    built = build_spec({})
    assert [p.pattern for p in built.launcher_patterns] == doc["launcher_patterns"]["default"]
    assert [p.pattern for p in built.cluster_daemons] == doc["cluster_daemons"]["default"]
    assert [name[3:] for name, _number in built.signals] == doc["signals"]["default"]
    assert (built.grace, built.timeout, built.settle, built.memory_threshold_mib) == tuple(
        doc[name]["default"] for name in ("grace", "timeout", "settle", "idle_threshold_mib"))
    assert (built.kill_tree, built.ignore_foreign, built.gpus, built.match) == (True, False, None, [])


def test_unknown_gpu_index_fails_before_any_signal(monkeypatch):
    host, _workers = incident()
    result = run_module(monkeypatch, host, {"gpus": ["0", "8"]})
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"] == "gpus: no GPU has index 8; this host has 8 GPUs (indices 0-7)"
    assert host.psutil.signals == []


def distrusted_host(monkeypatch):
    """A TP=6 server on GPUs 0-5 whose workers have their device files open; GPU 6 held by a PID this namespace does not
    have; GPU 7 listed under PID 900, which here is a plain sleep with no device file open (a host PID that collides)."""
    rows, workers = vllm_server(1000, range(6))
    host = Host(rows, workers)
    host.hold(MISSING_PID, 6, 20000)
    host.hold(900, 7, 4000)
    device_files(monkeypatch, workers)
    return host, workers


def test_local_pid_without_device_files_is_unverifiable_when_nvml_lists_missing_pids(monkeypatch):
    host, workers = distrusted_host(monkeypatch)
    result = run_module(monkeypatch, host, dict(FAST, ignore_foreign=True))
    assert result["failed"] is True and result["verified"] is False
    assert "GPU 7: pid 900" in result["msg"] and "unverifiable" in result["msg"] and str(MISSING_PID) in result["msg"]
    assert 900 not in {pid for pid, _number in host.psutil.signals} and 900 in host.psutil.table
    assert 900 not in {k["pid"] for k in result["killed"]}
    assert {k["pid"] for k in result["killed"]} == {1000, 1001, 1002} | set(workers), "the verified workers' tree is still ended"
    assert host.used() == [0] * 6 + [20000, 4000]
    assert_bystanders_untouched(host)


def test_nested_pid_namespace_asks_for_evidence_even_when_every_pid_exists(monkeypatch):
    rows, workers = vllm_server(1000, range(7))
    host = Host(rows, workers)
    host.hold(900, 7, 4000)
    device_files(monkeypatch, workers)
    monkeypatch.setattr(_pid_trust, "nested_pid_namespace", lambda status_path=None: True)
    result = run_module(monkeypatch, host, FAST)
    assert result["failed"] is True and "GPU 7: pid 900" in result["msg"] and "nested PID namespace" in result["msg"]
    assert 900 not in {pid for pid, _number in host.psutil.signals}
    assert host.used() == [0] * 7 + [4000]
    assert [g["verified"] for g in result["gpus"]] == [True] * 7 + [False]


def test_unverifiable_pid_in_check_mode_would_fail_and_is_not_a_target(monkeypatch):
    host, workers = distrusted_host(monkeypatch)
    result = run_module(monkeypatch, host, {"_ansible_check_mode": True, "ignore_foreign": True})
    assert not result.get("failed") and host.psutil.signals == []
    assert {k["pid"] for k in result["would_kill"]} == {1000, 1001, 1002} | set(workers)
    assert [text for text in result["would_fail"] if "pid 900" in text and "unverifiable" in text], result["would_fail"]


def test_unverifiable_holder_keeps_its_launcher_tree_alive(monkeypatch):
    """A launcher's tree is taken only when every holder inside it is a target: an unverifiable one protects it."""
    host, workers = distrusted_host(monkeypatch)
    host.psutil.table[900].ppid = 1001  # the sleep sits below the EngineCore
    result = run_module(monkeypatch, host, dict(FAST, ignore_foreign=True))
    signalled = {pid for pid, _number in host.psutil.signals}
    assert result["failed"] is True and 900 not in signalled and 1000 not in signalled and 1001 not in signalled
    assert set(workers) <= signalled and host.used()[:6] == [0] * 6


def test_trusted_pids_need_no_device_file(monkeypatch):
    """In the host PID namespace with every listed PID here, NVML's word is enough (as before)."""
    rows, workers = vllm_server(1000, range(7))
    host = Host(rows, workers)
    host.hold(900, 7, 4000)
    device_files(monkeypatch, [])
    result = run_module(monkeypatch, host, FAST)
    assert not result.get("failed") and result["verified"] is True and 900 in {k["pid"] for k in result["killed"]}
    assert host.used() == [0] * 8


def test_run_reclaim_is_the_module_without_ansible(monkeypatch):
    """bench/ and tests/gpu/ call module_utils' run_reclaim: the same steps, defaults and result as the module."""
    asked = []
    result, warnings, failed = run_reclaim({"signals": ["STOP"]}, False, False, lambda: asked.append(1))
    assert failed is True and result["changed"] is False and "STOP" in result["msg"] and warnings == []
    assert asked == [], "bad input fails before the libraries (NVML, psutil) are asked for"
    host, workers = incident()
    monkeypatch.setattr(_process_table, "os", types.SimpleNamespace(getpid=lambda: ME))
    monkeypatch.setattr(_reclaim, "_getpgid", host.psutil.getpgid)
    result, warnings, failed = run_reclaim({"grace": 0.2, "timeout": 0.3}, False, True, lambda: (host.lib, host.psutil))
    assert failed is False and result["verified"] is True and "warnings_list" not in result
    assert {k["pid"] for k in result["killed"]} == {1000, 1001, 1002} | set(workers)
    assert result["diff"]["after"].count("0 MiB used, no holder") == 8 and host.used() == [0] * 8
    assert [w for w in warnings if "timeout" in w], "grace x signals above timeout: the budget warning comes back"
    again = run_module(monkeypatch, host, {})
    assert again["verified"] is True and again["killed"] == [] and again["changed"] is False


MEMORY = "nvmlDeviceGetMemoryInfo_v2"


class SessionNvml(FakeNvml):
    """Records init and shutdown among the calls; ``late_mib`` is added to GPU 0's used memory in every session after the first
    (a reading that only a new session shows)."""

    def __init__(self, devices, late_mib=0):
        super().__init__(devices)
        self.sessions = 0
        self.late_mib = late_mib

    def nvmlInit(self):
        super().nvmlInit()
        self.sessions += 1
        self.calls.append("nvmlInit")

    def nvmlShutdown(self):
        super().nvmlShutdown()
        self.calls.append("nvmlShutdown")

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        info = super().nvmlDeviceGetMemoryInfo(handle, version)
        if handle == 0 and self.sessions > 1:
            info.used += self.late_mib * 1024 * 1024
        return info


def host_with(late_mib=0):
    rows, held = vllm_server(1000, range(8))
    host = Host(rows, held)
    host.lib = SessionNvml(host.lib.devices, late_mib)
    return host


def test_the_last_reading_is_taken_after_a_shutdown_and_a_new_init(monkeypatch):
    host = host_with()
    result = run_module(monkeypatch, host, dict(FAST, timeout=5))
    assert result["verified"] is True, result["msg"]
    calls = host.lib.calls
    assert calls.count("nvmlInit") == 2 and calls.count("nvmlShutdown") == 2, "one re-init, and every init shut down"
    second = calls.index("nvmlInit", calls.index("nvmlInit") + 1)
    assert calls[second - 1] == "nvmlShutdown", "the module's session is shut down before the new one is opened"
    assert calls[-1] == "nvmlShutdown"
    fresh = calls[second:-1]
    assert fresh.count(MEMORY) >= 8 and fresh.count("nvmlDeviceGetUUID") == 8, "every GPU read again, its UUID included"
    assert "nvmlDeviceGetComputeRunningProcesses" in fresh
    assert MEMORY not in calls[calls.index("nvmlShutdown"):second], "no reading between the shutdown and the new init"
    assert result["reading_after"]["fresh_session"] is True
    assert 0 <= result["reading_after"]["session_opened_s"] <= result["elapsed_s"]


def test_a_new_session_that_cannot_be_opened_fails_the_verification(monkeypatch):
    host = host_with()
    real_init = host.lib.nvmlInit

    def init_once():
        if host.lib.sessions:
            raise host.lib.NVMLError(9)  # driver not loaded
        real_init()

    host.lib.nvmlInit = init_once
    result = run_module(monkeypatch, host, dict(FAST, timeout=5))
    assert result["verified"] is False and result.get("failed")
    assert "cannot initialise NVML again" in result["msg"]
    assert result["reading_after"] == {"fresh_session": False, "session_opened_s": None}


def test_the_new_sessions_reading_is_the_one_judged(monkeypatch):
    host = host_with(late_mib=5000)  # the first session reads GPU 0 free; a new session sees 5000 MiB held by no process
    result = run_module(monkeypatch, host, dict(FAST, timeout=0.5))
    assert result["verified"] is False and result.get("failed")
    gpu0 = result["gpus"][0]
    assert gpu0["memory_used_mib_after"] == 5000 and not gpu0["verified"]
    assert all(g["verified"] for g in result["gpus"][1:])
    assert "GPU 0: 5000 MiB used with no process holding it" in result["msg"]
    assert result["reading_after"]["fresh_session"] is True


VLLM_MATCH = [r"^VLLM::", r"vllm\.entrypoints\.", r"(^|/)vllm\s+serve(\s|$)"]


BATCH = ["python3", "batch_infer.py"]


@pytest.fixture(autouse=True)
def one_session(monkeypatch):
    """Every process of the fake table is in session 1 (no adoption told by sessions)."""
    monkeypatch.setattr(_reclaim, "getsid", lambda pid: 1)


def incident_and_colleague():
    """The incident's seven orphans on GPUs 1-7 (adopted by PID 1) and a colleague's worker on GPU 3."""
    rows, held = vllm_server(1000, range(8), engine_core=False)
    rows = [row for row in rows if row.pid not in (1000, 1002, 1010)]
    for row in rows:
        row.ppid = 1
    held = {pid: gpu for pid, gpu in held.items() if gpu > 0}
    rows += [Row(3000, 1, "python3", BATCH, username="alice"), Row(3001, 3000, "VLLM::Worker_TP0", ["VLLM::Worker_TP0"], username="alice")]
    host = Host(rows, held)
    host.hold(3001, 3, 12000)
    return host, held


def test_check_mode_names_the_colleagues_worker_in_would_fail_and_foreign(monkeypatch):
    host, held = incident_and_colleague()
    result = run_module(monkeypatch, host, dict(FAST, match=VLLM_MATCH, orphans_only=True, _ansible_check_mode=True))
    assert {k["pid"] for k in result["would_kill"]} == set(held)
    assert result["would_fail"] == [
        "GPU 3: pid 3001 (VLLM::Worker_TP0) holds 12000 MiB: not signalled: belongs to live PID 3000 (python3 batch_infer.py), "
        "not to this server nor an orphan: someone else's job"]
    assert result["foreign"] == [{
        "pid": 3001, "name": "VLLM::Worker_TP0", "cmdline": ["VLLM::Worker_TP0"], "username": "alice", "gpus": [3],
        "launcher": None, "parent": {"pid": 3000, "name": "python3", "cmdline": BATCH, "username": "alice"}, "container": None,
        "reason": "PID 3001 VLLM::Worker_TP0 on GPU 3 belongs to live PID 3000 (python3 batch_infer.py), not to this server: not ended"}]
    assert host.psutil.signals == []


def test_a_colleagues_worker_in_a_container_is_named_with_its_container(monkeypatch, cgroups):
    """The colleague's job runs in a docker container: left alone as before, its entry and its reason name the container."""
    host, held = incident_and_colleague()
    cgroups.update({3000: ContainerRef("docker", DOCKER_ID, engine="docker"), 3001: ContainerRef("docker", DOCKER_ID, engine="docker")})
    host.cli = FakeRuntimeCli([FakeContainer("docker", DOCKER_ID, "alice-batch", "vllm/vllm-openai:v0.11.0", 3000, "no")])
    result = run_with_runtimes(monkeypatch, host, dict(FAST, match=VLLM_MATCH, orphans_only=True, _ansible_check_mode=True))
    assert {k["pid"] for k in result["would_kill"]} == set(held)
    (foreign,) = result["foreign"]
    assert foreign["container"] == {"runtime": "docker", "id": DOCKER_ID, "name": "alice-batch", "image": "vllm/vllm-openai:v0.11.0"}
    assert foreign["reason"] == ("PID 3001 VLLM::Worker_TP0 on GPU 3 in the docker container alice-batch belongs to live PID 3000 "
                                 "(python3 batch_infer.py), not to this server: not ended")
    assert host.psutil.signals == [] and host.cli.commands("stop") == []


def test_real_run_ends_the_orphans_leaves_the_colleague_and_fails_naming_it(monkeypatch):
    host, held = incident_and_colleague()
    result = run_module(monkeypatch, host, dict(FAST, match=VLLM_MATCH, orphans_only=True))
    assert result["failed"] is True and result["verified"] is False
    assert {k["pid"] for k in result["killed"]} == set(held)
    assert {3000, 3001} <= set(host.psutil.table) and not {3000, 3001} & {pid for pid, _n in host.psutil.signals}
    assert "GPU 3: pid 3001 (VLLM::Worker_TP0, state sleeping) holds 12000 MiB: not signalled: belongs to live PID 3000" in result["msg"]
    assert [f["pid"] for f in result["foreign"]] == [3001]
    assert_bystanders_untouched(host)


def test_without_orphans_only_everything_that_matches_is_ended(monkeypatch):
    """What vllm_server_reclaim_all_holders (or a plain reclaim) does: the colleague's worker too, never batch_infer.py."""
    host, held = incident_and_colleague()
    result = run_module(monkeypatch, host, dict(FAST, match=VLLM_MATCH))
    assert result.get("failed") is not True and result["verified"] is True
    assert {k["pid"] for k in result["killed"]} == set(held) | {3001} and result["foreign"] == []
    assert 3000 in host.psutil.table


def test_bad_owner_fails_before_anything_is_read(monkeypatch):
    host, _held = incident_and_colleague()
    result = run_module(monkeypatch, host, dict(FAST, owner={"pid": 1}, orphans_only=True))
    assert result["failed"] is True and result["changed"] is False
    assert result["msg"].startswith("owner.pid: 1 is not the PID of a server"), result["msg"]
    assert host.psutil.signals == []


# live_jobs: keep. The colleague's worker (PID 3001 on GPU 3) is left alone on purpose: it does not fail the run
COLLEAGUE = {"pid": 3001, "name": "VLLM::Worker_TP0", "cmdline": ["VLLM::Worker_TP0"], "username": "alice", "gpus": [3],
             "used_memory_mib": 12000, "rule": "orphans_only",
             "why": "belongs to live PID 3000 (python3 batch_infer.py), not to this server nor an orphan: someone else's job"}


KEEP = dict(FAST, match=VLLM_MATCH, orphans_only=True, live_jobs="keep")


def test_keep_ends_the_orphans_and_accepts_the_gpu_the_colleague_keeps_busy(monkeypatch):
    host, held = incident_and_colleague()
    result = run_module(monkeypatch, host, KEEP)
    assert result.get("failed") is not True and result["verified"] is True, result["msg"]
    assert {k["pid"] for k in result["killed"]} == set(held)
    assert {3000, 3001} <= set(host.psutil.table) and not {3000, 3001} & {pid for pid, _n in host.psutil.signals}
    assert host.used() == [0, 0, 0, 12000, 0, 0, 0, 0]
    assert result["left_alone"] == [COLLEAGUE] and [f["pid"] for f in result["foreign"]] == [3001]
    assert [g["left_alone"] for g in result["gpus"]] == [[], [], [], [3001], [], [], [], []]
    assert result["msg"].startswith("GPU 0, 1, 2, 4, 5, 6, 7 verified free by fresh NVML readings; GPU 3 kept busy by 1 holder(s) "
                                    "left alone on purpose (left_alone): ended 7 process(es)"), result["msg"]
    assert_bystanders_untouched(host)


def test_keep_in_check_mode_lists_what_it_would_leave_alone_and_warns_of_nothing(monkeypatch):
    host, held = incident_and_colleague()
    result = run_module(monkeypatch, host, dict(KEEP, _ansible_check_mode=True))
    assert {k["pid"] for k in result["would_kill"]} == set(held)
    assert result["would_fail"] == [] and result.get("warnings", []) == []
    assert result["left_alone"] == [COLLEAGUE] and result["gpus"][3]["left_alone"] == [3001]
    assert "GPU 3 would keep busy by 1 holder(s)" in result["msg"] and "would fail" not in result["msg"]
    assert host.psutil.signals == []


def test_the_default_fails_naming_the_colleague_and_lists_it_the_same(monkeypatch):
    host, _held = incident_and_colleague()
    result = run_module(monkeypatch, host, dict(FAST, match=VLLM_MATCH, orphans_only=True))
    assert result["failed"] is True and "GPU 3: pid 3001 (VLLM::Worker_TP0, state sleeping) holds 12000 MiB: not signalled" in result["msg"]
    assert result["left_alone"] == [COLLEAGUE] and result["gpus"][3]["left_alone"] == [3001] and result["gpus"][3]["verified"] is False


def survivor(host):
    host.psutil.table[1013].on_signal = {}


def zombie_left_alone(host):
    """A process that match does not take, a zombie that keeps 4096 MiB on GPU 0: no job runs there."""
    host.psutil.table[4000] = Row(4000, 1, "python3", ["python3", "train.py"], status="zombie")
    host.hold(4000, 0, 4096)


def memory_of_no_process(host):
    host.lib.devices[3]["used"] += 4096  # beside the colleague's worker


def lost_gpu(host):
    host.lib.devices[5]["lost"] = True


def foreign_pid(host):
    host.hold(MISSING_PID, 0, 20000)


@pytest.mark.parametrize("fault, named", [
    (survivor, "GPU 3: pid 1013 (VLLM::Worker_TP3, state sleeping) holds %d MiB: still there after every signal" % INCIDENT_MIB),
    (zombie_left_alone, "GPU 0: pid 4000 (python3) holds 4096 MiB but is a zombie"),
    (memory_of_no_process, "GPU 3: 16096 MiB used, 4096 MiB of it beyond what the holders left alone hold (pid 3001 (VLLM::Worker_TP0, "
                           "12000 MiB)), above idle_threshold_mib 1024: memory held by no process"),
    (lost_gpu, "GPU 5: GPU is lost"),
    (foreign_pid, "GPU 0: pid %d holds 20000 MiB but is not visible in this PID namespace" % MISSING_PID),
], ids=["survivor", "zombie", "memory-of-no-process", "lost-gpu", "foreign-pid"])
def test_keep_still_fails_for_everything_else_beside_the_colleague(monkeypatch, fault, named):
    host, held = incident_and_colleague()
    fault(host)
    if fault is foreign_pid:  # NVML lists a PID this namespace lacks: a holder is trusted with its device files open
        device_files(monkeypatch, list(held) + [3001])
    result = run_module(monkeypatch, host, KEEP)
    assert result["failed"] is True and result["verified"] is False
    assert named in result["msg"], result["msg"]
    assert "pid 3001 (" not in result["msg"].replace("the holders left alone hold (pid 3001 (", ""), "the colleague is no reason"
    assert result["left_alone"] == [COLLEAGUE] and 3001 in host.psutil.table and host.psutil.signalled(3001) == []


SUPERVISOR = Row(200, 1, "python3", ["python3", "/opt/jobs/supervise.py"])


MODEL = ["python3", "/opt/jobs/serve_model.py", "--shard", "0"]


OTHER = ["python3", "/opt/jobs/other_job.py"]


RUN = {"gpus": ["0"], "grace": 0.2, "timeout": 5}


class Supervised(Host):
    """GPU 0 held by PID 300, a child of a live supervisor (PID 200) that forks PID 301 once 300 has exited;
    301 holds ``respawn_mib`` on GPU 0 at once (0: not yet)."""

    def __init__(self, respawn_cmdline, respawn_mib):
        super().__init__([Row(200, 1, "python3", list(SUPERVISOR.cmdline)), Row(300, 200, "python3", MODEL)], {300: 0})
        self.respawn = Row(301, 200, "python3", respawn_cmdline, create_time=2000.0)
        self.respawn_mib = respawn_mib

    def release(self, pid):
        super().release(pid)
        if pid == 300:
            self.psutil.table[301] = self.respawn
            if self.respawn_mib:
                self.hold(301, 0, self.respawn_mib)


def test_a_holder_respawned_by_its_live_parent_is_ended_and_the_window_waited(monkeypatch):
    host = Supervised(MODEL, 10000)
    result = run_module(monkeypatch, host, RUN)
    assert result.get("failed") is not True and result["verified"] is True, result["msg"]
    killed = {k["pid"]: k for k in result["killed"]}
    assert set(killed) == {300, 301} and killed[301]["role"] == "respawned" and killed[301]["signal"] == "SIGTERM"
    assert host.psutil.signalled(301) == [TERM] and host.psutil.signalled(200) == []
    assert 301 not in host.psutil.table and 200 in host.psutil.table
    assert host.used()[0] == 0
    watch = result["respawn_watch"]
    assert watch["settle"] == "auto" and watch["candidates"] == []
    assert [(p["pid"], p["alive"]) for p in watch["parents"]] == [(200, True)]
    assert watch["waited_s"] > 0 and result["elapsed_s"] >= RESPAWN_WINDOW_S  # the window counts from the last exit
    assert_bystanders_untouched(host)


@pytest.mark.parametrize("live_jobs", ["fail", "keep"])
@pytest.mark.parametrize("respawn_mib", [10000, 0])
def test_a_respawn_the_run_may_not_end_fails_it_while_it_runs(monkeypatch, respawn_mib, live_jobs):
    """``match`` takes the holder, not its replacement: the run must not call the GPU free, with or without memory yet.
    A respawn is not a holder the run left alone on purpose: live_jobs: keep does not accept it."""
    host = Supervised(OTHER, respawn_mib)
    result = run_module(monkeypatch, host, dict(RUN, match=["serve_model"], live_jobs=live_jobs))
    assert result["failed"] is True and result["verified"] is False
    assert result["left_alone"] == [] and result["gpus"][0]["left_alone"] == []
    assert "pid 301" in result["msg"] and "forked by PID 200 (python3 /opt/jobs/supervise.py)" in result["msg"], result["msg"]
    assert "does not match `match`" in result["msg"]
    assert ("holds 10000 MiB" in result["msg"]) == bool(respawn_mib) and ("no GPU memory yet" in result["msg"]) != bool(respawn_mib)
    assert host.psutil.signalled(301) == [] and 301 in host.psutil.table and host.used()[0] == respawn_mib
    (candidate,) = result["respawn_watch"]["candidates"]
    assert (candidate["pid"], candidate["parent"], candidate["running"]) == (301, 200, True)


def test_nothing_can_respawn_the_first_free_reading_verifies(monkeypatch):
    """The workers' launcher is ended and hangs from PID 1: no parent to watch, no window."""
    rows, held = vllm_server(1000, range(8))
    host = Host(rows, held)
    result = run_module(monkeypatch, host, {"grace": 0.2, "timeout": 5})
    assert result["verified"] is True and host.used() == [0] * 8
    assert result["respawn_watch"] == {"settle": "auto", "parents": [], "candidates": [], "waited_s": 0.0}
    assert result["elapsed_s"] < RESPAWN_WINDOW_S, "no fixed window when nothing can respawn"


def test_a_live_wrapper_above_the_launcher_is_watched_for_the_window(monkeypatch):
    rows, held = vllm_server(1000, range(2), parent=200)
    host = Host([Row(200, 1, "bash", ["/bin/bash", "/opt/run-vllm.sh"])] + rows, held, gpus=2)
    result = run_module(monkeypatch, host, {"grace": 0.2, "timeout": 5})
    assert result["verified"] is True and host.psutil.signalled(200) == []
    assert [p["pid"] for p in result["respawn_watch"]["parents"]] == [200]
    assert result["respawn_watch"]["waited_s"] > 0 and result["elapsed_s"] >= RESPAWN_WINDOW_S


def test_a_fixed_settle_waits_whatever_the_lineage(monkeypatch):
    rows, held = vllm_server(1000, range(8))
    result = run_module(monkeypatch, Host(rows, held), {"grace": 0.2, "timeout": 5, "settle": 0.3})
    assert result["verified"] is True and result["respawn_watch"]["settle"] == 0.3
    assert result["respawn_watch"]["waited_s"] >= 0.3


@pytest.mark.parametrize("value", ["often", "0.5s", "", True, -1, 61, float("nan"), [0.5], {"s": 1}])
def test_bad_settle_fails_naming_it_before_anything_is_read_or_signalled(monkeypatch, value):
    monkeypatch.setattr(_deps.PYNVML, "module", Untouchable())
    monkeypatch.setattr(_deps.PSUTIL, "module", Untouchable())
    result = run_module(monkeypatch, None, {"settle": value})
    assert result["failed"] is True and result["msg"].startswith("settle: %r is neither auto nor a number of seconds" % (value,)), result["msg"]


@pytest.mark.parametrize("value, settle", [("auto", "auto"), (" AUTO ", "auto"), ("0.25", 0.25), (0, 0.0), (2, 2.0), (60, 60.0)])
def test_good_settle_values(value, settle):
    assert build_spec({"settle": value}).settle == settle


def test_settle_default_is_auto():
    assert build_spec({}).settle == "auto"
    with pytest.raises(SpecError):
        build_spec({"settle": None})


def test_a_cluster_daemons_new_child_that_holds_nothing_is_only_reported(monkeypatch):
    """raylet refills its pool of idle workers once an actor exits: not a respawn to end, nor a reason to fail."""
    host = Supervised(["ray::IDLE"], 0)
    host.psutil.table[200].name, host.psutil.table[200].cmdline = "raylet", ["/opt/ray/core/src/ray/raylet/raylet", "--node-manager-port=0"]
    result = run_module(monkeypatch, host, RUN)
    assert result["verified"] is True, result["msg"]
    assert host.psutil.signalled(301) == [] and host.psutil.signalled(200) == []
    (candidate,) = result["respawn_watch"]["candidates"]
    assert candidate["pid"] == 301 and "cluster daemon" in candidate["reason"]


OFFSET = 5000.0  # create_time - OFFSET = time.monotonic() at the start: what _boot_offset gives on a real host


SCOPE = "/user.slice/user-1000.slice/session-3.scope"


WORKER = ["python3", "/opt/jobs/worker.py", "--rank", "0"]


class Daemonizing(Host):
    """GPU 0 held by PID 300 (below PID 1, in SCOPE). As it exits it leaves PID 301: a daemon whose parent is gone
    (PID 1 adopted it), in ``cgroup``, that takes ``mib`` of GPU 0 ``delay`` s later (0 MiB: never)."""

    def __init__(self, monkeypatch, mib, delay=0.0, cgroup=SCOPE):
        super().__init__([Row(300, 1, "python3", WORKER)], {300: 0})
        self.mib, self.delay = mib, delay
        self.timers = []
        cgroups = {300: SCOPE, 301: cgroup}
        monkeypatch.setattr(_reclaim, "read_cgroup", lambda pid: cgroups.get(pid, "/system.slice/other.service"))
        monkeypatch.setattr(_lineage, "_boot_offset", lambda psutil, clock: OFFSET)

    def release(self, pid):
        super().release(pid)
        if pid == 300:
            self.psutil.table[301] = Row(301, 1, "python3", WORKER, create_time=time.monotonic() + OFFSET)
            if self.mib:
                timer = threading.Timer(self.delay, self.hold, (301, 0, self.mib))
                self.timers.append(timer)
                timer.start()


@pytest.mark.parametrize("delay", [0.0, 0.2])
def test_a_daemon_the_worker_leaves_as_it_ends_fails_the_run_once_it_takes_the_gpu(monkeypatch, delay):
    """A holder that takes the GPU a moment after its worker ends: the run watches the GPUs for RESPAWN_WINDOW_S and fails
    naming it and its worker, never verified; nothing proves it is the tree's, so it is not signalled."""
    host = Daemonizing(monkeypatch, 40000, delay)
    result = run_module(monkeypatch, host, RUN)
    for timer in host.timers:
        timer.join()
    assert result["failed"] is True and result["verified"] is False, result["msg"]
    assert "GPU 0: pid 301 (python3, state sleeping) holds 40000 MiB" in result["msg"], result["msg"]
    assert "most likely forked by it as it ended" in result["msg"] and "PID 300 (python3 /opt/jobs/worker.py --rank 0)" in result["msg"]
    assert host.psutil.signalled(301) == [] and 301 in host.psutil.table and host.used()[0] == 40000
    assert [k["pid"] for k in result["killed"]] == [300]
    (candidate,) = result["respawn_watch"]["candidates"]
    assert (candidate["pid"], candidate["forked_by"], candidate["parent"], candidate["detached"], candidate["running"]) == (301, 300, 1, True, True)
    assert_bystanders_untouched(host)


def test_a_daemon_that_holds_nothing_is_watched_for_the_window_then_named_in_a_warning(monkeypatch):
    host = Daemonizing(monkeypatch, 0)
    result = run_module(monkeypatch, host, RUN)
    assert result["verified"] is True, result["msg"]
    assert result["elapsed_s"] >= RESPAWN_WINDOW_S, "watched for the window from its first sight"
    assert host.psutil.signalled(301) == [] and 301 in host.psutil.table and host.used()[0] == 0
    (warning,) = result["warnings"]
    assert warning.startswith("pid 301 (python3) holds no selected GPU after the respawn watch, but still runs: started "), warning
    assert [c["pid"] for c in result["respawn_watch"]["candidates"]] == [301]


def test_a_new_process_of_another_cgroup_below_pid_1_costs_no_wait(monkeypatch):
    """A service PID 1 starts at that moment, in a cgroup of its own, is not the tree's: the first free reading verifies."""
    host = Daemonizing(monkeypatch, 0, cgroup="/system.slice/cron.service")
    result = run_module(monkeypatch, host, RUN)
    assert result["verified"] is True and result["warnings"] == [], result
    assert result["elapsed_s"] < RESPAWN_WINDOW_S and result["respawn_watch"]["candidates"] == []


def test_a_target_whose_cgroup_was_not_read_matches_any(monkeypatch):
    """Beyond CGROUP_READS targets the cgroup is not read before the signals: what they leave is watched, never missed."""
    monkeypatch.setattr(_lineage, "CGROUP_READS", 0)
    host = Daemonizing(monkeypatch, 40000, cgroup="/system.slice/cron.service")
    result = run_module(monkeypatch, host, RUN)
    for timer in host.timers:
        timer.join()
    assert result["failed"] is True and "GPU 0: pid 301" in result["msg"] and host.psutil.signalled(301) == []


# ---- containers: never signalled; refused, or stopped through their runtime --------------------------------------------

CONMON = ["/usr/bin/conmon", "--api-version", "1", "-c", PODMAN_ID, "-u", PODMAN_ID, "-r", "/usr/sbin/runc", "--exit-command",
          "/usr/bin/podman", "--exit-command-arg", "container", "--exit-command-arg", "cleanup", "--exit-command-arg", PODMAN_ID]
IN_CONTAINER = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/llama"]
CONTAINER_MIB = 30000


class Containerized(Host):
    """GPU 0 held by PID 3000, the main process of a podman container (its PID 1 inside: it ignores SIGTERM) below conmon
    (2990), and GPU 1 by PID 3100, a docker container's below containerd-shim (3090); the runtimes' command lines answer
    from ``cli``, and a stop ends the container's process (its memory comes back)."""

    def __init__(self, cgroups, podman_policy="always", docker_policy="always", **cli):
        rows = [Row(2990, 1, "conmon", CONMON, username="root"), Row(3000, 2990, "python3", IN_CONTAINER, on_signal={}),
                Row(3090, 1, "containerd-shim", ["/usr/bin/containerd-shim-runc-v2", "-namespace", "moby", "-id", DOCKER_ID]),
                Row(3100, 3090, "python3", IN_CONTAINER, on_signal={})]
        super().__init__(rows, {3000: 0, 3100: 1}, gpus=3)
        for pid in (3000, 3100):
            self.lib.devices[self.gpu_of(pid)]["used"] += CONTAINER_MIB - INCIDENT_MIB
            self.lib.devices[self.gpu_of(pid)]["compute"] = [proc(pid, CONTAINER_MIB)]
        cgroups.update({3000: ContainerRef("podman", PODMAN_ID, engine="podman"), 3100: ContainerRef("docker", DOCKER_ID, engine="docker")})
        self.cli = FakeRuntimeCli([FakeContainer("podman", PODMAN_ID, "vllm-llama", "localhost/vllm:0.11", 3000, podman_policy),
                                   FakeContainer("docker", DOCKER_ID, "vllm-docker", "vllm/vllm-openai:v0.11.0", 3100, docker_policy)],
                                  on_stop=self.stopped, **cli)

    def gpu_of(self, pid):
        return {3000: 0, 3100: 1}[pid]

    def stopped(self, container):
        """The runtime's stop: the container's process exits (SIGKILL after -t), its memory comes back."""
        self.psutil.table.pop(container.pid, None)
        self.release(container.pid)


def run_with_runtimes(monkeypatch, host, args):
    """run_module, the runtimes' command lines played by host.cli and found where the module's get_bin_path says."""
    monkeypatch.setattr(_containers, "run_cli", host.cli)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: "/opt/bin/" + name)
    return run_module(monkeypatch, host, args)


def test_a_container_holder_is_refused_by_default_and_nothing_is_signalled(monkeypatch, cgroups):
    host = Containerized(cgroups)
    result = run_with_runtimes(monkeypatch, host, {"gpus": ["0"], "grace": 0.05, "timeout": 1})
    assert result["failed"] is True and result["changed"] is False and result["verified"] is False
    assert host.psutil.signals == [] and host.cli.commands("stop") == [] and host.used()[0] == CONTAINER_MIB
    assert result["msg"] == (
        "refused before signalling or stopping anything: podman container vllm-llama (id %s, image localhost/vllm:0.11) holds GPU 0 "
        "through PID 3000 (python3): a container's processes are never signalled (its runtime owns them); set containers: stop to "
        "stop it through podman (podman stop), or stop it yourself" % PODMAN_ID[:12])
    assert result["containers_refused"] == [{
        "runtime": "podman", "id": PODMAN_ID, "name": "vllm-llama", "image": "localhost/vllm:0.11", "gpus": [0], "pids": [3000],
        "restart_policy": "always", "reason": result["msg"][len("refused before signalling or stopping anything: "):]}]
    assert result["killed"] == [] and result["containers_stopped"] == [] and result["gpus"][0]["verified"] is False
    (survivor,) = result["evidence"]["survivors"]
    assert survivor["pid"] == 3000 and survivor["container"] == {"runtime": "podman", "id": PODMAN_ID, "name": "vllm-llama",
                                                                 "image": "localhost/vllm:0.11"}
    assert host.cli.commands("inspect") == [["/opt/bin/podman", "inspect", "--type", "container", "--format", "json", PODMAN_ID]]


def test_refusing_a_container_leaves_every_other_holder_alone_too(monkeypatch, cgroups):
    """Refusal comes before anything is signalled: a vLLM server on the host, on GPU 2, is not ended either."""
    host = Containerized(cgroups)
    rows, held = vllm_server(1000, [2])
    for row in rows:
        host.psutil.table[row.pid] = row
    host.hold(1010, 2, INCIDENT_MIB)
    result = run_with_runtimes(monkeypatch, host, {"grace": 0.05, "timeout": 1})
    assert result["failed"] is True and host.psutil.signals == [] and set(held) <= set(host.psutil.table)
    assert [c["name"] for c in result["containers_refused"]] == ["vllm-llama", "vllm-docker"]
    assert [g["problems"] for g in result["gpus"]][2] == ["GPU 2: not reclaimed: the run refused a container before it signalled anything"]
    assert result["msg"].count("set containers: stop") == 2


def test_stop_stops_the_container_through_its_runtime_then_verifies_and_is_idempotent(monkeypatch, cgroups):
    host = Containerized(cgroups)
    result = run_with_runtimes(monkeypatch, host, {"gpus": ["0"], "containers": "stop", "grace": 2, "timeout": 5})
    ended = time.monotonic()
    assert result.get("failed") is not True and result["verified"] is True and result["changed"] is True, result["msg"]
    assert host.cli.commands("stop") == [["/opt/bin/podman", "stop", "-t", "2", PODMAN_ID]]
    (stop_at,) = [when for (argv, _timeout), when in zip(host.cli.calls, host.cli.called_at) if argv[1:2] == ["stop"]]
    assert host.psutil.signals == [], "no process is signalled: neither the container's nor its runtime's"
    assert host.used()[0] == 0 and result["killed"] == [] and 2990 in host.psutil.table
    (stopped,) = result["containers_stopped"]
    assert {key: stopped[key] for key in ("runtime", "id", "name", "image", "gpus", "pids", "restart_policy", "stopped", "running_after",
                                          "error", "restart_policy_after", "restart_policy_error")} == {
        "runtime": "podman", "id": PODMAN_ID, "name": "vllm-llama", "image": "localhost/vllm:0.11", "gpus": [0], "pids": [3000],
        "restart_policy": "always", "stopped": True, "running_after": False, "error": None, "restart_policy_after": "always",
        "restart_policy_error": None}
    assert "podman-restart.service" in stopped["starts_again"]
    assert [w for w in result["warnings"] if "vllm-llama" in w and "container_restart: disable" in w], result["warnings"]
    assert "stopped 1 of 1 container(s) through their runtime (podman container vllm-llama" in result["msg"]
    # a restart policy that acts on exit: the runtime is given the window after the stop (judged by the fake runtime's own
    # clock of the stop: the GPUs' first free reading may come later on a busy machine, and waited_s counts from it)
    assert ended - stop_at >= RESPAWN_WINDOW_S, (ended - stop_at, result["respawn_watch"])
    assert host.cli.containers[PODMAN_ID].running is False
    again = run_with_runtimes(monkeypatch, host, {"gpus": ["0"], "containers": "stop", "grace": 2, "timeout": 5})
    assert again["changed"] is False and again["verified"] is True and again["containers_stopped"] == []
    assert len(host.cli.commands("stop")) == 1


def test_disable_sets_a_stopped_docker_containers_policy_to_no(monkeypatch, cgroups):
    host = Containerized(cgroups)
    result = run_with_runtimes(monkeypatch, host, {"gpus": ["1"], "containers": "stop", "container_restart": "disable", "grace": 1, "timeout": 5})
    assert result["verified"] is True and result["changed"] is True, result["msg"]
    assert host.cli.commands("stop") == [["/opt/bin/docker", "stop", "-t", "1", DOCKER_ID]]
    assert host.cli.commands("update") == [["/opt/bin/docker", "update", "--help"], ["/opt/bin/docker", "update", "--restart=no", DOCKER_ID]]
    (stopped,) = result["containers_stopped"]
    assert (stopped["name"], stopped["restart_policy"], stopped["restart_policy_after"], stopped["starts_again"]) == (
        "vllm-docker", "always", "no", None)
    assert not [w for w in result["warnings"] if "vllm-docker" in w] and host.psutil.signals == []


def test_a_podman_without_update_restart_is_told_to_remove_the_container(monkeypatch, cgroups):
    host = Containerized(cgroups, restart_update={"podman": False})
    result = run_with_runtimes(monkeypatch, host, {"gpus": ["0"], "containers": "stop", "grace": 1, "timeout": 5})
    assert result["verified"] is True and host.cli.containers[PODMAN_ID].policy == "always"
    (warning,) = [w for w in result["warnings"] if "vllm-llama" in w]
    assert "remove the container (this podman cannot change a restart policy), or recreate it with --restart=no" in warning


def test_disable_on_a_podman_without_update_restart_is_refused_before_the_stop(monkeypatch, cgroups):
    host = Containerized(cgroups, restart_update={"podman": False})
    result = run_with_runtimes(monkeypatch, host, {"gpus": ["0"], "containers": "stop", "container_restart": "disable", "timeout": 1})
    assert result["failed"] is True and host.cli.commands("stop") == [] and host.psutil.signals == []
    assert "container_restart: disable, but this podman cannot change a container's restart policy" in result["msg"]


def test_a_kubernetes_holder_is_always_refused_naming_its_pod(monkeypatch, cgroups):
    host = Containerized(cgroups)
    cgroups[3000] = ContainerRef("kubernetes", K8S_ID, POD_UID, "containerd")
    result = run_with_runtimes(monkeypatch, host, {"gpus": ["0"], "containers": "stop", "timeout": 1})
    assert result["failed"] is True and host.psutil.signals == [] and host.cli.calls == []
    (refused,) = result["containers_refused"]
    assert (refused["runtime"], refused["id"], refused["pod_uid"], refused["name"]) == ("kubernetes", K8S_ID, POD_UID, None)
    assert "Kubernetes container %s of pod %s" % (K8S_ID[:12], POD_UID) in result["msg"] and "kubelet owns it" in result["msg"]


def test_check_mode_predicts_the_stop_and_runs_no_stop(monkeypatch, cgroups):
    host = Containerized(cgroups)
    result = run_with_runtimes(monkeypatch, host, {"containers": "stop", "_ansible_check_mode": True, "_ansible_diff": True})
    assert result["changed"] is True and result["verified"] is None and not result.get("failed")
    assert host.cli.commands("stop") == [] and host.psutil.signals == []
    assert [argv for argv in host.cli.commands("update") if argv[2:] != ["--help"]] == [], "nothing but update --help is asked"
    assert result["would_kill"] == [] and result["would_fail"] == [] and result["containers_refused"] == []
    assert result["would_stop_containers"] == [
        {"runtime": "podman", "id": PODMAN_ID, "name": "vllm-llama", "image": "localhost/vllm:0.11", "gpus": [0], "pids": [3000],
         "restart_policy": "always"},
        {"runtime": "docker", "id": DOCKER_ID, "name": "vllm-docker", "image": "vllm/vllm-openai:v0.11.0", "gpus": [1], "pids": [3100],
         "restart_policy": "always"}]
    assert [g["processes_would_remain"] for g in result["gpus"]] == [[], [], []]
    assert "and stop 2 container(s) through their runtime" in result["msg"]
    assert [w for w in result["warnings"] if "dockerd starts it again" in w]


def test_check_mode_by_default_says_a_real_run_would_refuse(monkeypatch, cgroups):
    host = Containerized(cgroups)
    result = run_with_runtimes(monkeypatch, host, {"gpus": ["0"], "_ansible_check_mode": True})
    assert result["changed"] is False and not result.get("failed") and host.psutil.signals == []
    assert result["would_stop_containers"] == [] and [c["name"] for c in result["containers_refused"]] == ["vllm-llama"]
    (text,) = result["would_fail"]
    assert text.startswith("GPU 0: pid 3000 (python3) holds %d MiB: not signalled: podman container vllm-llama" % CONTAINER_MIB)
    assert result["msg"].startswith("check mode: a real run would refuse before it signals or stops anything: podman container vllm-llama")


def test_a_container_its_runtime_starts_again_fails_the_run(monkeypatch, cgroups):
    host = Containerized(cgroups)
    host.cli.restarts.add(PODMAN_ID)
    result = run_with_runtimes(monkeypatch, host, {"gpus": ["0"], "containers": "stop", "grace": 1, "timeout": 5})
    assert result["failed"] is True and result["verified"] is False and result["changed"] is True
    assert "podman started podman container vllm-llama" in result["msg"] and "again after its stop" in result["msg"], result["msg"]
    assert result["containers_stopped"][0]["running_after"] is True and result["containers_stopped"][0]["stopped"] is False


def test_a_container_that_does_not_stop_fails_naming_the_error(monkeypatch, cgroups):
    host = Containerized(cgroups)
    host.cli.stop_fails.add(DOCKER_ID)
    result = run_with_runtimes(monkeypatch, host, {"gpus": ["1"], "containers": "stop", "grace": 1, "timeout": 0.5})
    assert result["failed"] is True and host.psutil.signals == [] and host.used()[1] == CONTAINER_MIB
    assert "docker stop -t 1 %s: exited 125: Error: timed out waiting for %s to stop; it still runs" % (DOCKER_ID[:12], DOCKER_ID) in result["msg"]
    assert "stopped 0 of 1 container(s) through their runtime)" in result["msg"] and not result["containers_stopped"][0]["stopped"]
    assert result["evidence"]["survivors"][0]["container"]["name"] == "vllm-docker"


def test_a_runtimes_process_forked_by_a_live_parent_is_never_ended(monkeypatch):
    """A supervisor that forks `podman container cleanup` (a runtime's own process) once its child exits: a respawn the run
    may not end, whatever match says."""
    host = Supervised(["/usr/bin/podman", "--root", "/var/lib/containers/storage", "container", "cleanup", PODMAN_ID], 0)
    host.respawn.name = "podman"
    result = run_module(monkeypatch, host, RUN)
    assert host.psutil.signalled(301) == [] and 301 in host.psutil.table
    (candidate,) = result["respawn_watch"]["candidates"]
    assert candidate["pid"] == 301 and "a container runtime's own process" in candidate["reason"]


def test_a_managed_container_is_the_callers_stop_in_check_mode_and_refused_in_a_real_run(monkeypatch, cgroups):
    """The caller stops its own container itself (the role's container mode): a check run counts its processes as that
    stop's; a real run that still finds it refuses it, and signals nothing."""
    host = Containerized(cgroups)
    args = {"gpus": ["0"], "managed_containers": [PODMAN_ID[:12]], "grace": 0.05, "timeout": 1}
    preview = run_with_runtimes(monkeypatch, host, dict(args, _ansible_check_mode=True))
    assert not preview.get("failed") and preview["containers_refused"] == [] and preview["would_fail"] == []
    assert [entry["pid"] for entry in preview["would_kill"]] == [3000]
    assert host.psutil.signals == [] and host.cli.commands("stop") == []
    real = run_with_runtimes(monkeypatch, host, args)
    assert real["failed"] is True and [c["name"] for c in real["containers_refused"]] == ["vllm-llama"]
    assert host.psutil.signals == [] and host.cli.commands("stop") == []


def test_managed_containers_must_be_container_ids(monkeypatch, cgroups):
    host = Containerized(cgroups)
    result = run_with_runtimes(monkeypatch, host, {"gpus": ["0"], "managed_containers": ["vllm-llama"]})
    assert result["failed"] is True and "managed_containers" in result["msg"] and "vllm-llama" in result["msg"]
    assert host.psutil.signals == []
