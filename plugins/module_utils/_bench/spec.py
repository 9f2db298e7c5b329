# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""vllm_benchmark's options, checked in full before any request is sent.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import math
import os
import typing as t
from urllib.parse import urlsplit

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.dataset import Dataset
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.sessions import Sessions
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import percentile_label
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.trace import Trace
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.workload import (
    DATASET, REPLAY, SESSIONS, SYNTHETIC, Synthetic, whole as _whole, workload_spec)

MAX_TOKENS = 1024 * 1024
MAX_REQUESTS = 1000000
MAX_CONCURRENCY = 4096
MAX_REPEATS = 100
MAX_TIMEOUT_S = 24 * 3600.0
MAX_LEVELS = 64
DEFAULT_NUM_REQUESTS = 64
GOODPUT_KEYS = ("ttft_ms", "tpot_ms", "e2el_ms")

# vllm_benchmark's defaults, written once: build_spec() falls back to them for a missing parameter, and the module's
# ARGUMENT_SPEC names them from here. An endpoint or concurrency left unset has a default that depends on the rest
# (DEFAULT_ENDPOINT with its fallback to chat; DEFAULT_CONCURRENCY, none for a replay).
DEFAULT_ENDPOINT = "completions"
DEFAULT_CONCURRENCY = [8]
DEFAULTS: t.Dict[str, t.Any] = {
    "url": "http://127.0.0.1:8000",
    "model": None,
    "endpoint": None,
    "input_len": 1024,
    "output_len": 128,
    "num_requests": None,
    "duration": None,
    "concurrency": None,
    "request_rate": None,
    "knee_tolerance": 10.0,
    "percentiles": [50.0, 90.0, 99.0],
    "goodput": None,
    "metrics_url": None,
    "warmup_requests": 4,
    "repeats": 3,
    "timeout": 300.0,
    "api_key": None,
    "seed": 0,
    "ignore_eos": True,
    "validate_certs": True,
    "save_result": None,
    "workload": None,
}
ENDPOINTS = ("completions", "chat")


class BenchSpec(t.NamedTuple):
    """The options, checked. `concurrency` and `request_rate` are the level being run (the first one of a sweep);
    `concurrency_levels` and `request_rates` every level given; `levels()` a spec for each. `concurrency` 0 is no
    limit (a replay's default). `workload` is the workload loaded (workload.Synthetic, dataset.Dataset, trace.Trace or
    sessions.Sessions); `endpoint_fallback` is true when the endpoint was left unset, so a server that answers 404 on
    /v1/completions is measured through chat."""
    url: str
    model: t.Optional[str]
    endpoint: str
    input_len: int
    output_len: int
    num_requests: t.Optional[int]  # None: as many as `duration` allows
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
    duration: t.Optional[float] = None
    concurrency_levels: t.Tuple[int, ...] = ()
    request_rates: t.Tuple[float, ...] = ()
    knee_tolerance: float = 10.0
    percentiles: t.Tuple[float, ...] = (50.0, 90.0, 99.0)
    goodput: t.Optional[t.Dict[str, float]] = None  # only the targets given, in milliseconds
    metrics_url: t.Optional[str] = None  # None: <url>/metrics; "": no /metrics read at all
    workload: t.Any = None  # None: synthetic
    endpoint_fallback: bool = False

    @property
    def kind(self) -> str:
        return self.workload.kind if self.workload is not None else SYNTHETIC

    @property
    def sweep_option(self) -> t.Optional[str]:
        """The option whose list of levels is swept, or None for one level."""
        if len(self.concurrency_levels) > 1:
            return "concurrency"
        if len(self.request_rates) > 1:
            return "request_rate"
        return None

    def levels(self) -> t.List["BenchSpec"]:
        """One spec per level of the sweep, in the order given (a single one without a sweep)."""
        if self.sweep_option == "concurrency":
            return [self._replace(concurrency=level) for level in self.concurrency_levels]
        if self.sweep_option == "request_rate":
            return [self._replace(request_rate=level) for level in self.request_rates]
        return [self]


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


def _levels(option: str, value: t.Any, check: t.Callable[[t.Any], t.Any]) -> t.Tuple[t.Any, ...]:
    """One level or a list of them (a sweep), each checked; never empty, no level twice."""
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise SpecError("%s: [] is an empty sweep: give one level or a list of levels" % option)
    if len(values) > MAX_LEVELS:
        raise SpecError("%s: %d levels are more than the %d a sweep may have" % (option, len(values), MAX_LEVELS))
    levels = tuple(check(item) for item in values)
    for index, level in enumerate(levels):
        if level in levels[:index]:
            raise SpecError("%s: %r is given twice in %r; give each level once" % (option, values[index], list(values)))
    return levels


def _percentiles(value: t.Any) -> t.Tuple[float, ...]:
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise SpecError("percentiles: [] is empty: give at least one, e.g. [50, 90, 99]")
    chosen: t.Dict[str, float] = {}
    for item in values:
        number = None if isinstance(item, bool) else _number(item)
        if number is None or not 0 < number <= 100:
            raise SpecError("percentiles: %r is not a percentile: give numbers more than 0 and at most 100" % (item,))
        chosen.setdefault(percentile_label(number), number)
    return tuple(sorted(chosen.values()))


def _number(value: t.Any) -> t.Optional[float]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _goodput(value: t.Any) -> t.Optional[t.Dict[str, float]]:
    """The service-level targets given, in milliseconds; None when the option is not set."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpecError("goodput: %r is not a dict of targets in milliseconds (%s)" % (value, ", ".join(GOODPUT_KEYS)))
    unknown = sorted(str(key) for key in value if key not in GOODPUT_KEYS)
    if unknown:
        raise SpecError("goodput: unknown key %s in %r; the targets are %s (milliseconds)"
                        % (", ".join(repr(key) for key in unknown), value, ", ".join(GOODPUT_KEYS)))
    targets = {key: _positive("goodput.%s" % key, value[key], MAX_TIMEOUT_S * 1000, "milliseconds")
               for key in GOODPUT_KEYS if value.get(key) is not None}
    if not targets:
        raise SpecError("goodput: %r sets no target; give at least one of %s (milliseconds)" % (value, ", ".join(GOODPUT_KEYS)))
    return targets


def _metrics_url(value: t.Any) -> t.Optional[str]:
    """None: <url>/metrics; '': skip; else an http(s) URL or a path under the server's base URL."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise SpecError("metrics_url: %r is not a URL" % (value,))
    url = value.strip()
    if not url or url.startswith("/"):
        return url
    try:
        parts = urlsplit(url)
        parts.port  # pylint: disable=pointless-statement  # raises ValueError on a bad port
    except ValueError as exc:
        raise SpecError("metrics_url: %r is not a valid URL: %s" % (value, exc)) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError("metrics_url: %r must be an http:// or https:// URL, a path such as /vllm/metrics, or empty to skip "
                        "the server's counters" % (value,))
    return url


def build_spec(params: t.Mapping[str, t.Any]) -> BenchSpec:
    """Every option checked; raises SpecError naming the option and the value. A missing option takes its default."""
    def get(option: str) -> t.Any:
        return params[option] if option in params else DEFAULTS[option]

    model = get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise SpecError("model: %r is empty; omit it to use the first model the server lists" % (model,))
    endpoint = get("endpoint")
    endpoint_fallback = endpoint is None
    if endpoint_fallback:
        endpoint = DEFAULT_ENDPOINT
    if endpoint not in ENDPOINTS:
        raise SpecError("endpoint: %r is not one of completions, chat" % (endpoint,))
    workload = workload_spec(get("workload"))
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
    duration = None if get("duration") is None else _positive("duration", get("duration"), MAX_TIMEOUT_S, "seconds")
    num_requests = get("num_requests")
    if workload.kind == SESSIONS and num_requests is not None:
        raise SpecError("num_requests: %r is not used by a sessions workload: workload.sessions x workload.turns are "
                        "the requests of a repeat" % (num_requests,))
    if workload.kind in (REPLAY, SESSIONS) and get("request_rate") is not None:
        raise SpecError("request_rate: %r is not used by a %s workload: %s" % (
            get("request_rate"), workload.kind, "the trace's timestamps set the arrivals" if workload.kind == REPLAY
            else "each turn follows the answer to the one before (workload.think_time)"))
    if num_requests is None and duration is None and workload.kind not in (REPLAY, SESSIONS):
        num_requests = DEFAULT_NUM_REQUESTS
    if get("concurrency") is None:
        concurrency: t.Tuple[int, ...] = (0,) if workload.kind == REPLAY else tuple(DEFAULT_CONCURRENCY)
    else:
        concurrency = _levels("concurrency", get("concurrency"),
                              lambda value: _whole("concurrency", value, 1, MAX_CONCURRENCY, "streams"))
    rates = (float("inf"),) if get("request_rate") is None else _levels(
        "request_rate", get("request_rate"),
        lambda value: _positive("request_rate", value, 1e6, "requests per second", infinite=True))
    if len(concurrency) > 1 and len(rates) > 1:
        raise SpecError("concurrency: %r and request_rate: %r are both lists; sweep one of them and give the other one value"
                        % (list(concurrency), list(rates)))
    knee_tolerance = _positive("knee_tolerance", get("knee_tolerance"), 100.0, "percent")
    if knee_tolerance >= 100:
        raise SpecError("knee_tolerance: %r must be less than 100 percent" % (get("knee_tolerance"),))
    input_len = _whole("input_len", get("input_len"), 1, MAX_TOKENS, "words")
    output_len = _whole("output_len", get("output_len"), 1, MAX_TOKENS, "tokens")
    if num_requests is not None:
        num_requests = _whole("num_requests", num_requests, 1, MAX_REQUESTS, "requests")
    # the workload's file is read last, once every option is known good
    if workload.kind == DATASET:
        loaded: t.Any = Dataset(workload, seed, output_len)
    elif workload.kind == REPLAY:
        loaded = Trace(workload, seed)
        if duration is None:
            num_requests = loaded.count(num_requests)
    elif workload.kind == SESSIONS:
        loaded = Sessions(workload, seed, input_len, output_len)
        num_requests = None if duration is not None else loaded.requests
    else:
        loaded = Synthetic(input_len, output_len)
    return BenchSpec(
        url=_url(get("url")),
        model=model.strip() if model else None,
        endpoint=endpoint,
        input_len=input_len,
        output_len=output_len,
        num_requests=num_requests,
        concurrency=concurrency[0],
        request_rate=rates[0],
        duration=duration,
        concurrency_levels=concurrency,
        request_rates=rates,
        knee_tolerance=knee_tolerance,
        percentiles=_percentiles(get("percentiles")),
        goodput=_goodput(get("goodput")),
        metrics_url=_metrics_url(get("metrics_url")),
        warmup_requests=_whole("warmup_requests", get("warmup_requests"), 0, MAX_REQUESTS, "requests"),
        repeats=_whole("repeats", get("repeats"), 1, MAX_REPEATS, "repeats"),
        timeout=_positive("timeout", get("timeout"), MAX_TIMEOUT_S, "seconds"),
        api_key=api_key or None,
        seed=seed,
        ignore_eos=bool(get("ignore_eos")),
        validate_certs=bool(get("validate_certs")),
        save_result=save_result,
        workload=loaded,
        endpoint_fallback=endpoint_fallback,
    )
