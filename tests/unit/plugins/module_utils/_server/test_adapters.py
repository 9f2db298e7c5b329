# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A running server's LoRA adapters: the set it serves, the difference with the wanted one, and that difference applied
through its API (each load proven by a completion in the adapter's name, a failure undone), against a loopback server
that answers as vLLM does."""

from __future__ import annotations

import json
import typing as t

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server import adapters
from ansible_collections.gpuops.fleet.plugins.module_utils._server.lock import acquire
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import LoopbackServer

KEY = "sk-adapters-1"


class FakeVllm:
    """/v1/models, the two LoRA endpoints and /v1/completions, as vLLM answers them; a path under /missing has no adapter."""

    def __init__(self, loaded: t.Optional[t.Dict[str, str]] = None, broken: t.Sequence[str] = ()) -> None:
        self.loaded = dict(loaded or {})
        self.broken = set(broken)  # adapters that load but do not generate
        self.server = LoopbackServer(self.answer)

    def answer(self, handler: t.Any, raw: bytes) -> t.Tuple[int, bytes]:
        if handler.headers.get("Authorization") != "Bearer " + KEY:
            return 401, b'{"error":"Unauthorized"}'
        body = json.loads(raw) if raw else {}
        if handler.path == "/v1/models":
            data = [{"id": "base", "root": "/models/base", "parent": None}]
            data += [{"id": name, "root": path, "parent": "base"} for name, path in self.loaded.items()]
            return 200, json.dumps({"object": "list", "data": data}).encode()
        if handler.path == "/v1/load_lora_adapter":
            name, path = body.get("lora_name"), body.get("lora_path")
            if name in self.loaded:
                return 400, json.dumps({"error": {"message": "The lora adapter '%s' has already been loaded." % name}}).encode()
            if path.startswith("/missing"):
                return 404, json.dumps({"error": {"message": "No adapter found for %s" % path, "type": "NotFoundError"}}).encode()
            self.loaded[name] = path
            return 200, ("Success: LoRA adapter '%s' added successfully." % name).encode()
        if handler.path == "/v1/unload_lora_adapter":
            if self.loaded.pop(body.get("lora_name"), None) is None:
                return 404, b'{"error":{"message":"cannot be found"}}'
            return 200, b"Success"
        if handler.path == "/v1/completions":
            if body.get("model") not in self.loaded or body["model"] in self.broken:
                return 404, b'{"error":{"message":"The model does not exist."}}'
            return 200, json.dumps({"model": body["model"], "choices": [{"text": " a b c d"}],
                                    "usage": {"completion_tokens": 4}}).encode()
        return 404, b"{}"

    def calls(self) -> t.List[t.Tuple[str, t.Any]]:
        return [(path, json.loads(raw) if raw else None) for method, path, _headers, raw in self.server.seen if method == "POST"]


@pytest.fixture
def fake() -> t.Iterator[FakeVllm]:
    server = FakeVllm({"sql": "/a/sql", "old": "/a/old"})
    yield server
    server.server.close()


def options(fake: FakeVllm, *wanted: t.Tuple[str, str], lock: t.Optional[str] = None) -> t.Dict[str, t.Any]:
    found = {"url": fake.server.url, "api_key": KEY, "timeout": 5.0, "result": {"host": "h", "name": "vllm"},
             "wanted": [{"name": name, "path": path} for name, path in wanted]}
    if lock:
        found["lock"] = {"path": lock}
    return found


def test_served_is_every_entry_with_a_parent():
    body = json.dumps({"data": [{"id": "base", "parent": None, "root": "/m"}, {"id": "x", "parent": "base", "root": "/x"}]})
    assert adapters.served(body) == {"x": "/x"}
    assert adapters.served("not json") is None and adapters.served('{"data": 1}') is None


@pytest.mark.parametrize("now,wanted,unload,load", [
    ({}, [("a", "/a")], [], [("a", "/a")]),
    ({"a": "/a"}, [("a", "/a")], [], []),
    ({"a": "/a", "b": "/b"}, [("a", "/a")], ["b"], []),
    ({"a": "/a"}, [("a", "/a2")], ["a"], [("a", "/a2")]),  # another path: unloaded and loaded again
    ({"a": "/a"}, [], ["a"], []),
])
def test_the_difference(now, wanted, unload, load):
    change = adapters.difference(now, [{"name": name, "path": path} for name, path in wanted])
    assert change == {"unload": unload, "load": [{"name": name, "path": path} for name, path in load]}


def test_said_in_each_tense():
    change = {"load": [{"name": "a", "path": "/a"}], "unload": ["b"]}
    assert adapters.said(change) == "load a (/a); unload b"
    assert adapters.said(change, "would") == "would load a (/a); would unload b"
    assert adapters.said(change, "done") == "loaded a (/a); unloaded b"
    assert adapters.said({"load": [], "unload": []}) == "no adapter to change"


def test_the_reading_and_its_reason(fake):
    reading = adapters.read(options(fake, ("sql", "/a/sql"), ("chat", "/a/chat")))
    assert reading["served"] == {"sql": "/a/sql", "old": "/a/old"} and reading["change"]
    assert adapters.reason(reading) == "only its LoRA adapters differ: load chat (/a/chat); unload old"
    same = adapters.read(options(fake, ("sql", "/a/sql"), ("old", "/a/old")))
    assert not same["change"] and adapters.reason(same) == ""


def test_a_list_that_cannot_be_read_is_a_reason_but_no_change(fake):
    reading = adapters.read(dict(options(fake, ("sql", "/a/sql")), api_key="wrong"))
    assert reading["served"] is None and not reading["change"]
    assert adapters.reason(reading).startswith("its LoRA adapters cannot be read: %s/v1/models answered HTTP 401" % fake.server.url)


def test_apply_unloads_then_loads_and_proves_each(fake):
    wanted = options(fake, ("sql", "/a/sql"), ("chat", "/a/chat"), ("math", "/a/math"))
    done = adapters.apply(wanted, adapters.read(wanted), False)
    assert fake.loaded == {"sql": "/a/sql", "chat": "/a/chat", "math": "/a/math"}
    assert fake.calls() == [("/v1/unload_lora_adapter", {"lora_name": "old"}),
                            ("/v1/load_lora_adapter", {"lora_name": "chat", "lora_path": "/a/chat"}),
                            ("/v1/completions", dict(adapters_body("chat"))),
                            ("/v1/load_lora_adapter", {"lora_name": "math", "lora_path": "/a/math"}),
                            ("/v1/completions", dict(adapters_body("math")))]
    assert done["changed"] and done["loaded"] == ["chat", "math"] and done["unloaded"] == ["old"]
    assert set(done["proofs"]) == {"chat", "math"} and done["proofs"]["chat"]["tokens"] == 4
    assert done["msg"] == "loaded chat (/a/chat), math (/a/math); unloaded old"
    assert all(headers.get("Authorization") == "Bearer " + KEY for _m, _p, headers, _b in fake.server.seen)


def adapters_body(model: str) -> t.Dict[str, t.Any]:
    from ansible_collections.gpuops.fleet.plugins.module_utils._server.generation import request_body  # pylint: disable=import-outside-toplevel
    return request_body(model)


def test_check_mode_only_says_what_it_would_do(fake):
    wanted = options(fake, ("chat", "/a/chat"))
    done = adapters.apply(wanted, adapters.read(wanted), True)
    assert done["changed"] and done["msg"] == "would load chat (/a/chat); would unload sql, old"
    assert fake.calls() == [] and fake.loaded == {"sql": "/a/sql", "old": "/a/old"}


def test_a_failed_load_is_undone_and_names_the_adapter_and_the_answer(fake):
    wanted = options(fake, ("sql", "/a/sql"), ("chat", "/a/chat"), ("ghost", "/missing/ghost"))
    with pytest.raises(adapters.AdapterError) as caught:
        adapters.apply(wanted, adapters.read(wanted), False)
    message = str(caught.value)
    assert "LoRA adapter ghost failed to load from /missing/ghost: the server answered HTTP 404" in message
    assert "No adapter found for /missing/ghost" in message
    assert "nothing was stopped, undone: the server serves again old, sql" in message
    assert fake.loaded == {"sql": "/a/sql", "old": "/a/old"}
    assert [path for path, _body in fake.calls()][-2:] == ["/v1/unload_lora_adapter", "/v1/load_lora_adapter"]


def test_an_adapter_that_does_not_generate_is_undone(fake):
    fake.broken.add("chat")
    wanted = options(fake, ("sql", "/a/sql"), ("old", "/a/old"), ("chat", "/a/chat"))
    with pytest.raises(adapters.AdapterError) as caught:
        adapters.apply(wanted, adapters.read(wanted), False)
    assert "LoRA adapter chat loaded but does not generate" in str(caught.value)
    assert fake.loaded == {"sql": "/a/sql", "old": "/a/old"}


def test_change_sets_the_result_and_a_diff(fake):
    wanted = options(fake, ("sql", "/a/sql"))
    reading = {"adapters": adapters.read(wanted), "pid": 42, "reason": "only its LoRA adapters differ: unload old"}
    fields, failed = adapters.change(wanted, reading, False)
    assert not failed and fields["adapted"] and fields["changed"]
    assert fields["diff"] == {"before": "LoRA adapters: old, sql\n", "after": "LoRA adapters: sql\n"}
    result = fields["ansible_facts"]["vllm_server_result"]
    assert result["action"] == "adapters" and result["pid"] == 42 and result["unloaded"] == ["old"] and result["host"] == "h"


def test_change_locked_takes_only_a_free_lock_and_releases_it(fake, tmp_path):
    lock = str(tmp_path / "vllm.lock")
    wanted = options(fake, ("sql", "/a/sql"), lock=lock)

    def reread() -> t.Dict[str, t.Any]:
        import os  # pylint: disable=import-outside-toplevel
        assert os.path.exists(lock)  # read again under the lock
        return {"adapters": adapters.read(wanted), "pid": 7, "reason": "x"}

    reading, fields, failed = adapters.change_locked(wanted, reread)
    assert not failed and fields["changed"] and reading["pid"] == 7 and fake.loaded == {"sql": "/a/sql"}
    assert not (tmp_path / "vllm.lock").exists()
    # held by another run: nothing read, nothing changed, the lock left as it was
    acquire(lock, "someone", "other-run", 3600)
    assert adapters.change_locked(options(fake, lock=lock), reread) is None
    assert fake.loaded == {"sql": "/a/sql"} and (tmp_path / "vllm.lock").exists()
