# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What a vLLM server's own endpoints answer: the models it lists (/v1/models), the requests it has in flight
(/metrics), and the drain that waits until none is left. The requests go through _http/request.py, the Prometheus
text through _http/prometheus.py.

Package rule (_server): one vLLM server's process, record, lock, HTTP answers and checks. It imports the flat files
of module_utils, _http, _host, _gpu and its own files: never _reclaim, _bench or _report, and never a module; nothing in
_gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import time
import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._http.prometheus import total
from ansible_collections.gpuops.fleet.plugins.module_utils._http.request import http_get


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
    values = [total(reply.body, name) for name in IN_FLIGHT_METRICS]
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
