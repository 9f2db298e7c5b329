# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""LoRA adapters, as vLLM serves them: --enable-lora, --max-loras, --lora-modules at start, and with
VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (1 or true, any case) POST /v1/load_lora_adapter ({"lora_name", "lora_path"})
and POST /v1/unload_lora_adapter ({"lora_name"}). Without that variable the two endpoints do not exist (404).

As vLLM: a load answers 200 with a plain-text "Success: ..." line; a name already loaded 400 (InvalidUserInput); a
path where no adapter is 404 (NotFoundError, "No adapter found"); an unload of a name not loaded 404. GET /v1/models
lists each adapter after the base model: id = its name, root = its path, parent = the base model's served name. A
completion whose `model` is an adapter's name is answered, under that name.

Stricter than vLLM (which keeps --max-cpu-loras adapters in an LRU cache and evicts the oldest): the fake refuses a
load once --max-loras adapters are loaded (400), so that a client that loads before it unloads is caught.

The fake's own record: every load and unload (at start, or through the API; answered or refused), and every completion
asked of an adapter (event generate), is one JSON line in
$GPUOPS_SIM_STATE/lora.jsonl (event, name, path, ok, status, pid, port, time), and GET /sim/lora answers this
server's loaded adapters and events. Tests judge by them.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

RUNTIME_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
RECORD_NAME = "lora.jsonl"
LOAD_PATH = "/v1/load_lora_adapter"
UNLOAD_PATH = "/v1/unload_lora_adapter"
PATHS = (LOAD_PATH, UNLOAD_PATH)
DEFAULT_MAX_LORAS = 1  # vLLM's default


def runtime_updating(env: Mapping[str, str]) -> bool:
    """As vLLM reads VLLM_ALLOW_RUNTIME_LORA_UPDATING: '1' or 'true', any case, spaces around ignored."""
    return env.get(RUNTIME_ENV, "0").strip().lower() in ("1", "true")


def parse_lora_modules(values: Optional[Sequence[str]], error: Callable[[str], None]) -> Tuple[Tuple[str, str], ...]:
    """--lora-modules' words: name=path, or JSON {"name": ..., "path": ...} (base_model_name ignored)."""
    modules: List[Tuple[str, str]] = []
    for value in values or ():
        if value.lstrip().startswith("{"):
            try:
                given = json.loads(value)
            except ValueError as exc:
                error(f"--lora-modules: invalid JSON {value!r}: {exc}")
                raise
            if not isinstance(given, dict) or not given.get("name") or not given.get("path"):
                error(f"--lora-modules: a JSON module needs name and path, got {value!r}")
            modules.append((str(given["name"]), str(given["path"])))
        else:
            name, sep, path = value.partition("=")
            if not sep or not name or not path:
                error(f"--lora-modules: expected name=path, got {value!r}")
            modules.append((name, path))
    return tuple(modules)


def missing(path: str) -> str:
    """vLLM's words when no adapter is at ``path``; '' when something is there."""
    return "" if os.path.exists(path) else f"Loading lora {path} failed: No adapter found for {path}"


class LoraError(Exception):
    """A load or unload refused, with vLLM's status and error type."""

    def __init__(self, status: int, message: str, err_type: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type


class LoraAdapters:
    """The adapters one API server serves, in load order, and its record of loads and unloads."""

    def __init__(self, enabled: bool, max_loras: int, runtime: bool, port: Optional[int],
                 record: Optional[Path] = None) -> None:
        self.enabled = enabled
        self.max_loras = max_loras
        self.runtime = runtime
        self.port = port
        self.record = record
        self._loaded: Dict[str, str] = {}
        self._events: List[Dict[str, Any]] = []
        self._lock = threading.Lock()

    @classmethod
    def for_server(cls, enabled: bool, max_loras: int, modules: Sequence[Tuple[str, str]], port: Optional[int],
                   env: Optional[Mapping[str, str]] = None) -> "LoraAdapters":
        """The adapters of a server just started: its --lora-modules loaded (each checked at parse time)."""
        env = os.environ if env is None else env
        state = env.get("GPUOPS_SIM_STATE")
        adapters = cls(enabled, max_loras, runtime_updating(env), port, Path(state) / RECORD_NAME if state else None)
        for name, path in modules:
            adapters.load(name, path, "start")
        return adapters

    def names(self) -> List[str]:
        with self._lock:
            return list(self._loaded)

    def cards(self, parent: str, created: int) -> List[Dict[str, Any]]:
        """/v1/models' entries of the adapters, as vLLM lists them after the base model."""
        with self._lock:
            return [{"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": path,
                     "parent": parent, "max_model_len": None} for name, path in self._loaded.items()]

    def report(self) -> Dict[str, Any]:
        """GET /sim/lora: what this server serves and every load and unload it saw."""
        with self._lock:
            return {"enabled": self.enabled, "runtime_updating": self.runtime, "max_loras": self.max_loras,
                    "loaded": [{"name": name, "path": path} for name, path in self._loaded.items()],
                    "events": [dict(event) for event in self._events]}

    def load(self, name: str, path: str, source: str = "api") -> str:
        """Load ``name`` from ``path``; the success line, or LoraError as vLLM answers."""
        with self._lock:
            try:
                if not name or not path:
                    raise LoraError(400, "Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput")
                if not self.enabled:
                    raise LoraError(400, "LoRA is not enabled. Use --enable-lora to enable LoRA.", "BadRequestError")
                if name in self._loaded:
                    raise LoraError(400, f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput")
                why = missing(path)
                if why:
                    raise LoraError(404, why, "NotFoundError")
                if len(self._loaded) >= self.max_loras:
                    raise LoraError(400, f"Loading lora {name} failed: {len(self._loaded)} adapters are loaded,"
                                    f" --max-loras is {self.max_loras}", "BadRequestError")
            except LoraError as exc:
                self._note("load", name, path, source, False, exc.status)
                raise
            self._loaded[name] = path
            self._note("load", name, path, source, True, 200)
        return f"Success: LoRA adapter '{name}' added successfully."

    def generated(self, model: str) -> None:
        """A completion asked for ``model``: recorded when it is an adapter (event generate)."""
        with self._lock:
            if model in self._loaded:
                self._note("generate", model, self._loaded[model], "api", True, 200)

    def unload(self, name: str) -> str:
        with self._lock:
            if not name:
                self._note("unload", name, None, "api", False, 400)
                raise LoraError(400, "either 'lora_name' and 'lora_int_id' needs to be provided.", "InvalidUserInput")
            if name not in self._loaded:
                self._note("unload", name, None, "api", False, 404)
                raise LoraError(404, f"The lora adapter '{name}' cannot be found.", "NotFoundError")
            path = self._loaded.pop(name)
            self._note("unload", name, path, "api", True, 200)
        return f"Success: LoRA adapter '{name}' removed successfully."

    def _note(self, event: str, name: str, path: Optional[str], source: str, ok: bool, status: int) -> None:
        entry = {"event": event, "name": name, "path": path, "source": source, "ok": ok, "status": status,
                 "pid": os.getpid(), "port": self.port, "time": round(time.time(), 6)}
        self._events.append(entry)
        if self.record is not None:
            try:
                with open(self.record, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(entry, sort_keys=True) + "\n")
            except OSError:
                pass  # the state directory went away: the endpoint still has it


def request_fields(raw: bytes, fields: Sequence[str]) -> Dict[str, str]:
    """The string fields of a load or unload body (a missing one is ''); ValueError for a body that is not an object."""
    body = json.loads(raw or b"{}")
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    return {field: body.get(field) if isinstance(body.get(field), str) else "" for field in fields}


def read_record(state: Path) -> List[Dict[str, Any]]:
    """Every event of $GPUOPS_SIM_STATE/lora.jsonl, oldest first (tests read it)."""
    path = Path(state) / RECORD_NAME
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
