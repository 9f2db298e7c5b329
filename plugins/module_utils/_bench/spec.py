# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""vllm_benchmark's options, checked in full before any request is sent.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils and
its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import math
import os
import typing as t
from urllib.parse import urlsplit

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError

MAX_TOKENS = 1024 * 1024
MAX_REQUESTS = 1000000
MAX_CONCURRENCY = 4096
MAX_REPEATS = 100
MAX_TIMEOUT_S = 24 * 3600.0

# Every option of vllm_benchmark with its type and default, written once: the module's argument_spec is this
# table, and a unit test compares it with the module's DOCUMENTATION.
ARGUMENT_SPEC: t.Dict[str, t.Dict[str, t.Any]] = {
    "url": {"type": "str", "default": "http://127.0.0.1:8000"},
    "model": {"type": "str"},
    "endpoint": {"type": "str", "default": "completions", "choices": ["completions", "chat"]},
    "input_len": {"type": "int", "default": 1024},
    "output_len": {"type": "int", "default": 128},
    "num_requests": {"type": "int", "default": 64},
    "concurrency": {"type": "int", "default": 8},
    "request_rate": {"type": "float"},
    "warmup_requests": {"type": "int", "default": 4},
    "repeats": {"type": "int", "default": 3},
    "timeout": {"type": "float", "default": 300.0},
    "api_key": {"type": "str", "no_log": True},
    "seed": {"type": "int", "default": 0},
    "ignore_eos": {"type": "bool", "default": True},
    "validate_certs": {"type": "bool", "default": True},
    "save_result": {"type": "path"},
}


class BenchSpec(t.NamedTuple):
    url: str
    model: t.Optional[str]
    endpoint: str
    input_len: int
    output_len: int
    num_requests: int
    concurrency: int
    request_rate: float
    warmup_requests: int
    repeats: int
    timeout: float
    api_key: t.Optional[str]
    seed: int
    ignore_eos: bool
    validate_certs: bool
    save_result: t.Optional[str]


def _whole(option: str, value: t.Any, lower: int, upper: int, unit: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError("%s: %r is not a whole number of %s" % (option, value, unit))
    if not lower <= value <= upper:
        raise SpecError("%s: %r is out of range: give %d to %d %s" % (option, value, lower, upper, unit))
    return value


def _positive(option: str, value: t.Any, upper: float, unit: str, infinite: bool = False) -> float:
    if isinstance(value, bool):
        raise SpecError("%s: %r is not a number of %s" % (option, value, unit))
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise SpecError("%s: %r is not a number of %s" % (option, value, unit)) from None
    if math.isnan(number) or number <= 0 or (math.isinf(number) and not infinite):
        raise SpecError("%s: %r must be a positive%s number of %s" % (option, value, "" if infinite else ", finite", unit))
    if number > upper and not (infinite and math.isinf(number)):
        raise SpecError("%s: %r is more than the %g %s allowed" % (option, value, upper, unit))
    return number


def _url(value: t.Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError("url: %r is not a URL; give the server's base URL, e.g. http://127.0.0.1:8000" % (value,))
    url = value.strip()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise SpecError("url: %r is not a valid URL: %s" % (value, exc)) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError("url: %r must be an http:// or https:// URL with a host, e.g. http://127.0.0.1:8000" % (value,))
    if port == 0:
        raise SpecError("url: %r has port 0" % (value,))
    return url


def build_spec(params: t.Mapping[str, t.Any]) -> BenchSpec:
    """Every option checked; raises SpecError naming the option and the value. A missing option takes its default."""
    def get(option: str) -> t.Any:
        return params[option] if option in params else ARGUMENT_SPEC[option].get("default")

    model = get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise SpecError("model: %r is empty; omit it to use the first model the server lists" % (model,))
    endpoint = get("endpoint")
    if endpoint not in ("completions", "chat"):
        raise SpecError("endpoint: %r is not one of completions, chat" % (endpoint,))
    seed = get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SpecError("seed: %r is not a whole number" % (seed,))
    save_result = get("save_result")
    if save_result is not None:
        save_result = str(save_result)
        if not save_result or save_result.endswith("/"):
            raise SpecError("save_result: %r is not a file path" % (save_result,))
        parent = os.path.dirname(os.path.abspath(save_result))
        if not os.path.isdir(parent):
            raise SpecError("save_result: %r: the directory %s does not exist" % (save_result, parent))
        if os.path.isdir(save_result):
            raise SpecError("save_result: %r is a directory; give a file path" % (save_result,))
    api_key = get("api_key")
    if api_key is not None and not isinstance(api_key, str):
        raise SpecError("api_key: not a string")
    return BenchSpec(
        url=_url(get("url")),
        model=model.strip() if model else None,
        endpoint=endpoint,
        input_len=_whole("input_len", get("input_len"), 1, MAX_TOKENS, "words"),
        output_len=_whole("output_len", get("output_len"), 1, MAX_TOKENS, "tokens"),
        num_requests=_whole("num_requests", get("num_requests"), 1, MAX_REQUESTS, "requests"),
        concurrency=_whole("concurrency", get("concurrency"), 1, MAX_CONCURRENCY, "streams"),
        request_rate=(float("inf") if get("request_rate") is None
                      else _positive("request_rate", get("request_rate"), 1e6, "requests per second", infinite=True)),
        warmup_requests=_whole("warmup_requests", get("warmup_requests"), 0, MAX_REQUESTS, "requests"),
        repeats=_whole("repeats", get("repeats"), 1, MAX_REPEATS, "repeats"),
        timeout=_positive("timeout", get("timeout"), MAX_TIMEOUT_S, "seconds"),
        api_key=api_key or None,
        seed=seed,
        ignore_eos=bool(get("ignore_eos")),
        validate_certs=bool(get("validate_certs")),
        save_result=save_result,
    )
