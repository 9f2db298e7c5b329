# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a server's own endpoints answer: its listed models, its requests in flight, the drain."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._server.answers import drain, in_flight, listed_models
from ansible_collections.gpuops.fleet.tests.unit.plugins.loopback_http import LoopbackServer


@pytest.mark.parametrize("body, expected", [
    ('{"object": "list", "data": [{"id": "a"}, {"id": "b"}]}', ["a", "b"]),
    ('{"data": "x"}', []), ("not json", []), ("[]", []),
])
def test_listed_models(body, expected):
    assert listed_models(body) == expected


def test_in_flight_adds_running_and_waiting_over_engines():
    text = ('vllm:num_requests_running{engine="0",model_name="m"} 2\nvllm:num_requests_running{engine="1",model_name="m"} 1\n'
            'vllm:num_requests_waiting{engine="0",model_name="m"} 4\nvllm:num_requests_running_total 50\n')
    server = LoopbackServer(lambda handler, raw: (200, text.encode()) if handler.path == "/metrics" else (404, b""))
    try:
        assert in_flight(server.url) == 7
        assert [path for _method, path, _headers, _body in server.seen] == ["/metrics"]
    finally:
        server.close()


def test_in_flight_without_metrics_is_none_and_nothing_to_drain():
    server = LoopbackServer(lambda handler, raw: (404, b""))
    try:
        assert in_flight(server.url) is None
        result = drain(server.url, timeout=1.0, interval=0.05)
        assert result["answered"] is False and result["drained"] is True and result["cut"] == 0
    finally:
        server.close()


def test_drain_waits_until_no_request_is_left():
    readings = ["3", "1", "0"]

    def answer(handler, raw):
        value = readings.pop(0) if len(readings) > 1 else readings[0]
        return 200, ("vllm:num_requests_running %s\n" % value).encode()

    server = LoopbackServer(answer)
    try:
        result = drain(server.url, timeout=10.0, interval=0.01)
        assert result["running_at_start"] == 3 and result["drained"] is True and result["cut"] == 0
        assert len(server.seen) == 3
    finally:
        server.close()
