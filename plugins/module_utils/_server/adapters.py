# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The LoRA adapters of a running server that takes them at run time (started with --enable-lora and
VLLM_ALLOW_RUNTIME_LORA_UPDATING=True): the set it serves (GET /v1/models: an adapter is an entry with a ``parent``, its
``root`` the path it was loaded from), the difference with the wanted set, and that difference applied without a restart.

The difference is applied as vLLM takes it: POST /v1/unload_lora_adapter ({"lora_name"}) for each adapter to remove
(one served under a wanted name from another path is removed and loaded again), then POST /v1/load_lora_adapter
({"lora_name", "lora_path"}) for each to add, each proven by one short completion whose ``model`` is its name. A step
that fails undoes the run's earlier steps (adapters loaded are unloaded, adapters unloaded are loaded again from the
path the server had), so the server is left serving the set it served before, and the failure names the adapter and
the server's answer.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _http, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import secrets
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import Reply, http_get, http_post_json
from ansible_collections.gpuops.fleet.plugins.module_utils._server.generation import check_generation, shown_answer

LOAD_PATH = "/v1/load_lora_adapter"
UNLOAD_PATH = "/v1/unload_lora_adapter"
MODELS_PATH = "/v1/models"

# the reading's ``adapters`` option (vllm_process state=status, vllm_lock's status): the server's base URL, its key,
# the adapters wanted, the seconds allowed to each request, and the vllm_server_result that a change sets
ADAPTER_OPTIONS: t.Dict[str, t.Dict[str, t.Any]] = {
    "url": {"type": "str", "required": True},
    "api_key": {"type": "str", "no_log": True},
    "wanted": {"type": "list", "elements": "dict", "default": [], "options": {
        "name": {"type": "str", "required": True},
        "path": {"type": "str", "required": True},
    }},
    "timeout": {"type": "float", "default": 60},
    "result": {"type": "dict", "default": {}},
    # the server's lock, taken by a reading (vllm_process state=status) for the change only when it is free
    "lock": {"type": "dict", "options": {
        "path": {"type": "path", "required": True},
        "play": {"type": "str"},
    }},
}
# who holds the lock while a reading changes the adapters (its record's owner)
LOCK_OWNER = "the vllm_server role's reading, changing LoRA adapters"


class AdapterError(Exception):
    """An adapter change that failed; ``result`` holds what was done and undone."""

    def __init__(self, message: str, result: t.Mapping[str, t.Any]) -> None:
        super().__init__(message)
        self.result = dict(result)


def served(body: str) -> t.Optional[t.Dict[str, str]]:
    """The adapters of a /v1/models answer, name -> path (its root), in the order listed; None when the body is not a
    model list. The base model (and its other served names) has no parent."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    return {str(entry["id"]): str(entry.get("root") or "") for entry in entries
            if isinstance(entry, dict) and entry.get("id") is not None and entry.get("parent")}


def difference(now: t.Mapping[str, str], wanted: t.Sequence[t.Mapping[str, str]]) -> t.Dict[str, t.Any]:
    """What turns the set served (``now``, name -> path) into ``wanted`` ([{name, path}]): unload (names, in the order
    served) and load ([{name, path}], in the order wanted); an adapter served from another path is in both."""
    want = {item["name"]: item["path"] for item in wanted}
    unload = [name for name, path in now.items() if want.get(name) != path]
    load = [{"name": name, "path": path} for name, path in want.items() if now.get(name) != path]
    return {"unload": unload, "load": load}


TENSES = {"now": ("load", "unload"), "would": ("would load", "would unload"), "done": ("loaded", "unloaded")}


def said(change: t.Mapping[str, t.Any], tense: str = "now") -> str:
    """The change in words: 'load a (/p), b (/q); unload c' (tense: now, would (check mode), done)."""
    load, unload = TENSES[tense]
    parts = []
    if change.get("load"):
        parts.append("%s %s" % (load, ", ".join("%s (%s)" % (item["name"], item["path"]) for item in change["load"])))
    if change.get("unload"):
        parts.append("%s %s" % (unload, ", ".join(change["unload"])))
    return "; ".join(parts) or "no adapter to change"


def _headers(api_key: t.Optional[str]) -> t.Dict[str, str]:
    return {"Authorization": "Bearer %s" % api_key} if api_key else {}


def read(options: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """The reading's ``adapters``: served (name -> path), wanted, load, unload, change (whether they differ), and
    problem when /v1/models could not be read (then no change is known)."""
    url = str(options["url"]).rstrip("/")
    wanted = [{"name": item["name"], "path": item["path"]} for item in options.get("wanted") or []]
    reply = http_get(url + MODELS_PATH, timeout=float(options.get("timeout") or 60), headers=_headers(options.get("api_key")))
    now = served(reply.body) if reply.status == 200 else None
    if now is None:
        problem = "%s%s answered %s" % (url, MODELS_PATH, _answer(reply, options))
        return {"served": None, "wanted": wanted, "load": [], "unload": [], "change": False, "problem": problem}
    change = difference(now, wanted)
    return dict(change, served=now, wanted=wanted, change=bool(change["load"] or change["unload"]), problem="")


def reason(reading: t.Mapping[str, t.Any]) -> str:
    """Why the server must change, by its adapters alone: '' when they match."""
    if reading.get("problem"):
        return "its LoRA adapters cannot be read: %s" % reading["problem"]
    if reading.get("change"):
        return "only its LoRA adapters differ: %s" % said(reading)
    return ""


def _answer(reply: Reply, options: t.Mapping[str, t.Any]) -> str:
    if reply.status is None:
        return reply.error or "nothing"
    body = shown_answer(reply.body, [options.get("api_key")])
    return "HTTP %d%s" % (reply.status, ": " + body if body else "")


def _post(options: t.Mapping[str, t.Any], path: str, body: t.Mapping[str, str]) -> t.Tuple[bool, str]:
    url = str(options["url"]).rstrip("/")
    reply = http_post_json(url + path, dict(body), timeout=float(options.get("timeout") or 60), headers=_headers(options.get("api_key")))
    return reply.status == 200, _answer(reply, options)


def _undo(options: t.Mapping[str, t.Any], loaded: t.List[str], unloaded: t.List[t.Dict[str, str]]) -> t.List[str]:
    """Unload what this run loaded, load again what it unloaded; what could not be undone, in words."""
    left = []
    for name in reversed(loaded):
        ok, answer = _post(options, UNLOAD_PATH, {"lora_name": name})
        if not ok:
            left.append("unloading %s again got %s" % (name, answer))
    for item in unloaded:
        ok, answer = _post(options, LOAD_PATH, {"lora_name": item["name"], "lora_path": item["path"]})
        if not ok:
            left.append("loading %s (%s) again got %s" % (item["name"], item["path"], answer))
    return left


def apply(options: t.Mapping[str, t.Any], reading: t.Mapping[str, t.Any], check_mode: bool) -> t.Dict[str, t.Any]:
    """Apply ``reading``'s difference (read()'s) to the server: unload, then load and prove each. Returns changed,
    loaded (names), unloaded (names), proofs (name -> the completion's tokens and seconds), msg; in check mode only
    what would be done. Raises AdapterError naming the adapter and the server's answer, after undoing the run's steps."""
    now = dict(reading.get("served") or {})
    load, unload = list(reading.get("load") or []), list(reading.get("unload") or [])
    result: t.Dict[str, t.Any] = {"changed": bool(load or unload), "loaded": [], "unloaded": [], "proofs": {},
                                  "before": sorted(now), "after": sorted(item["name"] for item in reading.get("wanted") or [])}
    if check_mode or not (load or unload):
        result["msg"] = said(reading, "would" if check_mode else "now")
        return result
    timeout = float(options.get("timeout") or 60)
    unloaded: t.List[t.Dict[str, str]] = []

    def fail(what: str) -> AdapterError:
        left = _undo(options, result["loaded"], unloaded)
        undone = ("undone: the server serves again %s" % (", ".join(sorted(now)) or "no adapter") if not left
                  else "undoing it failed too: %s" % "; ".join(left))
        return AdapterError("vllm_server: %s; nothing was stopped, %s" % (what, undone), dict(result, undo_failed=left))

    for name in unload:
        ok, answer = _post(options, UNLOAD_PATH, {"lora_name": name})
        if not ok:
            raise fail("LoRA adapter %s failed to unload: the server answered %s" % (name, answer))
        unloaded.append({"name": name, "path": now[name]})
        result["unloaded"].append(name)
    for item in load:
        ok, answer = _post(options, LOAD_PATH, {"lora_name": item["name"], "lora_path": item["path"]})
        if not ok:
            raise fail("LoRA adapter %s failed to load from %s: the server answered %s" % (item["name"], item["path"], answer))
        result["loaded"].append(item["name"])
        proof = check_generation(str(options["url"]).rstrip("/"), item["name"], timeout, options.get("api_key"))
        if not proof.ok:
            raise fail("LoRA adapter %s loaded but does not generate: %s" % (item["name"], proof.describe(str(options["url"]), timeout)))
        result["proofs"][item["name"]] = {"tokens": proof.tokens, "elapsed_s": proof.elapsed_s}
    result["msg"] = said(reading, "done")
    return result


def change(options: t.Mapping[str, t.Any], reading: t.Mapping[str, t.Any], check_mode: bool) -> t.Tuple[t.Dict[str, t.Any], bool]:
    """apply() the reading's difference and say so: the result's fields (adapted, changed, msg, adapters, diff, and
    unless it failed the fact vllm_server_result with action adapters), and whether it failed (the server then serves
    what it served before: ``msg`` names the adapter and the server's answer)."""
    failed = False
    try:
        done = apply(options, reading["adapters"], check_mode)
    except AdapterError as exc:
        done, failed = dict(exc.result, changed=False, msg=str(exc)), True
    fields: t.Dict[str, t.Any] = {
        "adapted": True, "changed": done["changed"], "msg": done["msg"],
        "adapters": dict({key: value for key, value in done.items() if key not in ("changed", "msg")}, check_mode=check_mode),
        "diff": {"before": "LoRA adapters: %s\n" % ", ".join(done["before"]), "after": "LoRA adapters: %s\n" % ", ".join(done["after"])},
    }
    if not failed:
        fields["ansible_facts"] = {"vllm_server_result": dict(
            options.get("result") or {}, action="adapters", reason=reading.get("reason"), pid=reading.get("pid"), msg=done["msg"],
            loaded=done["loaded"], unloaded=done["unloaded"], changed=done["changed"], check_mode=check_mode)}
    return fields, failed


def change_locked(options: t.Mapping[str, t.Any], reread: t.Callable[[], t.Dict[str, t.Any]]
                  ) -> t.Optional[t.Tuple[t.Dict[str, t.Any], t.Dict[str, t.Any], bool]]:
    """Under the server's lock (options' lock: taken here only when free, never taken over; released before this
    returns), read again (``reread``) and, when only the adapters still differ, change them. Returns (the reading under
    the lock, change()'s fields or {} when it found another change, whether it failed); None when another run holds
    the lock (the caller then goes on as for any other change: the role's lock task waits its turn)."""
    # only a change compiles the lock's code (a module run compiles what it imports: most readings change nothing)
    from ansible_collections.gpuops.fleet.plugins.module_utils._server.lock import LockHeld, acquire, release  # pylint: disable=import-outside-toplevel
    lock = options.get("lock") or {}
    token = secrets.token_hex(10)
    try:
        acquire(lock["path"], LOCK_OWNER, token, float("inf"), details={"play": lock.get("play")})
    except (LockHeld, OSError, KeyError):
        return None
    try:
        reading = reread()
        if not (reading.get("adapters") or {}).get("change"):
            return reading, {}, False
        fields, failed = change(options, reading, False)
        return reading, fields, failed
    finally:
        release(lock["path"], token)
