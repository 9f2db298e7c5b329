# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Small HTTP requests to a vLLM server's own endpoints (/health, /v1/models, /metrics, one short completion).

The standard library only: these run on the GPU host, where the collection asks for
nothing but nvidia-ml-py and psutil. One request over http.client, straight to the server: a check of
the server's own port goes through no proxy (as vllm_benchmark's client), follows no redirect, and
checks the certificate of an https URL against the system's CAs. Not ansible.module_utils.urls: a
module run compiles every module_utils file it imports from the AnsiballZ zip, and urls with the TLS
helpers it pulls in cost about 90 ms of host CPU per module run, several module runs per restart.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
import typing as t
import urllib.parse


class Reply(t.NamedTuple):
    status: t.Optional[int]  # None when no HTTP answer came (refused, reset, timed out)
    body: str
    error: t.Optional[str]  # why there is no answer, in a few words

    def describe(self) -> str:
        return "HTTP %d" % self.status if self.status is not None else (self.error or "no answer")


def http_get(url: str, timeout: float, headers: t.Optional[t.Mapping[str, str]] = None) -> Reply:
    """GET ``url``; an HTTP error status is a Reply too, a connection failure a Reply without status."""
    return http_request("GET", url, timeout, headers)


def http_post_json(url: str, payload: t.Any, timeout: float, headers: t.Optional[t.Mapping[str, str]] = None) -> Reply:
    """POST ``payload`` as JSON to ``url``, as http_get reads the answer."""
    sent = dict(headers or {})
    sent["Content-Type"] = "application/json"
    return http_request("POST", url, timeout, sent, json.dumps(payload).encode("utf-8"))


def http_request(method: str, url: str, timeout: float, headers: t.Optional[t.Mapping[str, str]] = None,
                 body: t.Optional[bytes] = None) -> Reply:
    """One request to ``url``, straight to the server; ``timeout`` bounds each socket operation."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return Reply(None, "", "not an http or https URL: %s" % url)
    target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    connection: http.client.HTTPConnection
    try:
        if parts.scheme == "https":
            import ssl  # pylint: disable=import-outside-toplevel  # only for https
            connection = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout,
                                                     context=ssl.create_default_context())
        else:
            connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    except ValueError as exc:  # a port that is not a number
        return Reply(None, "", "bad URL %s: %s" % (url, exc))
    try:
        connection.request(method, target, body=body, headers=dict(headers or {}))
        response = connection.getresponse()
        return Reply(response.status, response.read().decode("utf-8", errors="replace"), None)
    except (socket.timeout, TimeoutError):
        return Reply(None, "", "timed out after %g s" % timeout)
    except (http.client.HTTPException, OSError) as exc:
        return Reply(None, "", _reason(exc))
    finally:
        connection.close()


def _reason(reason: t.Any) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "timed out"
    return str(reason) or reason.__class__.__name__


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{[^}]*\})?\s+(?P<value>\S+)")


def metric_sum(text: str, name: str) -> t.Optional[float]:
    """The sum over all label sets of one metric in Prometheus text format; None when the metric is absent."""
    total: t.Optional[float] = None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None or match.group("name") != name:
            continue
        try:
            value = float(match.group("value"))
        except ValueError:
            continue
        total = value if total is None else total + value
    return total


def listed_models(body: str) -> t.List[str]:
    """The model ids of an OpenAI-style /v1/models answer (empty when it is not one)."""
    try:
        data = json.loads(body)
    except ValueError:
        return []
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return []
    return [str(entry.get("id")) for entry in entries if isinstance(entry, dict) and "id" in entry]


IN_FLIGHT_METRICS = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def in_flight(url: str) -> t.Optional[int]:
    """Requests running plus waiting on the server at ``url`` (its base URL), from /metrics; None when the server
    does not answer or exposes neither metric."""
    reply = http_get(url + "/metrics", timeout=5.0)
    if reply.status != 200:
        return None
    values = [metric_sum(reply.body, name) for name in IN_FLIGHT_METRICS]
    known = [value for value in values if value is not None]
    return int(sum(known)) if known else None


def drain(url: str, timeout: float, interval: float, wait: bool = True) -> t.Dict[str, t.Any]:
    """Wait, bounded by ``timeout`` seconds, until the server has no request in flight (read every ``interval`` s;
    only once when not ``wait``, as in check mode). Returns answered, running_at_start, cut, drained, waited_s and a
    one-line msg; shared by vllm_drain and vllm_process (a stop that drains first)."""
    start = time.monotonic()
    first = in_flight(url)
    result: t.Dict[str, t.Any] = {"answered": first is not None, "running_at_start": first}
    if first is None:
        result.update(cut=0, drained=True, waited_s=0.0, msg="%s/metrics did not answer: nothing to drain" % url)
        return result
    current = first
    while current and wait and time.monotonic() - start < timeout:
        time.sleep(interval)
        reading = in_flight(url)
        if reading is None:  # the server went away while we waited: its requests are gone with it
            break
        current = reading
    waited = round(time.monotonic() - start, 2)
    result.update(cut=current or 0, drained=not current, waited_s=waited)
    if not current:
        result["msg"] = "no request in flight (waited %.1f s, %d at start)" % (waited, first)
    else:
        result["msg"] = "%d request(s) still in flight after %.1f s" % (current, waited)
    return result
