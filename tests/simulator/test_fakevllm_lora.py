# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fake vLLM's LoRA adapters, as vLLM's: --enable-lora with --lora-modules at start; with
VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, POST /v1/load_lora_adapter and /v1/unload_lora_adapter (404 without it);
/v1/models lists each adapter (id, root = path, parent = the base model); a completion names an adapter as its model;
every load and unload is in its record (GET /sim/lora and $GPUOPS_SIM_STATE/lora.jsonl)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, Iterator, Optional, Tuple

import pytest
from gpusim_helpers import FakeServer, host_with_servers

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "simulator" / "fakevllm"))
from vllm._lora import read_record  # noqa: E402  pylint: disable=wrong-import-position

KNOBS = {"GPUOPS_SIM_TOKENS_PER_S": "2000", "GPUOPS_SIM_TTFT_MS": "1"}
RUNTIME = dict(KNOBS, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True")


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("adapters")
    for name in ("sql", "chat", "math"):
        (root / name).mkdir()
        (root / name / "adapter_config.json").write_text("{}")
    return root


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory, adapters: Path) -> Iterator[Dict[str, FakeServer]]:
    with host_with_servers(tmp_path_factory.mktemp("fakevllm-lora"), 3) as started:
        found = {
            "runtime": started.start(gpus="0", env=RUNTIME, args=("--enable-lora", "--max-loras", "2")),
            "static": started.start(gpus="1", env=KNOBS, args=("--enable-lora", "--max-loras", "2", "--lora-modules",
                                                               "sql=%s" % (adapters / "sql"),
                                                               json.dumps({"name": "chat", "path": str(adapters / "chat")}))),
            "off": started.start(gpus="2", env=RUNTIME),
        }
        for server in found.values():
            server.wait_ready()
        found["state"] = started.host.state  # type: ignore[assignment]
        yield found


def call(server: FakeServer, method: str, path: str, body: Optional[dict] = None) -> Tuple[int, bytes]:
    conn = server.connection(10)
    try:
        conn.request(method, path, json.dumps(body) if body is not None else None,
                     {"Content-Type": "application/json"} if body is not None else {})
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def models(server: FakeServer) -> Dict[str, dict]:
    status, body = call(server, "GET", "/v1/models")
    assert status == 200
    return {entry["id"]: entry for entry in json.loads(body)["data"]}


def complete(server: FakeServer, model: str) -> Tuple[int, dict]:
    status, body = call(server, "POST", "/v1/completions", {"model": model, "prompt": "a b", "max_tokens": 2})
    return status, json.loads(body)


def test_static_modules_are_served(servers: Dict[str, FakeServer], adapters: Path) -> None:
    served = models(servers["static"])
    assert list(served) == ["org/model", "sql", "chat"]
    assert served["sql"]["root"] == str(adapters / "sql") and served["sql"]["parent"] == "org/model"
    assert served["org/model"]["parent"] is None
    status, body = complete(servers["static"], "chat")
    assert status == 200 and body["model"] == "chat"
    # without VLLM_ALLOW_RUNTIME_LORA_UPDATING the endpoints do not exist
    assert call(servers["static"], "POST", "/v1/load_lora_adapter", {"lora_name": "m", "lora_path": str(adapters / "math")})[0] == 404
    events = json.loads(call(servers["static"], "GET", "/sim/lora")[1])["events"]
    assert [(e["event"], e["name"], e["source"], e["ok"]) for e in events] == [
        ("load", "sql", "start", True), ("load", "chat", "start", True), ("generate", "chat", "api", True)]


def test_load_serve_unload(servers: Dict[str, FakeServer], adapters: Path) -> None:
    server = servers["runtime"]
    assert complete(server, "sql")[0] == 404
    status, body = call(server, "POST", "/v1/load_lora_adapter", {"lora_name": "sql", "lora_path": str(adapters / "sql")})
    assert status == 200 and body.decode() == "Success: LoRA adapter 'sql' added successfully."
    card = models(server)["sql"]  # one reading: its "created" is the second it was read in
    assert card == dict(card, root=str(adapters / "sql"), parent="org/model")
    status, answer = complete(server, "sql")
    assert status == 200 and answer["model"] == "sql" and answer["usage"]["completion_tokens"] == 2
    # already loaded: 400
    status, body = call(server, "POST", "/v1/load_lora_adapter", {"lora_name": "sql", "lora_path": str(adapters / "sql")})
    assert status == 400 and "has already been loaded" in json.loads(body)["error"]["message"]
    # a path where no adapter is: 404, nothing loaded
    status, body = call(server, "POST", "/v1/load_lora_adapter", {"lora_name": "gone", "lora_path": str(adapters / "gone")})
    assert status == 404 and "No adapter found" in json.loads(body)["error"]["message"]
    assert "gone" not in models(server)
    # --max-loras 2: a third is refused
    assert call(server, "POST", "/v1/load_lora_adapter", {"lora_name": "chat", "lora_path": str(adapters / "chat")})[0] == 200
    status, body = call(server, "POST", "/v1/load_lora_adapter", {"lora_name": "math", "lora_path": str(adapters / "math")})
    assert status == 400 and "--max-loras" in json.loads(body)["error"]["message"]
    status, body = call(server, "POST", "/v1/unload_lora_adapter", {"lora_name": "sql"})
    assert status == 200 and body.decode() == "Success: LoRA adapter 'sql' removed successfully."
    assert list(models(server)) == ["org/model", "chat"]
    assert complete(server, "sql")[0] == 404
    status, body = call(server, "POST", "/v1/unload_lora_adapter", {"lora_name": "sql"})
    assert status == 404 and "cannot be found" in json.loads(body)["error"]["message"]
    # the record, on the endpoint and in the state directory
    report = json.loads(call(server, "GET", "/sim/lora")[1])
    assert report["loaded"] == [{"name": "chat", "path": str(adapters / "chat")}]
    expected = [("load", "sql", True), ("generate", "sql", True), ("load", "sql", False), ("load", "gone", False), ("load", "chat", True),
                ("load", "math", False), ("unload", "sql", True), ("unload", "sql", False)]
    assert [(e["event"], e["name"], e["ok"]) for e in report["events"]] == expected
    record = [e for e in read_record(servers["state"]) if e["pid"] == server.pid]  # type: ignore[arg-type]
    assert [(e["event"], e["name"], e["ok"]) for e in record] == expected


def test_runtime_load_needs_enable_lora(servers: Dict[str, FakeServer], adapters: Path) -> None:
    status, body = call(servers["off"], "POST", "/v1/load_lora_adapter", {"lora_name": "sql", "lora_path": str(adapters / "sql")})
    assert status == 400 and "--enable-lora" in json.loads(body)["error"]["message"]


@pytest.mark.parametrize("words,said", [
    (["--enable-lora", "--lora-modules", "x=/nonexistent/adapter"], "No adapter found for /nonexistent/adapter"),
    (["--lora-modules", "x=/tmp"], "--lora-modules needs --enable-lora"),
    (["--enable-lora", "--lora-modules", "x"], "expected name=path"),
    (["--enable-lora", "--lora-modules", "a=/tmp", "b=/tmp"], "--max-loras is 1"),
])
def test_start_refuses_bad_modules(words: list, said: str, capsys: pytest.CaptureFixture) -> None:
    from vllm._args import parse_server_args  # pylint: disable=import-outside-toplevel
    with pytest.raises(SystemExit):
        parse_server_args(["org/model"] + words, "vllm", True, env={})
    assert said in capsys.readouterr().err
