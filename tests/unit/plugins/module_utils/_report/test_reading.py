# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The report's reading on one host (_report.reading): whose each holder is, and the role's records with /health."""

from __future__ import annotations

import json
import shutil
import types

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._host import process_table as _process_table
from ansible_collections.gpuops.fleet.plugins.module_utils._host.container import CliAnswer
from ansible_collections.gpuops.fleet.plugins.module_utils._report import reading
from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import Reply
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_psutil import FakeClock, FakePsutil, host_rows, ME, Row, vllm_server


@pytest.fixture(autouse=True)
def this_pid(monkeypatch):
    monkeypatch.setattr(_process_table, "os", types.SimpleNamespace(getpid=lambda: ME))


def facts_for(held, invisible=()):
    gpus = {}
    for pid, gpu in held.items():
        gpus.setdefault(gpu, []).append({"pid": pid, "visible": True, "unverified": False})
    for pid, gpu in invisible:
        gpus.setdefault(gpu, []).append({"pid": pid, "visible": False, "unverified": False})
    return {"gpus": [{"index": gpu, "processes": procs} for gpu, procs in sorted(gpus.items())]}


def test_server_orphans_other_job_and_other_namespace():
    server_rows, server_held = vllm_server(1000, [0, 1])
    orphan_rows, orphan_held = vllm_server(2000, [2, 3], engine_core=False)
    orphan_rows = [row for row in orphan_rows if row.pid != 2000]
    for row in orphan_rows:
        row.ppid = 1
    job = [Row(3000, 900, "python3", ["python3", "batch_infer.py"], username="alice"),
           Row(3001, 3000, "VLLM::Worker_TP0", ["VLLM::Worker_TP0"], username="alice")]
    psutil = FakePsutil(host_rows() + server_rows + orphan_rows + job, FakeClock())
    held = dict(server_held, **{str(k): v for k, v in ()})
    held.update(orphan_held)
    held[3001] = 4
    servers = [{"name": "vllm-8000", "pid": 1000, "create_time": 1000.0, "running": True}]
    verdicts = {v["pid"]: v for v in reading.judge_holders(facts_for(held, [(77777, 5)]), servers, psutil, sid_of=lambda pid: 1)}
    for pid in server_held:
        assert verdicts[pid]["kind"] == "server" and verdicts[pid]["server"] == "vllm-8000" and verdicts[pid]["launcher_pid"] == 1000
    for pid in orphan_held:
        assert verdicts[pid]["kind"] == "orphan" and "launcher is gone" in verdicts[pid]["why"] and "PID 1" in verdicts[pid]["why"]
    assert verdicts[3001]["kind"] == "other job" and "3000" in verdicts[3001]["why"]
    assert verdicts[77777]["kind"] == "other namespace"
    # without a record, the same server's workers are unmanaged: their launcher lives, detached under PID 1; not orphans
    alone = {v["pid"]: v for v in reading.judge_holders(facts_for(server_held), [], psutil, sid_of=lambda pid: 1)}
    assert {v["kind"] for v in alone.values()} == {"unmanaged"} and all(v["launcher_pid"] == 1000 for v in alone.values())


def test_records_running_dead_broken_and_systemd(tmp_path):
    psutil = FakePsutil(host_rows() + [Row(1000, 1, "python3", ["vllm", "serve"], create_time=1000.0)], FakeClock())
    meta = {"name": "vllm-8000", "port": 8000, "gpus": [0, 1], "model": "m"}
    (tmp_path / "vllm-8000.json").write_text(json.dumps({"pid": 1000, "create_time": 1000.0, "config_hash": "h", "metadata": meta,
                                                         "argv": ["vllm", "serve", "--api-key", "k"]}))
    (tmp_path / "vllm-8001.json").write_text(json.dumps({"pid": 1000, "create_time": 5.0, "metadata": dict(meta, name="vllm-8001", port=8001)}))
    (tmp_path / "vllm-8002.json").write_text("{not json")
    (tmp_path / "vllm-8003.json").write_text(json.dumps({"unit": "gpuops-vllm-8003.service", "config_hash": "u", "argv": ["vllm"]}))
    (tmp_path / "vllm-8000.lock").write_text("{}")
    asked = []

    def get(url, timeout):
        del timeout
        asked.append(url)
        return Reply(200, "", None)

    servers = reading.read_servers(str(tmp_path), psutil, "10.0.0.2", 2.0, get)
    assert [s["name"] for s in servers] == ["vllm-8000", "vllm-8001", "vllm-8002", "vllm-8003"]
    assert servers[0]["running"] is True and servers[0]["health"] == "HTTP 200" and servers[0]["argv"] == ["vllm", "serve", "--api-key", "********"]
    assert servers[1]["running"] is False and servers[1]["health"] is None
    assert "cannot read the server record" in servers[2]["error"]
    assert servers[3]["unit"] == "gpuops-vllm-8003.service" and servers[3]["running"] is None
    assert asked == ["http://10.0.0.2:8000/health"]
    assert reading.read_servers(str(tmp_path / "absent"), psutil, "127.0.0.1", 1.0, get) == []


@pytest.mark.parametrize("params, words", [({"health_timeout": 0}, "health_timeout: 0"), ({"health_timeout": True}, "health_timeout: True"),
                                           ({"state_dir": "relative/dir"}, "state_dir: 'relative/dir'")])
def test_bad_options_fail_before_reading(params, words):
    def never(name):
        raise AssertionError("read nothing")

    result, _warnings, failed = reading.run_reading(params, None, None, never)
    assert failed and words in result["msg"]


CONTAINER_ID = "a4c35aa0d77e36f95e22ad209320eb32b4dfb9d02474ad9a4bf326b656c9dbc6"


def test_a_container_records_server_is_read_through_its_runtime(tmp_path, monkeypatch):
    """The container mode's record names a container: podman's inspect gives its main process (1000), whose /health is asked."""
    psutil = FakePsutil(host_rows() + [Row(1000, 1, "python3", ["vllm", "serve"], create_time=1000.0)], FakeClock())
    record = {"mode": "container", "runtime": "podman", "container_id": CONTAINER_ID, "container_name": "gpuops-vllm-8000",
              "image": "vllm/vllm-openai:v0.11.0", "config_hash": "c", "argv": ["vllm", "serve", "--api-key", "k"],
              "metadata": {"name": "vllm-8000", "port": 8000, "gpus": [0, 1], "model": "m"}}
    (tmp_path / "vllm-8000.json").write_text(json.dumps(record))
    inspected = json.dumps([{"Id": CONTAINER_ID, "Name": "gpuops-vllm-8000", "State": {"Running": True, "Pid": 1000}}])
    ran = []

    def run(argv, timeout):
        ran.append(list(argv))
        return CliAnswer(0, inspected) if argv[-1] == CONTAINER_ID else CliAnswer(125, "")

    def get(url, timeout):
        return Reply(200, "", None)

    def entry():
        return dict(reading.EMPTY_SERVER, name="vllm-8000", record="r")

    found = reading._container_server(entry(), record, psutil, "127.0.0.1", 2.0, get, run, lambda name: "/usr/bin/" + name)
    assert (found["running"], found["pid"], found["create_time"], found["health"], found["error"]) == (True, 1000, 1000.0, "HTTP 200", None)
    assert found["container"] == {"runtime": "podman", "id": CONTAINER_ID, "name": "gpuops-vllm-8000", "image": "vllm/vllm-openai:v0.11.0"}
    assert found["argv"] == ["vllm", "serve", "--api-key", "********"] and ran[0][:2] == ["/usr/bin/podman", "inspect"]
    stopped = reading._container_server(entry(), dict(record, container_id="b" * 64), psutil, "127.0.0.1", 2.0, get, run,
                                        lambda name: "/usr/bin/" + name)
    assert stopped["running"] is False and stopped["pid"] is None and stopped["health"] is None
    missing = reading._container_server(entry(), record, psutil, "127.0.0.1", 2.0, get, run, lambda name: None)
    assert missing["running"] is False and missing["error"] == "container gpuops-vllm-8000: no podman command here to ask about it"
    # read_servers finds it among the records (no runtime is asked here: none is found)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    (listed,) = reading.read_servers(str(tmp_path), psutil, "127.0.0.1", 1.0, get)
    assert listed["container"]["id"] == CONTAINER_ID and listed["error"].startswith("container gpuops-vllm-8000: no podman command")
