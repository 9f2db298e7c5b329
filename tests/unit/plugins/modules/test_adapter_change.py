# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A server whose LoRA adapters alone differ, as the role's two readings handle it: vllm_process state=status takes the
server's lock when it is free and changes them (adapted), previews them in check mode, and leaves them to the lock's
task when another run holds the lock; vllm_lock with the same reading changes them under its own lock and releases it.
Against a recorded process and a loopback server that answers as vLLM does."""

from __future__ import annotations

import json
import os
import typing as t

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.launch import systemd
from ansible_collections.gpuops.fleet.plugins.module_utils._server.lock import acquire
from ansible_collections.gpuops.fleet.plugins.modules import vllm_lock, vllm_process
from ansible_collections.gpuops.fleet.tests.unit.plugins.fake_systemctl import FakeSystemctl
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import LoopbackServer
from ansible_collections.gpuops.fleet.tests.unit.plugins.modules.module_harness import call_main

pytest.importorskip("psutil")

pytestmark = pytest.mark.usefixtures("captured")


@pytest.fixture
def lora_server() -> t.Iterator[t.Dict[str, t.Any]]:
    """/health, /v1/models (base m and the adapters in ``loaded``), the LoRA endpoints and completions; ``posts`` holds
    each POST's path and body."""
    state: t.Dict[str, t.Any] = {"loaded": {"old": "/a/old"}, "posts": []}

    def answer(handler: t.Any, raw: bytes) -> t.Tuple[int, bytes]:
        if handler.command == "GET":
            if handler.path == "/health":
                return 200, b""
            data = [{"id": "m", "parent": None}] + [{"id": n, "root": p, "parent": "m"} for n, p in state["loaded"].items()]
            return 200, json.dumps({"data": data}).encode()
        body = json.loads(raw)
        state["posts"].append((handler.path, body))
        if handler.path == "/v1/load_lora_adapter":
            state["loaded"][body["lora_name"]] = body["lora_path"]
            return 200, b"Success"
        if handler.path == "/v1/unload_lora_adapter":
            state["loaded"].pop(body["lora_name"])
            return 200, b"Success"
        return 200, json.dumps({"choices": [{"text": " a b c d"}], "usage": {"completion_tokens": 4}}).encode()

    server = LoopbackServer(answer)
    state["url"] = server.url
    try:
        yield state
    finally:
        server.close()


def reading(server: t.Mapping[str, t.Any], state_file: str, lock: str) -> t.Dict[str, t.Any]:
    return {"state_file": state_file, "config_hash": "h1", "health_url": server["url"] + "/health",
            "generate": {"url": server["url"], "model": "m", "timeout": 10}, "decide": {"state": "started"},
            "adapters": {"url": server["url"], "wanted": [{"name": "sql", "path": "/a/sql"}], "timeout": 10,
                         "result": {"host": "h", "name": "vllm"}, "lock": {"path": lock}}}


def loads(server: t.Mapping[str, t.Any]) -> t.List[t.Tuple[str, str]]:
    return [(path.rsplit("/", 1)[-1], body.get("lora_name") or body.get("model")) for path, body in server["posts"]]


def test_the_reading_changes_the_adapters_under_a_free_lock(lora_server, recorded_server, tmp_path):
    lock = str(tmp_path / "vllm.lock")
    result = call_main(vllm_process, dict(reading(lora_server, recorded_server, lock), state="status"))
    assert not result.get("failed") and result["adapted"] and result["changed"], result
    assert loads(lora_server) == [("completions", "m"), ("completions", "m"), ("unload_lora_adapter", "old"),
                                  ("load_lora_adapter", "sql"), ("completions", "sql")]
    assert lora_server["loaded"] == {"sql": "/a/sql"} and not (tmp_path / "vllm.lock").exists()
    fact = result["ansible_facts"]["vllm_server_result"]
    assert fact["action"] == "adapters" and fact["loaded"] == ["sql"] and fact["unloaded"] == ["old"]
    assert result["reason"] == "only its LoRA adapters differ: load sql (/a/sql); unload old"


def test_check_mode_previews_and_takes_no_lock(lora_server, recorded_server, tmp_path):
    lock = str(tmp_path / "vllm.lock")
    result = call_main(vllm_process, dict(reading(lora_server, recorded_server, lock), state="status", _ansible_check_mode=True))
    assert result["adapted"] and result["changed"] and result["msg"] == "would load sql (/a/sql); would unload old"
    assert result["diff"] == {"before": "LoRA adapters: old\n", "after": "LoRA adapters: sql\n"}
    assert [name for _path, name in loads(lora_server)] == ["m"] and lora_server["loaded"] == {"old": "/a/old"}


def test_a_held_lock_leaves_the_change_to_the_lock_s_task(lora_server, recorded_server, tmp_path):
    lock = str(tmp_path / "vllm.lock")
    acquire(lock, "a person's run", "other", 3600)
    result = call_main(vllm_process, dict(reading(lora_server, recorded_server, lock), state="status"))
    assert not result.get("adapted") and not result["changed"] and result["reason"].startswith("only its LoRA adapters differ")
    assert lora_server["loaded"] == {"old": "/a/old"} and "vllm_server_result" not in (result.get("ansible_facts") or {})
    assert json.loads((tmp_path / "vllm.lock").read_text())["token"] == "other"


def test_the_lock_s_task_changes_them_and_releases_its_lock(lora_server, recorded_server, tmp_path):
    lock = str(tmp_path / "vllm.lock")
    status = reading(lora_server, recorded_server, lock)
    result = call_main(vllm_lock, {"path": lock, "token": "t1", "status": status, "preflight": {"state": "started"}})
    assert not result.get("failed") and result["adapted"] and result["changed"], result
    assert not result["acquired"] and result["released"] and not (tmp_path / "vllm.lock").exists()
    assert "preflight" not in result  # no stop follows: no preflight reading
    assert lora_server["loaded"] == {"sql": "/a/sql"} and result["ansible_facts"]["vllm_server_result"]["action"] == "adapters"


def test_a_unit_whose_adapters_changed_gets_its_enabled_state_in_the_same_run(lora_server, tmp_path, monkeypatch):
    fake = FakeSystemctl(str(tmp_path / "systemctl"), str(tmp_path / "units"))
    monkeypatch.setenv("PATH", fake.bin + os.pathsep + os.environ["PATH"])
    monkeypatch.setattr(systemd, "UNIT_DIR", fake.unit_dir)
    unit = "gpuops-vllm-8000.service"
    state_file = str(tmp_path / "s.json")
    try:
        launched = call_main(vllm_process, {"state": "running", "mode": "systemd", "unit": unit, "state_file": state_file,
                                            "config_hash": "h1", "argv": ["vllm", "serve", "m"],
                                            "systemd": {"content": "[Service]\nExecStart=/bin/true\n", "env_file": str(tmp_path / "s.env"),
                                                        "enabled": False}})
        assert launched["launched"] and fake.units()[unit]["UnitFileState"] == "disabled", launched
        given = dict(reading(lora_server, state_file, str(tmp_path / "vllm.lock")), state="status", mode="systemd", unit=unit,
                     systemd={"enabled": True})
        result = call_main(vllm_process, given)
        assert not result.get("failed") and result["adapted"] and result["changed"], result
        assert lora_server["loaded"] == {"sql": "/a/sql"}  # the adapters changed, then the unit enabled: one module run
        assert fake.units()[unit]["UnitFileState"] == "enabled" and fake.verbs()[-1] == "enable %s" % unit
        assert result["msg"].endswith("; unit %s enabled" % unit), result["msg"]
        assert result["ansible_facts"]["vllm_server_result"]["action"] == "adapters"
    finally:
        fake.end_all()
